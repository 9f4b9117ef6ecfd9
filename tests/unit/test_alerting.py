"""The referee's alerts as Alertmanager alerts (issue 26; streams.alerting): labels a routing
tree can use, annotations a person can act on, resolution when what they ask for is done, and a
forwarder that posts each change once and re-posts nothing new after a restart."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from streams.alerting.book import AlertBook
from streams.alerting.forwarder import Forwarder
from streams.alerting.mapping import alertname, iso, labels_of, to_alertmanager
from streams.control.commands import ControlCommand
from streams.kafka.topics import TopicNames
from streams.records import Alert, DivergenceManifest

REPO = Path(__file__).resolve().parents[2]


def alert(kind, **kw):
    base = {"alert_id": f"id-{kind}-{kw.get('job_id')}", "kind": kind, "cohort_id": "c1", "job_id": None,
            "checkpoint_id": None, "incident_id": None, "message": f"{kind} happened", "details": {}, "ts": 1000}
    return Alert(**{**base, **kw})


def control(kind, job_id, command_id, issued_ts, reason=None):
    action = {"RollbackCommand": "ROLLBACK", "PlanCleared": "CLEAR"}.get(kind, reason)
    return ControlCommand(kind=kind, command_id=command_id, job_id=job_id, action=action, reason=reason,
                          issued_ts=issued_ts)


def manifest(incident_id, version, plans):
    return DivergenceManifest(incident_id=incident_id, version=version, root={}, verdict="INTERNAL", attributed_to=(),
                              contaminated=(), secondary_divergences=(), tainted_checkpoints=(), plans=tuple(plans),
                              concurrency_snapshot=(), ts=0)


def test_labels_route_and_annotations_act():
    a = to_alertmanager(alert("HALT", job_id="j7", message="j7 halted: UNTRACEABLE_SOURCE: ..."),
                        page_url="http://ui:6070")
    assert a["labels"] == {"alertname": "TraintraceHalt", "kind": "HALT", "severity": "critical",
                           "source": "traintrace", "cohort": "c1", "job": "j7"}
    assert "traintrace release j7" in a["annotations"]["action"]
    assert a["annotations"]["url"] == "http://ui:6070/#job=j7" and a["startsAt"] == iso(1000)
    assert "endsAt" not in a
    opened = labels_of(alert("INCIDENT_OPENED", job_id="a", incident_id="x1"))
    widened = labels_of(alert("INCIDENT_WIDENED", job_id="b", incident_id="x1"))
    assert opened == widened and opened["alertname"] == "TraintraceIncident"  # one page per incident
    assert labels_of(alert("UNRECORDED_SHARING", job_id="a"))["alert_id"]  # one-offs: each its own
    assert alertname("COMMAND_UNACKNOWLEDGED") == "TraintraceCommandUnacknowledged"


def test_an_incident_resolves_when_every_plan_it_made_has_ended():
    book = AlertBook()
    book.add_alert(alert("INCIDENT_OPENED", job_id="a", incident_id="x1", ts=1000))
    book.add_alert(alert("INCIDENT_WIDENED", job_id="a", incident_id="x1", ts=2000, message="widened"))
    ((_k, posted, ends),) = book.postable()
    assert ends is None and posted["startsAt"] == iso(1000) and posted["annotations"]["summary"] == "widened"
    book.add_manifest(manifest("x1", 2, [{"job_id": "a", "command_id": "ca"}, {"job_id": "b", "command_id": "cb"}]))
    book.add_control(control("RollbackCommand", "a", "ca", 2100))
    book.add_control(control("RollbackCommand", "b", "cb", 2100))
    assert book.postable()[0][2] is None
    book.add_control(control("PlanCleared", "a", "clr-a", 3000))
    assert book.postable()[0][2] is None  # b still has its plan
    book.add_control(control("PlanCleared", "b", "clr-b", 4000))
    ((_k, posted, ends),) = book.postable()
    assert ends == 4000 and posted["endsAt"] == iso(4000)


def test_a_halt_resolves_on_release_and_one_offs_end_by_themselves():
    book = AlertBook(info_ttl_ms=10_000)
    book.add_alert(alert("HALT", job_id="j", ts=1000))
    book.add_alert(alert("RESTORE_SUBSTITUTED", job_id="j", ts=1500))
    book.add_control(control("HaltCommand", "j", "h", 1000, reason="UNTRACEABLE_SOURCE"))
    ends = {p["labels"]["kind"]: e for _k, p, e in book.postable()}
    assert ends == {"HALT": None, "RESTORE_SUBSTITUTED": 11_500}
    book.add_control(control("HaltCommand", "j", "r", 5000, reason="RELEASE"))
    assert {p["labels"]["kind"]: e for _k, p, e in book.postable()}["HALT"] == 5000


class FakeAM:
    def __init__(self):
        self.batches, self.down = [], False

    def __call__(self, alerts):
        if self.down:
            raise OSError("connection refused")
        self.batches.append(json.loads(json.dumps(alerts)))


def test_the_forwarder_posts_each_change_once_retries_a_refusal_and_pages_nobody_twice_after_a_restart():
    am = FakeAM()
    fw = Forwarder("unused:9092", TopicNames.from_env("t."), am)
    fw.book.add_alert(alert("HALT", job_id="j", ts=1000))
    assert fw.flush(now_ms=2000) == 1 and fw.flush(now_ms=2001) == 0  # nothing changed
    assert fw.flush(now_ms=2002, resend=True) == 1  # still active: re-posted (Alertmanager's resolve_timeout)
    am.down = True
    fw.book.add_control(control("HaltCommand", "j", "r", 3000, reason="RELEASE"))
    assert fw.flush(now_ms=3001) == 0 and fw.failures == 1
    am.down = False
    assert fw.flush(now_ms=3002) == 1 and am.batches[-1][0]["endsAt"] == iso(3000)
    assert fw.flush(now_ms=3003, resend=True) == 0  # ended: not re-posted
    # a restarted forwarder posts the same labels again: Alertmanager deduplicates them
    again = Forwarder("unused:9092", TopicNames.from_env("t."), am)
    again.book = fw.book
    again.flush(now_ms=4000)
    assert am.batches[-1][0]["labels"] == am.batches[0][0]["labels"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is not installed")
def test_the_shipped_rules_pass_promtool():
    p = subprocess.run(["promtool", "check", "rules", str(REPO / "deploy/prometheus/traintrace-rules.yml")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool (Debian's prometheus-alertmanager) is not installed")
def test_the_shipped_alertmanager_config_passes_amtool():
    p = subprocess.run(["amtool", "check-config", str(REPO / "deploy/alertmanager/alertmanager.yml")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_every_metric_a_rule_reads_is_one_the_worker_exposes():
    import re

    import yaml

    from streams.worker import metrics

    names = set()
    for m in metrics.REGISTRY.collect():
        names |= {m.name, m.name + "_total"}  # a counter's family drops _total; one without samples yet
        names |= {s.name for s in m.samples}
    rules = yaml.safe_load((REPO / "deploy/prometheus/traintrace-rules.yml").read_text())
    used = set()
    for g in rules["groups"]:
        for r in g["rules"]:
            used |= set(re.findall(r"\btraintrace_[a-z_]+", r["expr"]))
    missing = {u for u in used if u not in names and u + "_total" not in names}
    assert used and not missing, missing


def test_the_forwarder_reads_each_topic_through_its_types_and_skips_what_does_not_decode():
    from streams.codec import Codec
    from streams.records import HaltCommand

    from streams.codec.examples import example_records

    codec, topics = Codec(), TopicNames.from_env("t.")
    fw = Forwarder("unused:9092", topics, FakeAM(), codec=codec)
    example = [r for r in example_records() if r["type"] == "DivergenceManifest"][0]
    example = {k: v for k, v in example.items() if k != "type"}
    fw.fold(topics.alerts, codec.encode_typed(alert("HALT", job_id="j", ts=1000)))
    fw.fold(topics.manifests, codec.encode_record("DivergenceManifest", {**example, "incident_id": "x1", "version": 1}))
    fw.fold(topics.control, codec.encode_typed(HaltCommand(command_id="r", job_id="j", cohort_id="c1", reason="RELEASE",
                                                           detail="released", issued_ts=3000)))
    fw.fold(topics.alerts, b"junk")
    assert fw.undecodable == 1 and fw.book.manifests["x1"][0] == 1
    assert [job for job, _ in fw.book.manifests["x1"][1]] == ["job-a", "job-d"]
    ((_k, posted, ends),) = fw.book.postable()
    assert posted["labels"]["kind"] == "HALT" and ends == 3000
