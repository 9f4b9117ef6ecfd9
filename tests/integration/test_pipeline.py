"""The live pipeline on a real broker with real worker processes (issue 4's "done when").

- every shared vector, published together (renamed into separate cohorts) to 4 partitions and
  2 workers: the effective plans on lineage.control and the latest manifests equal `analyze`;
- kill -9 a worker in the middle of a large cohort stream and restart it: the same final state
  as the offline fold, no command_id twice on lineage.control, nothing valid in the DLQ;
- poison bytes and invalid events land in lineage.dlq and the worker stays up.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from streams.kafka.settings import KafkaSettings
from streams.kafka.reader import read_to_end
from streams.codec import Codec
from streams.audit.analyze import analyze_file
from streams.operator_commands.plans import effective_plans
from streams.operator_commands.publish import publish_file
from streams.testing.invariants import assert_commands_consistent, assert_live_equals_offline
from streams.testing.cohort import generate_cohorts
from streams.devtools.worker_process import wait_assigned, wait_quiescent
from tests.unit.vectors import scenarios_dir

CODEC = Codec()
SCENARIOS = scenarios_dir()
ID_FIELDS = ("job_id", "checkpoint_id", "source_checkpoint_id", "base_checkpoint_id",
             "restored_checkpoint_id", "final_checkpoint_id", "cohort_id")


def renamed_vectors(path: Path) -> list[str]:
    """Every vector, its ids prefixed per vector so they live in separate cohorts."""
    names = sorted(p.stem for p in SCENARIOS.glob("*.jsonl"))
    lines = []
    for i, name in enumerate(names):
        for line in (SCENARIOS / f"{name}.jsonl").read_text().splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            for key in ID_FIELDS:
                if d.get(key) is not None:
                    d[key] = f"v{i:02d}-{d[key]}"
            lines.append(json.dumps(d))
    path.write_text("\n".join(lines) + "\n")
    return names


def test_every_vector_live_equals_analyze(pipeline, kafka_bootstrap, tmp_path):
    topics, app_id, workers = pipeline(workers=2, partitions=4)
    log = tmp_path / "vectors.jsonl"
    names = renamed_vectors(log)
    result = publish_file(str(log), kafka_bootstrap, topics, CODEC)
    assert result.produced == sum(1 for _ in log.open())
    wait_quiescent(kafka_bootstrap, app_id, topics)
    time.sleep(5)  # the unresolved-source grace period (4 s) runs on the processor's clock
    wait_quiescent(kafka_bootstrap, app_id, topics)
    offline = analyze_file(str(log)).result
    assert len(offline["incidents"]) >= len(names) - 3
    assert_live_equals_offline(kafka_bootstrap, topics, offline)
    assert_commands_consistent(kafka_bootstrap, topics, allow_copies=False)
    for w in workers:
        assert w.alive()
    # the one record the fold refuses: vector 13's conflicting duplicate (bad input loses nothing)
    dead = [CODEC.decode_record(m.value)[1] for m in read_to_end(kafka_bootstrap, topics.dlq)]
    assert [(d["error_kind"], CODEC.decode_event(d["original_value"])["job_id"]) for d in dead] == [
        ("CONFLICTING_DUPLICATE", f"v{names.index('13_duplicates'):02d}-B")]


def test_kill_9_a_worker_mid_stream_and_restart(pipeline, kafka_bootstrap, tmp_path):
    topics, app_id, workers = pipeline(workers=2, partitions=4)
    log = tmp_path / "cohorts.jsonl"
    with log.open("w") as fh:
        for d in generate_cohorts(jobs=400, cohort_size=20, steps=400, seed=21, divergence_rate=0.1,
                                  exploit_every=40, exploit_prob=0.6, alias_prob=0.05):
            fh.write(json.dumps(d) + "\n")
    lines = log.read_text().splitlines()
    producer = KafkaSettings.of(kafka_bootstrap).producer()
    half = len(lines) // 2
    for line in lines[:half]:
        d = json.loads(line)
        producer.produce(topics.events, key=d["job_id"].encode(), value=CODEC.encode_event(d))
        producer.poll(0)
    producer.flush(30)
    # kill -9 one worker while it is working through the first half, once the group is stable
    # (both workers own cohorts and worker 0 has folded a good part of its share)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        # (worker 0 may own the smaller share: count both workers' folds)
        folded = [float(l.split()[-1]) for w in workers for l in w.get("/metrics").splitlines()
                  if l.startswith("traintrace_events_folded_total")]
        if sum(folded) > 2000 and all(w.get("/health")["cohorts"] > 0 for w in workers):
            break
        time.sleep(0.1)
    workers[0].kill()
    for line in lines[half:]:
        d = json.loads(line)
        producer.produce(topics.events, key=d["job_id"].encode(), value=CODEC.encode_event(d))
        producer.poll(0)
    producer.flush(30)
    workers[0].start()
    workers[0].wait_ready()
    wait_quiescent(kafka_bootstrap, app_id, topics, timeout=240)
    wait_assigned(workers, 4)  # the two workers' /health: every partition of both stages, once
    owned = [w.owned() for w in workers]
    for stage in ("events", "by_cohort"):
        assert sorted(p for o in owned for p in o[stage]) == [0, 1, 2, 3], owned
    offline = analyze_file(str(log)).result
    assert offline["plans"], "the generated stream should need plans"
    assert_live_equals_offline(kafka_bootstrap, topics, offline)
    assert_commands_consistent(kafka_bootstrap, topics, allow_copies=False)
    assert list(read_to_end(kafka_bootstrap, topics.dlq)) == []
    # and an audit of the topics finds every command and manifest exactly where the log implies
    # (the recovering worker re-published what the fold decided, byte for byte)
    from streams.audit.run import audit
    from streams.audit.log import load_topics

    report = audit(load_topics(kafka_bootstrap, topics))
    assert report.passed, [f.line() for c in report.checks for f in c.failures][:10]
    assert report.check("commands").checked and report.check("manifests").checked


def test_poison_and_invalid_events_go_to_the_dlq_and_the_worker_stays_up(pipeline, kafka_bootstrap):
    topics, app_id, workers = pipeline(workers=1, partitions=2)
    producer = KafkaSettings.of(kafka_bootstrap).producer()
    good = [json.loads(l) for l in (SCENARIOS / "01_seed_example.jsonl").read_text().splitlines()]
    poison = [
        (b"A", b"\xc3\x01" + b"\xff" * 8 + b"body"),  # unknown fingerprint
        (b"A", b"not avro at all"),  # bad magic
        (b"A", b""),  # empty
        (b"A", CODEC.encode_event(good[0])[:-3]),  # truncated
    ]
    for key, value in poison:
        producer.produce(topics.events, key=key, value=value)
    # an invalid value that still decodes: the codec refuses to write it, so write the raw Avro of
    # a Progress whose job_id is empty
    producer.produce(topics.events, key=b"", value=CODEC.encode_event(dict(good[3], job_id="")))
    for d in good:
        producer.produce(topics.events, key=d["job_id"].encode(), value=CODEC.encode_event(d))
    producer.flush(30)
    wait_quiescent(kafka_bootstrap, app_id, topics)
    assert workers[0].alive()
    dead = [CODEC.decode_record(m.value)[1] for m in read_to_end(kafka_bootstrap, topics.dlq)]
    kinds = sorted(d["error_kind"] for d in dead)
    assert kinds == sorted(["UNKNOWN_FINGERPRINT", "BAD_MAGIC", "EMPTY", "TRUNCATED", "INVALID_EVENT"]), kinds
    for d in dead:
        assert d["reason"] and d["original_topic"] == topics.events
    # and the valid events were all folded: the worked example's two plans
    plans = effective_plans(kafka_bootstrap, topics, CODEC)["plans"]
    assert [p["job_id"] for p in plans] == ["A", "B"]
    health = workers[0].get("/health")
    assert health["ok"]
    # /health says what it processes: both input stages' partitions, taken over
    assert health["partitions"] == {"events": [0, 1], "by_cohort": [0, 1]}
    # and how many events it folded (what the benches poll): the metric's count, without /metrics
    assert health["folded"] == workers[0].folded() == workers[0].metric("traintrace_events_folded_total") > 0
