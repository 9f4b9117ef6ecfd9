"""Snapshots of the fold (issue 14, streams.worker.snapshots) with real workers on a real broker.

- a worker that takes a partition over loads its cohorts' snapshots and re-folds only the input
  after the last round; what it then decides is what an uninterrupted fold decides (the churn
  invariants), and the audit recomputes every snapshot's digest;
- settled cohorts leave memory and come back when their input resumes; with ``--evict-idle`` so
  do cohorts whose jobs run on but had no input for a round (issue 27), across a takeover too;
- a snapshot forged on the topic is refused by a worker with a signing key (it re-folds the
  partition instead) and named by the audit.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest

from streams.codec import Codec
from streams.kafka.reader import read_to_end
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.testing.cohort import generate_cohorts
from streams.testing.invariants import check_pipeline
from streams.devtools.worker_process import WorkerProcess, produce_events, wait_quiescent

CODEC = Codec()
SNAP_ARGS = ["--snapshot-every", "150", "--snapshot-interval", "0.5", "--commit-interval", "0.2",
             "--grace-seconds", "4", "--evict-idle-after", "0", "--loglevel", "info"]


@pytest.fixture
def setup(kafka_bootstrap, tmp_path):
    made: list[WorkerProcess] = []
    prefix = f"sn{uuid.uuid4().hex[:8]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(kafka_bootstrap, standard_topics(topics, 2))
    app_id = f"tt-{prefix.rstrip('.')}"

    def new_worker(i: int, extra=()) -> WorkerProcess:
        w = WorkerProcess(kafka_bootstrap, prefix, app_id, tmp_path / f"worker{i}", 2,
                          extra_args=[*SNAP_ARGS, *extra])
        made.append(w)
        return w

    yield topics, app_id, new_worker
    for w in made:
        w.kill()


def write_log(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in events))
    return path


def snapshot_records(bootstrap: str, topics: TopicNames) -> list[tuple[str, dict]]:
    return [CODEC.decode_record(m.value) for m in read_to_end(bootstrap, topics.snapshots)]


def wait_for_rounds(bootstrap: str, topics: TopicNames, timeout: float = 30.0) -> list[tuple[str, dict]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recs = snapshot_records(bootstrap, topics)
        if {v["partition"] for n, v in recs if n == "SnapshotRound"} == {0, 1}:
            return recs
        time.sleep(0.3)
    raise AssertionError(f"no snapshot round of both partitions within {timeout}s")


def wait_for_log(w: WorkerProcess, pattern: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, w.log_tail(1000)):
            return
        time.sleep(0.3)
    raise AssertionError(f"no {pattern!r} in the worker's log: {w.log_tail(40)}")


def refolded(log: str) -> dict[int, tuple[int, int]]:
    """partition -> (re-fold start, group offset) from a worker's takeover log lines."""
    out = {}
    for m in re.finditer(r"\[(\d+)\]: \d+ snapshot\(s\) loaded, \d+ settled (?:and \d+ idle )?left out of memory; "
                         r"re-folding from (\d+) \(of (\d+)\)", log):
        out[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    return out


def events_for(seed: int, jobs: int = 40) -> list[dict]:
    return list(generate_cohorts(jobs=jobs, cohort_size=5, steps=160, seed=seed, divergence_rate=0.2,
                                 exploit_every=30, exploit_prob=0.6, alias_prob=0.05))


def test_a_takeover_loads_snapshots_and_refolds_only_the_tail(setup, kafka_bootstrap, tmp_path):
    topics, app_id, new_worker = setup
    events = events_for(21)
    cut = len(events) * 2 // 3
    log = write_log(tmp_path / "events.jsonl", events)
    first = new_worker(0).start()
    first.wait_ready()
    produce_events(kafka_bootstrap, topics.events, events[:cut], CODEC)
    wait_quiescent(kafka_bootstrap, app_id, topics, timeout=120)
    recs = wait_for_rounds(kafka_bootstrap, topics)
    assert any(n == "CohortSnapshot" for n, _ in recs)
    first.kill()  # kill -9: the next worker starts from the group's offsets and the snapshots
    produce_events(kafka_bootstrap, topics.events, events[cut:], CODEC)
    second = new_worker(1).start()
    second.wait_ready()
    wait_quiescent(kafka_bootstrap, app_id, topics, timeout=120)
    took = refolded(second.log_tail(400))
    assert set(took) == {0, 1}, second.log_tail(60)
    assert all(start > 0 for start, _end in took.values()), took  # not from the first record
    out = check_pipeline(kafka_bootstrap, topics, app_id, str(log), 0, grace_s=4)
    snaps = next(c for c in out["audit"].checks if c.name == "snapshots")
    assert snaps.checked > 0 and not snaps.skipped and snaps.tally.get("recompute", 0) > 0, snaps


def test_settled_cohorts_leave_memory_and_come_back(setup, kafka_bootstrap, tmp_path):
    """Cohorts whose jobs all finished leave the worker's memory after a round; a late event of
    one of them (a job restarted under a new incarnation is not in the generator, so: a
    copy of each cohort's last event, which the fold drops) brings it back without changing a
    plan."""
    topics, app_id, new_worker = setup
    events = events_for(22, jobs=20)
    log = write_log(tmp_path / "events.jsonl", events)
    w = new_worker(0).start()  # --evict-settled is the default
    w.wait_ready()
    produce_events(kafka_bootstrap, topics.events, events, CODEC)
    wait_quiescent(kafka_bootstrap, app_id, topics, timeout=120)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _metric(w, "traintrace_cohorts_left_memory_total") == 0:
        time.sleep(0.3)
    assert _metric(w, "traintrace_cohorts_left_memory_total") > 0, w.log_tail(40)
    cohort_of = {d["job_id"]: d["cohort_id"] for d in events if d["type"] == "JobStarted"}
    last = {cohort_of[d["job_id"]]: d for d in events}  # each cohort's last event
    again = list(last.values())
    produce_events(kafka_bootstrap, topics.events, again, CODEC)  # redelivered copies
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _metric(w, "traintrace_cohorts_brought_back_total") == 0:
        time.sleep(0.3)
    assert _metric(w, "traintrace_cohorts_brought_back_total") > 0, w.log_tail(40)
    write_log(log, events + again)
    check_pipeline(kafka_bootstrap, topics, app_id, str(log), 0, allow_copies=False)


def test_idle_cohorts_leave_memory_across_a_takeover_and_come_back(setup, kafka_bootstrap, tmp_path):
    """Cohorts trained one after another, a fifth of their jobs never finishing and their plans
    never acknowledged (one settles): with ``--evict-idle`` the first half, with no input for a
    round while the second half trains, leave memory; a worker taking over leaves them out too;
    copies of each cohort's last event bring them back; live equals ``analyze`` throughout."""
    from streams.core.events import parse_event
    from streams.referee import snapshots as images
    from streams.referee.referee import Referee

    topics, app_id, new_worker = setup
    events = events_for(23, jobs=40)
    cohort_of = {d["job_id"]: d["cohort_id"] for d in events if d["type"] == "JobStarted"}
    order = list(dict.fromkeys(cohort_of.values()))
    half = next(i for i, d in enumerate(events) if cohort_of[d["job_id"]] == order[len(order) // 2])
    referee = Referee()  # how many settle (those leave memory without --evict-idle)
    for i, d in enumerate(events):
        referee.handle(cohort_of[d["job_id"]], parse_event(d), i, partition=0)
    settled = sum(images.settled(lin) for lin in referee.engines.values())
    assert settled < len(order) // 2
    log = write_log(tmp_path / "events.jsonl", events)
    args: list[str] = []  # --evict-idle and --evict-settled are the default
    first = new_worker(0, args).start()
    first.wait_ready()
    produce_events(kafka_bootstrap, topics.events, events[:half], CODEC)
    wait_quiescent(kafka_bootstrap, app_id, topics, timeout=120)
    wait_for_rounds(kafka_bootstrap, topics)
    time.sleep(1.5)  # the first half's last rounds (every 0.5 s with input since)
    produce_events(kafka_bootstrap, topics.events, events[half:], CODEC)
    wait_quiescent(kafka_bootstrap, app_id, topics, timeout=120)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _metric(first, "traintrace_cohorts_left_memory_total") <= settled:
        time.sleep(0.3)
    assert _metric(first, "traintrace_cohorts_left_memory_total") > settled, first.log_tail(40)
    time.sleep(1.5)
    first.kill()
    second = new_worker(1, args).start()
    second.wait_ready()
    wait_for_log(second, r"(?s)\[[01]\]: .*idle left out of memory.*\[[01]\]: .*idle left out of memory")
    idle = sum(int(m.group(1)) for m in re.finditer(r"(\d+) idle left out of memory", second.log_tail(400)))
    assert idle > 0, second.log_tail(60)
    # the views show the cohorts out of memory too, as the fold of every event has them
    from streams.worker.resting import rows_of

    deadline = time.monotonic() + 30  # (the views are whole once the takeover has re-folded what no snapshot holds)
    while set((shown := second.get("/jobs"))["cohorts"]) != set(order) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert shown["resting"] and set(shown["cohorts"]) == set(order), (shown["cohorts"], second.log_tail(60))
    expected = [r for c in sorted(referee.engines) for r in rows_of(c, referee.engines[c])[0]]
    assert sorted(shown["jobs"], key=lambda r: r["job_id"]) == sorted(expected, key=lambda r: r["job_id"])
    plans = second.get("/plans")["plans"]
    assert sorted(p["job_id"] for p in plans) == sorted(j for lin in referee.engines.values() for j in lin.plans)
    last = {cohort_of[d["job_id"]]: d for d in events}
    again = list(last.values())
    produce_events(kafka_bootstrap, topics.events, again, CODEC)  # redelivered copies: dropped
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _metric(second, "traintrace_cohorts_brought_back_total") == 0:
        time.sleep(0.3)
    assert _metric(second, "traintrace_cohorts_brought_back_total") > 0, second.log_tail(40)
    wait_quiescent(kafka_bootstrap, app_id, topics, timeout=120)
    write_log(log, events + again)
    check_pipeline(kafka_bootstrap, topics, app_id, str(log), 0, allow_copies=False, grace_s=4)


def _metric(w: WorkerProcess, name: str) -> float:
    return w.metric(name)


def test_a_forged_snapshot_is_refused_and_named_by_the_audit(setup, kafka_bootstrap, tmp_path):
    from streams.signing import write_keypair

    topics, app_id, new_worker = setup
    keys = write_keypair(tmp_path / "keys")
    events = events_for(23, jobs=20)
    log = write_log(tmp_path / "events.jsonl", events)
    first = new_worker(0, ["--signing-key", str(keys.private_path)]).start()
    first.wait_ready()
    produce_events(kafka_bootstrap, topics.events, events, CODEC)
    wait_quiescent(kafka_bootstrap, app_id, topics, timeout=120)
    recs = wait_for_rounds(kafka_bootstrap, topics)
    first.kill()
    # a forgery: the latest snapshot of a cohort with a plan, its state that of another cohort
    # (a valid image, digest recomputed, unsigned), filed after the last round
    name, victim = max((r for r in recs if r[0] == "CohortSnapshot"), key=lambda r: r[1]["covers"])
    donor = next(v for n, v in recs if n == "CohortSnapshot" and v["cohort_id"] != victim["cohort_id"])
    forged = dict(victim, state=donor["state"], digest=donor["digest"], signature=None, key_id=None)
    forged.pop("type", None)
    producer = KafkaSettings.of(kafka_bootstrap).producer()
    producer.produce(topics.snapshots, key=b"c:" + victim["cohort_id"].encode(),
                     value=CODEC.encode_record("CohortSnapshot", forged), partition=victim["partition"])
    producer.flush(30)
    second = new_worker(1, ["--signing-key", str(keys.private_path)]).start()
    second.wait_ready()
    wait_for_log(second, "rebuilt .*lineage.by-cohort\\[%d\\]" % victim["partition"])
    assert "refused (UNSIGNED)" in second.log_tail(400), second.log_tail(60)
    took = refolded(second.log_tail(400))
    assert victim["partition"] not in took, took  # its partition was re-folded from its start
    from streams.audit.run import audit
    from streams.audit.log import load_topics

    report = audit(load_topics(kafka_bootstrap, topics))
    snaps = next(c for c in report.checks if c.name == "snapshots")
    assert not snaps.passed and any(victim["cohort_id"] in f.what for f in snaps.failures), snaps
    assert all(c.passed for c in report.checks if c.name != "snapshots"), [
        f.line() for c in report.checks for f in c.failures][:5]
    del log
