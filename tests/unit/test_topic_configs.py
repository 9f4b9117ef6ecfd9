"""The configs of the pipeline's topics (issue 11): the audit trail does not expire.

Every topic the audit or recovery reads is created with ``retention.ms=-1``,
``retention.bytes=-1``, ``cleanup.policy=delete`` unless ``TRAINTRACE_RETENTION_MS`` says
otherwise, and a setting under which such a topic would lose records is found and named in one line.
"""

from __future__ import annotations

import pytest

from streams.kafka.errors import KafkaAdapterError
from streams.kafka.topics import (
    AUDIT_TOPICS,
    FiniteRetentionError,
    RetentionFinding,
    TopicNames,
    retention_from_env,
    standard_topics,
    topic_config_findings,
)

KEEP = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


def configs(names: TopicNames, **kw) -> dict[str, dict[str, str]]:
    return {name: dict(config or {}) for name, _parts, config in standard_topics(names, 8, **kw)}


def test_audit_topics_keep_everything_by_default(monkeypatch):
    monkeypatch.delenv("TRAINTRACE_RETENTION_MS", raising=False)
    names = TopicNames()
    got = configs(names)
    for field in AUDIT_TOPICS:
        assert got[getattr(names, field)] == KEEP, field
    assert got[names.manifests]["cleanup.policy"] == "delete"  # every version, never compacted
    assert got[names.checkpoints] == {"cleanup.policy": "compact"}  # a latest-status view
    assert got[names.alerts] == {}


def test_audit_topics_are_every_topic_the_audit_reads():
    from streams.audit.log import TOPICS
    from streams.audit.export import DEFAULT_TOPICS

    # and the snapshots (compacted: not an audit topic for retention, but the audit checks them)
    assert {TOPICS[t] for t in DEFAULT_TOPICS} == set(AUDIT_TOPICS) | {"snapshots"}


def test_retention_from_env(monkeypatch):
    names = TopicNames()
    monkeypatch.setenv("TRAINTRACE_RETENTION_MS", "2592000000")
    assert retention_from_env() == 2_592_000_000
    got = configs(names)
    assert got[names.events] == {**KEEP, "retention.ms": "2592000000"}
    assert configs(names, retention_ms=-1)[names.events] == KEEP  # an explicit value wins
    for bad in ("soon", "0", "-5"):
        monkeypatch.setenv("TRAINTRACE_RETENTION_MS", bad)
        with pytest.raises(KafkaAdapterError, match="TRAINTRACE_RETENTION_MS"):
            retention_from_env()


def test_findings():
    kept = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
    assert topic_config_findings("t", kept) == []
    week = {**kept, "retention.ms": "604800000"}
    (f,) = topic_config_findings("lineage.events", week)
    assert (f.topic, f.setting, f.value) == ("lineage.events", "retention.ms", "604800000")
    assert f.describe().startswith("topic lineage.events has retention.ms=604800000: the audit trail would expire")
    assert "7 days" in f.describe()
    # a finite retention chosen by the user is the least accepted
    assert topic_config_findings("t", week, retention_ms=604_800_000) == []
    assert topic_config_findings("t", {**kept, "retention.ms": "2592000000"}, retention_ms=604_800_000) == []
    assert [x.setting for x in topic_config_findings("t", week, retention_ms=2_592_000_000)] == ["retention.ms"]
    assert [x.setting for x in topic_config_findings("t", {**kept, "cleanup.policy": "compact"})] == ["cleanup.policy"]
    assert [x.setting for x in topic_config_findings("t", {**kept, "cleanup.policy": "compact,delete"})] \
        == ["cleanup.policy"]
    assert [x.setting for x in topic_config_findings("t", {**kept, "retention.bytes": "1073741824"})] \
        == ["retention.bytes"]


def test_error_is_one_line_naming_topic_and_setting():
    findings = [RetentionFinding("lineage.events", "retention.ms", "604800000", "the audit trail would expire"),
                RetentionFinding("lineage.manifests", "cleanup.policy", "compact", "compacted away")]
    exc = FiniteRetentionError(findings, "kafka:9092")
    assert isinstance(exc, KafkaAdapterError)
    text = str(exc)
    assert "\n" not in text
    assert text.startswith("topic lineage.events has retention.ms=604800000: the audit trail would expire")
    assert "(1 more such setting)" in text
    assert "kafka-configs.sh --bootstrap-server kafka:9092" in text and "--entity-name lineage.events" in text
