"""The audit trail does not expire (issue 11), on a real broker.

- the topics the worker creates: nothing the audit or recovery reads can expire or be compacted
  (``describe_configs``: effective values, broker defaults included);
- a worker started on a log whose ``lineage.events`` (or ``lineage.manifests``) would lose
  records refuses in one line naming the topic and the setting (exit 2);
- with ``--allow-finite-retention`` it starts anyway (and warns).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import (
    AUDIT_TOPICS,
    FiniteRetentionError,
    TopicNames,
    check_audit_retention,
    ensure_topics,
    retention_findings,
    standard_topics,
)
from streams.devtools.worker_process import WorkerProcess

WEEK_MS = "604800000"


@pytest.fixture
def fresh(kafka_bootstrap):
    """A fresh topic prefix; its topics are deleted afterwards."""
    prefix = f"rt{uuid.uuid4().hex[:8]}."
    yield prefix, TopicNames.from_env(prefix)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    mine = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix) or t.startswith(f"tt-{prefix.rstrip('.')}-")]
    if mine:
        for fut in admin.delete_topics(mine, operation_timeout=30).values():
            try:
                fut.result()
            except Exception:
                pass


def describe(bootstrap: str, topics: list[str]) -> dict[str, dict[str, str]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics], request_timeout=30)
    return {res.name: {k: e.value for k, e in fut.result().items()} for res, fut in futures.items()}


def create(bootstrap: str, topic: str, config: dict[str, str], partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result()
    deadline = time.monotonic() + 30
    while topic not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_created_topics_keep_everything_the_audit_reads(kafka_bootstrap, fresh, monkeypatch):
    monkeypatch.delenv("TRAINTRACE_RETENTION_MS", raising=False)
    _prefix, names = fresh
    ensure_topics(kafka_bootstrap, standard_topics(names, 2))
    audit = [getattr(names, f) for f in AUDIT_TOPICS]
    got = describe(kafka_bootstrap, audit + [names.checkpoints])
    for topic in audit:
        conf = got[topic]
        assert conf["retention.ms"] == "-1", topic
        assert conf["retention.bytes"] == "-1", topic
        assert conf["cleanup.policy"] == "delete", topic
    assert got[names.checkpoints]["cleanup.policy"] == "compact"  # a latest-status view, not audited
    for topic, conf in got.items():  # one broker here: one replica, no unclean leader ever
        assert conf["unclean.leader.election.enable"] == "false", topic
    md = KafkaSettings.of(kafka_bootstrap).admin().list_topics(timeout=10)
    for topic in got:
        assert {len(p.replicas) for p in md.topics[topic].partitions.values()} == {min(3, len(md.brokers))}
    assert retention_findings(kafka_bootstrap, names) == []
    check_audit_retention(kafka_bootstrap, names)  # does not raise


def test_check_names_each_setting_that_loses_records(kafka_bootstrap, fresh):
    _prefix, names = fresh
    create(kafka_bootstrap, names.events, {"retention.ms": WEEK_MS})
    create(kafka_bootstrap, names.manifests, {"cleanup.policy": "compact"})
    create(kafka_bootstrap, names.dlq, {"retention.bytes": "1073741824"})
    found = {(f.topic, f.setting) for f in retention_findings(kafka_bootstrap, names)}
    # the manifests topic also gets the broker's default retention.ms (7 days here) unless set
    assert {(names.events, "retention.ms"), (names.manifests, "cleanup.policy"),
            (names.dlq, "retention.bytes")} <= found
    with pytest.raises(FiniteRetentionError) as info:
        check_audit_retention(kafka_bootstrap, names)
    assert str(info.value).startswith(f"topic {names.events} has retention.ms={WEEK_MS}: the audit trail would expire")
    # a user who archives and chose a week accepts a week, not compaction
    chosen = {(f.topic, f.setting) for f in retention_findings(kafka_bootstrap, names, retention_ms=int(WEEK_MS))}
    assert (names.events, "retention.ms") not in chosen and (names.manifests, "cleanup.policy") in chosen


def _worker(kafka_bootstrap, prefix, tmp_path, name, extra_args=()):
    return WorkerProcess(kafka_bootstrap, prefix, f"tt-{prefix.rstrip('.')}", tmp_path / name, partitions=2,
                         extra_args=["--loglevel", "warn", *extra_args]).start()


def _output_lines(w: WorkerProcess) -> list[str]:
    return [ln for ln in w.log_path.read_text(errors="replace").splitlines() if ln.strip()]


@pytest.mark.parametrize("field,config,setting,value", [
    ("events", {"retention.ms": WEEK_MS}, "retention.ms", WEEK_MS),
    ("manifests", {"cleanup.policy": "compact", "retention.ms": "-1"}, "cleanup.policy", "compact"),
])
def test_worker_refuses_a_log_that_would_lose_audit_records(kafka_bootstrap, fresh, tmp_path,
                                                            field, config, setting, value):
    prefix, names = fresh
    topic = getattr(names, field)
    create(kafka_bootstrap, topic, config)
    w = _worker(kafka_bootstrap, prefix, tmp_path, "refused")
    try:
        assert w.proc.wait(60) == 2, w.log_tail()
    finally:
        w.kill()
    lines = _output_lines(w)
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"error: topic {topic} has {setting}={value}: "), line
    assert "--allow-finite-retention" in line and "kafka-configs.sh" in line
    # it refused before touching the group: the other topics were created with the audit configs
    assert describe(kafka_bootstrap, [names.control])[names.control]["retention.ms"] == "-1"


def test_worker_starts_with_the_override(kafka_bootstrap, fresh, tmp_path):
    prefix, names = fresh
    create(kafka_bootstrap, names.events, {"retention.ms": WEEK_MS})
    w = _worker(kafka_bootstrap, prefix, tmp_path, "allowed", ["--allow-finite-retention"])
    try:
        w.wait_ready(timeout=120)
        assert w.get("/health") is not None
        assert w.alive()
    finally:
        w.stop()
    warned = [ln for ln in _output_lines(w) if "warning:" in ln and names.events in ln]
    assert warned and f"retention.ms={WEEK_MS}" in warned[0], w.log_tail()


def test_every_partition_is_open_on_its_leader_when_ensure_topics_returns(kafka_bootstrap, fresh):
    """A write may follow ``ensure_topics`` at once: each new partition answers ListOffsets on its
    leader (the metadata names a leader before the broker opened the partition, and an idempotent
    producer's first write refused then can be lost with no error: KAFKA-15591). Before the wait,
    about four new partitions in ten refused it here."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    _prefix, names = fresh
    topics = standard_topics(names, partitions=8)
    ensure_topics(kafka_bootstrap, topics)
    admin = KafkaSettings.of(kafka_bootstrap).admin()
    asked = {TopicPartition(name, p): OffsetSpec.earliest() for name, parts, _config in topics for p in range(parts)}
    refused = []
    for tp, fut in admin.list_offsets(asked, request_timeout=30).items():
        try:
            fut.result()
        except KafkaException as exc:
            refused.append(f"{tp.topic}[{tp.partition}]: {exc.args[0].name()}")
    assert not refused, f"{len(refused)} of {len(asked)} new partitions not open on their leader: {refused[:4]}"
