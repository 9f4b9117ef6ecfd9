"""The operators' commands (publish, plans, release, watch) against a real Kafka broker.

Each test gets a fresh topic prefix, so fresh topics, created as the pipeline creates them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from streams.devtools.broker import pick_free_port
from streams.files.jsonl import LineError, read_events
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.kafka.reader import TopicNotFound, read_to_end, topic_partitions
from streams.cli.main import cli
from streams.codec import Codec
from streams.core.events import event_to_dict
from streams.core.ids import command_id, hash_parts
from streams.operator_commands.alerts import alerts
from streams.operator_commands.plans import effective_plans, read_control
from streams.operator_commands.publish import publish_file
from streams.operator_commands.release import release_command_id, release_job
from tests.unit.vectors import scenarios_dir

CODEC = Codec()
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def prefix(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh topic prefix with the pipeline's topics created; deleted afterwards."""
    p = f"ops-{uuid.uuid4().hex[:10]}."
    for name in ("EVENTS", "CONTROL", "ALERTS", "MANIFESTS", "COMMITMENTS", "DLQ", "BY_COHORT",
                 "CHECKPOINTS"):
        monkeypatch.delenv(f"TRAINTRACE_TOPIC_{name}", raising=False)
    monkeypatch.setenv("TRAINTRACE_TOPIC_PREFIX", p)
    ensure_topics(kafka_bootstrap, standard_topics(TopicNames.from_env(p)))
    yield p
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    try:
        for fut in admin.delete_topics(list(TopicNames.from_env(p).all().values()),
                                       operation_timeout=30).values():
            try:
                fut.result(timeout=30)
            except Exception:
                pass
    except Exception:
        pass


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def produce(bootstrap: str, topic: str, items: list[tuple[str, bytes]]) -> None:
    producer = KafkaSettings(bootstrap).producer()
    errors: list[Any] = []
    for key, value in items:
        producer.produce(topic, key=key.encode(), value=value,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(30) == 0
    assert not errors


def rec(name: str, record: dict[str, Any]) -> bytes:
    return CODEC.encode_record(name, record)


def rollback(job: str, target: str | None, step: int | None, incidents: list[str],
             action: str = "ROLLBACK", supersedes: str | None = None) -> dict[str, Any]:
    return {"command_id": command_id(incidents, job, 0, action, target), "job_id": job,
            "cohort_id": "c1", "incarnation": 0, "action": action, "target_checkpoint_id": target,
            "target_step": step, "incident_ids": incidents, "supersedes": supersedes,
            "issued_ts": 1760000000000, "commitment_root": None}


def halt(job: str, reason: str, detail: str) -> dict[str, Any]:
    return {"command_id": hash_parts((reason, job)), "job_id": job, "cohort_id": "c1",
            "reason": reason, "detail": detail, "seq": 3, "issued_ts": 1760000000000}


def alert(i: int, kind: str, job: str | None = "A") -> dict[str, Any]:
    return {"alert_id": f"alert-{i}", "kind": kind, "cohort_id": "c1", "job_id": job,
            "checkpoint_id": f"{job}-520" if job else None, "incident_id": "ab" * 32,
            "message": f"alert number {i} [not markup]", "details": {"n": str(i)},
            "ts": 1760000000000 + i}


def canon(d: dict[str, Any]) -> str:
    # NaN-safe equality; a decoded event has the v6 fields its dict form leaves out while null
    d = {k: v for k, v in d.items() if not (k in ("signature", "public_key") and v is None)}
    return json.dumps(d, sort_keys=True)


def per_job(dicts: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for d in dicts:
        out[d["job_id"]].append(canon(d))
    return dict(out)


# ------------------------------------------------------------------------------------ publish


def test_publish_vector_file_reads_back_equal_in_order_per_job(kafka_bootstrap: str, prefix: str) -> None:
    path = scenarios_dir() / "01_seed_example.jsonl"
    expected = [event_to_dict(e) for e in read_events(str(path))]
    res = run("publish", str(path), "--json", "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 0, res.stderr
    summary = json.loads(res.stdout)
    topic = TopicNames.from_env(prefix).events
    assert summary["topic"] == topic
    assert summary["produced"] == len(expected)
    assert summary["skipped"] == []
    counts: dict[str, int] = defaultdict(int)
    for e in expected:
        counts[e["type"]] += 1
    assert summary["by_type"] == dict(counts)

    messages = list(read_to_end(kafka_bootstrap, topic))
    assert len(messages) == len(expected)
    got = []
    partitions: dict[str, set[int]] = defaultdict(set)
    for m in messages:
        ev = CODEC.decode_event(m.value)
        assert m.key == ev["job_id"].encode("utf-8")
        assert m.topic == topic and m.timestamp is not None
        partitions[ev["job_id"]].add(m.partition)
        got.append(ev)
    assert all(len(p) == 1 for p in partitions.values())  # keyed by job_id
    assert per_job(got) == per_job(expected)
    # per partition in offset order
    by_part: dict[int, list[int]] = defaultdict(list)
    for m in messages:
        by_part[m.partition].append(m.offset)
    assert all(offs == sorted(offs) for offs in by_part.values())


def test_publish_bad_line_exits_1_naming_file_line_field_and_publishes_nothing(
        kafka_bootstrap: str, prefix: str, tmp_path: Path) -> None:
    lines = (scenarios_dir() / "01_seed_example.jsonl").read_text().splitlines()[:6]
    bad = json.loads(lines[3])
    bad["step"] = "twenty"
    lines[3] = json.dumps(bad)
    lines.insert(1, "")  # a blank line is skipped but still counted: the bad line is line 5
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    topic = TopicNames.from_env(prefix).events

    res = run("publish", str(path), "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 1
    assert f"{path}:5: field 'step'" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert list(read_to_end(kafka_bootstrap, topic)) == []

    res = run("publish", str(path), "--skip-invalid", "--json", "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["produced"] == 5
    assert summary["skipped"] == [f"{path}:5: field 'step' must be an integer, got str"]
    assert "skipped" in res.stderr and f"{path}:5" in res.stderr
    got = [CODEC.decode_event(m.value) for m in read_to_end(kafka_bootstrap, topic)]
    good = [event_to_dict(e) for e in read_events(str(path)) if not isinstance(e, LineError)]
    assert len(got) == len(good) == 5
    assert per_job(got) == per_job(good)


def test_publish_other_bad_lines(kafka_bootstrap: str, prefix: str, tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"type": "JobStarted",\n')
    res = run("publish", str(path), "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 1
    assert f"{path}:1: not valid JSON" in res.stderr
    # valid for the core, but out of the Avro contract's range (incarnation is an Avro int)
    first = (scenarios_dir() / "01_seed_example.jsonl").read_text().splitlines()[0]
    big = dict(json.loads(first), job_id="B", incarnation=2**40)
    path.write_text(first + "\n\n" + json.dumps(big) + "\n")
    res = run("publish", str(path), "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 1
    assert f"{path}:3: field 'incarnation'" in res.stderr
    assert list(read_to_end(kafka_bootstrap, TopicNames.from_env(prefix).events)) == []


def test_publish_file_service_api_and_stdin(kafka_bootstrap: str, prefix: str) -> None:
    path = scenarios_dir() / "01_seed_example.jsonl"
    topics = TopicNames.from_env(prefix)
    seen: list[tuple[str, int, int]] = []
    result = publish_file(str(path), kafka_bootstrap, topics, CODEC,
                          progress=lambda phase, done, total: seen.append((phase, done, total)))
    n = sum(result.by_type.values())
    assert result.produced == n and result.topic == topics.events and result.skipped == []
    assert ("publishing", n, n) in seen and any(p == "reading" for p, _, _ in seen)
    res = CliRunner().invoke(cli, ["publish", "-", "--json", "--bootstrap", kafka_bootstrap],
                             input=path.read_text(), catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["produced"] == n
    assert len(list(read_to_end(kafka_bootstrap, topics.events))) == 2 * n


# ------------------------------------------------------------------------------- plans, release


def test_plans_json_folds_the_control_topic(kafka_bootstrap: str, prefix: str) -> None:
    topics = TopicNames.from_env(prefix)
    a1 = rollback("A", "A-480", 480, ["i1"])
    a2 = rollback("A", "A-400", 400, ["i2", "i1"], supersedes=a1["command_id"])
    b = {"command_id": command_id(["i1"], "B", 0, "QUARANTINE", None), "job_id": "B",
         "cohort_id": "c1", "incarnation": 0, "incident_ids": ["i1"],
         "quarantined_checkpoint_ids": ["B-600", "B-560"], "supersedes": None,
         "issued_ts": 1760000000001, "commitment_root": None}
    c1 = rollback("C", None, None, ["i1"], action="RESTART_FROM_BASE")
    c2 = {"command_id": hash_parts(("CLEAR", "C", 1, c1["command_id"])), "job_id": "C",
          "cohort_id": "c1", "incarnation": 1, "supersedes": c1["command_id"],
          "reason": "rolled back past the contamination", "issued_ts": 1760000000002}
    produce(kafka_bootstrap, topics.control, [
        ("A", rec("RollbackCommand", a1)),
        ("B", rec("QuarantineNotice", b)),
        ("C", rec("RollbackCommand", c1)),
        ("D", rec("HaltCommand", halt("D", "LEDGER_GAP", "seq 3 missing"))),
        ("E", rec("HaltCommand", halt("E", "UNREGISTERED", "no JobStarted"))),
        ("A", rec("RollbackCommand", a2)),
        ("C", rec("PlanCleared", c2)),
        ("E", rec("HaltCommand", halt("E", "RELEASE", "released by operator test"))),
        ("Z", b"\x00not avro"),
    ])
    res = run("plans", "--json", "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 0, res.stderr
    assert res.stdout == json.dumps(json.loads(res.stdout), indent=2, sort_keys=True) + "\n"
    expected = {
        "plans": [
            {"job_id": "A", "incarnation": 0, "action": "ROLLBACK", "target_checkpoint_id": "A-400",
             "target_step": 400, "incident_ids": ["i1", "i2"], "command_id": a2["command_id"]},
            {"job_id": "B", "incarnation": 0, "action": "QUARANTINE", "target_checkpoint_id": None,
             "target_step": None, "incident_ids": ["i1"], "command_id": b["command_id"],
             "quarantined_checkpoint_ids": ["B-560", "B-600"]},
        ],
        "halts": [{"job_id": "D", "reason": "LEDGER_GAP", "detail": "seq 3 missing"}],
        "signatures": {"checked": False, "unverified": []},
    }
    assert json.loads(res.stdout) == expected
    assert "1 record(s)" in res.stderr and "could not be decoded" in res.stderr
    assert effective_plans(kafka_bootstrap, topics, CODEC) == {k: expected[k] for k in ("plans", "halts")}
    state = read_control(kafka_bootstrap, topics, CODEC)
    assert (state.records, state.undecodable) == (9, 1)

    human = run("plans", "--bootstrap", kafka_bootstrap)
    assert human.exit_code == 0
    assert "A-400" in human.stdout and "QUARANTINE" in human.stdout and "LEDGER_GAP" in human.stdout


def test_plans_on_an_empty_control_topic(kafka_bootstrap: str, prefix: str) -> None:
    res = run("plans", "--json", "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout) == {"plans": [], "halts": [], "signatures": {"checked": False, "unverified": []}}


def test_release_then_plans_shows_the_job_no_longer_halted(
        kafka_bootstrap: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    topics = TopicNames.from_env(prefix)
    produce(kafka_bootstrap, topics.control, [
        ("X", rec("HaltCommand", halt("X", "UNTRACEABLE_SOURCE", "X-9 never written"))),
        ("Y", rec("HaltCommand", halt("Y", "CHAIN_BROKEN", "hash mismatch"))),
    ])
    before = json.loads(run("plans", "--json", "--bootstrap", kafka_bootstrap).stdout)
    assert [h["job_id"] for h in before["halts"]] == ["X", "Y"]

    res = run("release", "X", "--operator", "alice", "--json", "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["was_halted"] is True
    assert out["previous_halt"] == {"job_id": "X", "reason": "UNTRACEABLE_SOURCE",
                                    "detail": "X-9 never written"}
    released = out["released"]
    assert released["reason"] == "RELEASE" and released["job_id"] == "X"
    assert released["command_id"] == release_command_id("X", released["issued_ts"])
    assert "alice" in released["detail"]

    after = json.loads(run("plans", "--json", "--bootstrap", kafka_bootstrap).stdout)
    assert after["halts"] == [{"job_id": "Y", "reason": "CHAIN_BROKEN", "detail": "hash mismatch"}]

    last = list(read_to_end(kafka_bootstrap, topics.control))
    mine = [m for m in last if m.key == b"X"]
    name, record = CODEC.decode_record(mine[-1].value)
    assert name == "HaltCommand" and record["reason"] == "RELEASE"
    assert len({m.partition for m in mine}) == 1  # keyed by job_id, after the halt

    # $USER names the operator by default; the service API does the same
    monkeypatch.setenv("USER", "bob")
    res = run("release", "Y", "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 0, res.stderr
    assert "released" in res.stdout and "Y" in res.stdout
    assert json.loads(run("plans", "--json", "--bootstrap", kafka_bootstrap).stdout)["halts"] == []
    _, rec_y = CODEC.decode_record(
        [m for m in read_to_end(kafka_bootstrap, topics.control) if m.key == b"Y"][-1].value)
    assert "bob" in rec_y["detail"]

    r = release_job(kafka_bootstrap, topics, "Z", operator="carol", cohort_id="c9", issued_ts=42)
    assert r["command_id"] == release_command_id("Z", 42) and r["cohort_id"] == "c9"
    res = run("release", "W", "--json", "--bootstrap", kafka_bootstrap)
    assert json.loads(res.stdout)["was_halted"] is False


# --------------------------------------------------------------------------------------- watch


def _alert_items() -> list[tuple[str, bytes]]:
    items = [("c1", rec("Alert", alert(i, kind)))
             for i, kind in enumerate(["INCIDENT_OPENED", "HALT", "UNRECORDED_SHARING"])]
    items.insert(1, ("c1", b"junk"))  # skipped, reported on stderr
    items.insert(3, ("c1", rec("HaltCommand", halt("A", "LEDGER_GAP", "not an alert"))))
    return items


def _decoded_alerts() -> list[dict[str, Any]]:
    return [CODEC.decode_record(v)[1] for _, v in _alert_items()
            if v != b"junk" and CODEC.decode_record(v)[0] == "Alert"]


def test_watch_json_from_beginning(kafka_bootstrap: str, prefix: str) -> None:
    topics = TopicNames.from_env(prefix)
    produce(kafka_bootstrap, topics.alerts, _alert_items())
    expected = _decoded_alerts()

    res = run("watch", "--json", "--from-beginning", "--max-messages", "3", "--bootstrap",
              kafka_bootstrap)
    assert res.exit_code == 0, res.stderr
    got = [json.loads(line) for line in res.stdout.splitlines()]
    assert got == expected  # one cohort key: one partition, in order
    assert "BAD_MAGIC" in res.stderr and "not an Alert" in res.stderr

    res = run("watch", "--json", "--from-beginning", "--idle-timeout", "2", "--bootstrap",
              kafka_bootstrap)
    assert res.exit_code == 0, res.stderr
    assert [json.loads(line) for line in res.stdout.splitlines()] == expected

    human = run("watch", "--from-beginning", "--idle-timeout", "2", "--bootstrap", kafka_bootstrap)
    assert human.exit_code == 0, human.stderr
    assert "UNRECORDED_SHARING" in human.stdout and "[not markup]" in human.stdout

    assert [{"type": a.NAME, **a.to_value()} for a in alerts(kafka_bootstrap, topics, CODEC)] == expected  # read to the end


def test_watch_follows_new_alerts_in_a_subprocess(kafka_bootstrap: str, prefix: str) -> None:
    """Without --from-beginning only new alerts are shown; each JSON line is flushed."""
    topics = TopicNames.from_env(prefix)
    produce(kafka_bootstrap, topics.alerts, [("c1", rec("Alert", alert(0, "OLD")))])
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams", "watch", "--json", "--max-messages", "2",
         "--bootstrap", kafka_bootstrap, "--topic-prefix", prefix],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        i = 1
        while proc.poll() is None and time.monotonic() < deadline:
            # the watcher starts at the end it sees when it starts: keep producing until it
            # has seen two
            produce(kafka_bootstrap, topics.alerts, [("c1", rec("Alert", alert(i, "NEW")))])
            i += 1
            time.sleep(0.3)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    got = [json.loads(line) for line in lines]
    assert len(got) == 2
    assert all(a["kind"] == "NEW" for a in got)
    assert int(got[1]["alert_id"].split("-")[1]) == int(got[0]["alert_id"].split("-")[1]) + 1


def test_watch_exits_0_on_ctrl_c(kafka_bootstrap: str, prefix: str) -> None:
    import signal

    topics = TopicNames.from_env(prefix)
    # SIGINT as a terminal has it: a test session started in the background (`cmd &` in a
    # script) ignores SIGINT, and a child inherits that (Python then installs no handler)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streams", "watch", "--json", "--bootstrap", kafka_bootstrap,
         "--topic-prefix", prefix], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(proc.stdout.readline()), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        i = 0
        while not first and time.monotonic() < deadline:  # wait until it is following
            produce(kafka_bootstrap, topics.alerts, [("c1", rec("Alert", alert(i, "PING")))])
            i += 1
            reader.join(timeout=0.3)
        assert first and json.loads(first[0])["kind"] == "PING"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()


# ---------------------------------------------------------------------------- reader, errors


def test_read_to_end_empty_and_missing_topics(kafka_bootstrap: str, prefix: str) -> None:
    topics = TopicNames.from_env(prefix)
    assert list(read_to_end(kafka_bootstrap, topics.dlq)) == []
    missing = f"{prefix}does-not-exist"
    with pytest.raises(TopicNotFound, match="does not exist"):
        list(read_to_end(kafka_bootstrap, missing))
    with pytest.raises(TopicNotFound):
        topic_partitions(kafka_bootstrap, missing)  # still missing: never auto-created


def test_read_to_end_stops_at_the_snapshot(kafka_bootstrap: str, prefix: str) -> None:
    topics = TopicNames.from_env(prefix)
    produce(kafka_bootstrap, topics.alerts, [(f"c{i}", rec("Alert", alert(i, "K"))) for i in range(20)])
    it = read_to_end(kafka_bootstrap, topics.alerts)
    first = next(it)
    produce(kafka_bootstrap, topics.alerts, [("late", rec("Alert", alert(99, "LATE")))])
    rest = list(it)
    assert 1 + len(rest) == 20
    kinds = {CODEC.decode_record(m.value)[1]["kind"] for m in [first, *rest]}
    assert kinds == {"K"}


@pytest.mark.parametrize("command", [["plans", "--json"], ["watch", "--json"], ["release", "X"],
                                     ["publish", "FILE"]])
def test_missing_topics_exit_2_and_are_not_created(kafka_bootstrap: str, command: list[str]) -> None:
    fresh = f"none-{uuid.uuid4().hex[:10]}."
    args = [str(scenarios_dir() / "01_seed_example.jsonl") if a == "FILE" else a for a in command]
    res = run(*args, "--bootstrap", kafka_bootstrap, "--topic-prefix", fresh)
    assert res.exit_code == 2
    assert "does not exist" in res.stderr and fresh in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    topics = TopicNames.from_env(fresh)
    for name in (topics.events, topics.control, topics.alerts):
        with pytest.raises(TopicNotFound):
            topic_partitions(kafka_bootstrap, name)


def test_publish_create_topics(kafka_bootstrap: str) -> None:
    fresh = f"create-{uuid.uuid4().hex[:10]}."
    path = scenarios_dir() / "01_seed_example.jsonl"
    res = run("publish", str(path), "--create-topics", "--json", "--bootstrap", kafka_bootstrap,
              "--topic-prefix", fresh)
    assert res.exit_code == 0, res.stderr
    topics = TopicNames.from_env(fresh)
    assert len(topic_partitions(kafka_bootstrap, topics.events)) == 8
    assert len(topic_partitions(kafka_bootstrap, topics.control)) == 8
    AdminClient({"bootstrap.servers": kafka_bootstrap}).delete_topics(list(topics.all().values()))


@pytest.mark.parametrize("command", [["plans"], ["watch"], ["release", "X"], ["publish", "FILE"]])
def test_unreachable_broker_exits_2(command: list[str]) -> None:
    bootstrap = f"127.0.0.1:{pick_free_port()}"
    args = [str(scenarios_dir() / "01_seed_example.jsonl") if a == "FILE" else a for a in command]
    res = run(*args, "--bootstrap", bootstrap)
    assert res.exit_code == 2
    assert f"cannot reach Kafka at {bootstrap}" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_missing_file_exits_2(kafka_bootstrap: str, prefix: str, tmp_path: Path) -> None:
    res = run("publish", str(tmp_path / "nope.jsonl"), "--bootstrap", kafka_bootstrap)
    assert res.exit_code == 2
    assert "cannot read" in res.stderr
