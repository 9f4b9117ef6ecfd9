"""The pipeline run as an operator runs it: workers join, leave and die while events flow.

Issue 10's tests. After each run, record by record (``streams.testing.invariants``):
every valid event of ``lineage.events`` is routed into ``lineage.by-cohort`` (its first copy
in its job's order), the DLQ holds exactly the poison, the live plans, halts and manifests
equal ``analyze`` of the same events, no command id has two contents, ``audit`` passes and the
group's committed offsets reach the end of both inputs.

- churn: two workers start together, a third joins, one leaves cleanly (SIGTERM), a fourth
  joins, one is killed (kill -9), workers come back — six partitions, events and poison
  streaming all along;
- a long outage: a worker dead for several grace periods while the jobs keep producing
  (the survivor does not take over for 20 s): no halt the offline fold lacks;
- redelivery: a job's journal resent after a kill (identical copies) audits clean;
- split stages: all-stage workers hand over to route and fold workers of their own
  (``--stages route`` / ``fold``) while events flow, route workers join and leave: every event
  routed once, nothing re-routed at the hand-over.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.codec import Codec
from streams.testing.cohort import generate_cohorts, interleave_cohorts, seal_events
from streams.testing.invariants import check_pipeline
from streams.devtools.worker_process import WorkerProcess

CODEC = Codec()
GRACE_S = 4


POISON = [b"\xc3\x01" + b"\xff" * 8 + b"body", b"not avro at all", b"", b"\x00\x00"]


class Feeder(threading.Thread):
    """Produces ``events`` to ``lineage.events`` over about ``seconds`` seconds, with a poison
    record every ``poison_every`` events; ``extra`` events (e.g. resent copies) can be
    queued while it runs."""

    def __init__(self, bootstrap: str, topic: str, events: list[dict], seconds: float,
                 poison_every: int = 997) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaSettings.of(bootstrap).producer(**{"linger.ms": 5})
        self.topic = topic
        self.events = events
        self.seconds = seconds
        self.poison_every = poison_every
        self.poison = 0
        self.errors: list[str] = []
        self.left = -1  # records not acknowledged after the final flush

    def _cb(self, err, _msg) -> None:
        if err is not None:
            self.errors.append(str(err))

    def run(self) -> None:
        t0 = time.monotonic()
        per = self.seconds / max(1, len(self.events))
        for i, d in enumerate(self.events):
            self.producer.produce(self.topic, key=d["job_id"].encode(), value=CODEC.encode_event(d),
                                  on_delivery=self._cb)
            if i and i % self.poison_every == 0:
                self.producer.produce(self.topic, key=b"poison", value=POISON[self.poison % len(POISON)],
                                      on_delivery=self._cb)
                self.poison += 1
            self.producer.poll(0)
            ahead = t0 + i * per - time.monotonic()
            if ahead > 0.005:
                time.sleep(ahead)
        self.left = self.producer.flush(60)

    def check(self) -> None:
        """Every record it produced is on the broker: what the offline fold is given."""
        assert not self.errors and self.left == 0, (f"the feed did not land: {len(self.errors)} delivery "
                                                    f"error(s) {self.errors[:3]}, {self.left} unacknowledged")


@pytest.fixture
def cluster(kafka_bootstrap, tmp_path):
    """``make(partitions, extra_args) -> (topics, app_id, new_worker)``: fresh topics and group;
    ``new_worker(i, more)`` makes (does not start) worker ``i`` with its own data dir and port (``more``: its own options)."""
    made: list[WorkerProcess] = []

    def make(partitions: int = 6, extra_args=()):
        prefix = f"ch{uuid.uuid4().hex[:8]}."
        topics = TopicNames.from_env(prefix)
        ensure_topics(kafka_bootstrap, standard_topics(topics, partitions))
        app_id = f"tt-{prefix.rstrip('.')}"

        def new_worker(i: int, more=()) -> WorkerProcess:
            w = WorkerProcess(kafka_bootstrap, prefix, app_id, tmp_path / f"worker{i}", partitions,
                              extra_args=["--commit-interval", "0.2", "--grace-seconds", str(GRACE_S),
                                          "--snapshot-every", "300", "--snapshot-interval", "1",
                                          "--loglevel", "info", "--verify-rebuilds", *extra_args, *more])
            made.append(w)
            return w

        return topics, app_id, new_worker

    yield make
    for w in made:
        w.kill()


def write_log(path: Path, events: list[dict]) -> Path:
    with path.open("w") as fh:
        for d in events:
            fh.write(json.dumps(d) + "\n")
    return path


#: what a worker's log says of its partitions: what a failed check is read against
MOVES = ("assigned ", "rebuilt ", "snapshot(s) loaded", "were not delivered", "no progress past", "WARNING",
         "ERROR", "CRITICAL")


def moves(workers: list[WorkerProcess]) -> str:
    """Each worker's log lines about its partitions (assignments, takeovers, direct reads, warnings
    but the timers' overlaps), for a failed check."""
    out = []
    for i, x in enumerate(workers):
        if x.log_path is None or not x.log_path.exists():
            continue
        lines = [ln for ln in x.log_path.read_text(errors="replace").splitlines()
                 if any(k in ln for k in MOVES) and "is overlapping" not in ln and "Missing sensor" not in ln]
        out.append(f"--- worker {i} ({x.log_path}):\n" + "\n".join(ln[:300] for ln in lines[-80:]))
    return "\n".join(out)


def check_everything(bootstrap: str, topics: TopicNames, app_id: str, log: Path, poison: int,
                     allow_copies: bool, extra_dead: int = 0, workers: list[WorkerProcess] = (),
                     split: bool = False) -> dict:
    """The invariants of issue 10, after the pipeline settles (a grace period's tick included);
    when one fails, the ``workers``' moves come with it."""
    try:
        out = check_pipeline(bootstrap, topics, app_id, str(log), poison, allow_copies=allow_copies,
                             grace_s=GRACE_S, split=split)
    except AssertionError as exc:
        if not workers:
            raise
        raise AssertionError(f"{exc}\n{moves(list(workers))}") from exc
    # every state a worker made from snapshots equalled a re-fold of its partition (--verify-rebuilds)
    differs = [ln for x in workers if x.log_path is not None and x.log_path.exists()
               for ln in x.log_path.read_text(errors="replace").splitlines() if "differs from a re-fold" in ln]
    assert not differs, "\n".join(differs[:5]) + "\n" + moves(list(workers))
    return out


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_churn_workers_join_leave_and_die_while_events_flow(cluster, kafka_bootstrap, tmp_path, sealed):
    """Sealed: every job keyed, its events held until their seal (streams.core.seals), so a
    partition's rebuild after a move must hold and release exactly as the first owner did."""
    topics, app_id, new_worker = cluster(partitions=6)
    events = interleave_cohorts(list(generate_cohorts(
        jobs=300, cohort_size=10, steps=300, seed=10, divergence_rate=0.1, exploit_every=40,
        exploit_prob=0.6, alias_prob=0.05)), seed=10)
    if sealed:
        # the client seals at most 1 s after an event (seal_ms): 1 s of the 40 s feed
        events = list(seal_events(events, every=16, within=len(events) // 40))
    log = write_log(tmp_path / "events.jsonl", events)
    w = [new_worker(i) for i in range(4)]
    feeder = Feeder(kafka_bootstrap, topics.events, events, seconds=40)
    # two workers come up together while the first events arrive
    w[0].start()
    w[1].start()
    feeder.start()
    w[0].wait_ready()
    w[1].wait_ready()
    time.sleep(4)
    w[2].start().wait_ready()  # a third joins
    time.sleep(4)
    w[1].stop()  # a clean leave (SIGTERM): a deploy restarting workers one by one
    time.sleep(3)
    w[3].start().wait_ready()  # a fourth joins
    time.sleep(4)
    w[0].kill()  # kill -9
    time.sleep(2)
    w[1].start().wait_ready()  # back after its deploy
    time.sleep(3)
    w[2].stop()
    time.sleep(2)
    w[0].start().wait_ready()  # the killed one restarts
    feeder.join()
    feeder.check()
    for x in (w[0], w[1], w[3]):
        assert x.alive(), x.log_tail()
    check_everything(kafka_bootstrap, topics, app_id, log, feeder.poison, allow_copies=True, workers=w)


def test_clean_rebalances_route_every_event_exactly_once(cluster, kafka_bootstrap, tmp_path):
    """Workers joining and leaving cleanly (no kill): not even a re-routed copy."""
    topics, app_id, new_worker = cluster(partitions=4)
    events = interleave_cohorts(list(generate_cohorts(
        jobs=160, cohort_size=8, steps=300, seed=11, divergence_rate=0.1, exploit_every=40,
        exploit_prob=0.6, alias_prob=0.05)), seed=11)
    log = write_log(tmp_path / "events.jsonl", events)
    w = [new_worker(i) for i in range(3)]
    feeder = Feeder(kafka_bootstrap, topics.events, events, seconds=25)
    w[0].start()
    feeder.start()
    w[0].wait_ready()
    time.sleep(3)
    w[1].start().wait_ready()
    time.sleep(3)
    w[2].start().wait_ready()
    time.sleep(3)
    stopped = [w[0].stop()]
    time.sleep(3)
    stopped.append(w[1].stop())
    time.sleep(2)
    w[0].start().wait_ready()
    feeder.join()
    feeder.check()
    check_everything(kafka_bootstrap, topics, app_id, log, feeder.poison, allow_copies=False, workers=w)
    # a clean stop while events flow is not a crash: exit status 0, nothing critical logged (the
    # direct feed's consumer was closed under it: every SIGTERM exited 70 after a CRITICAL line)
    assert stopped == [0, 0], stopped
    for x in w:
        assert "CRITICAL" not in x.log_path.read_text(errors="replace"), x.log_tail()


def test_a_long_processor_outage_halts_no_healthy_job(cluster, kafka_bootstrap, tmp_path):
    """A worker dead for several grace periods while the jobs keep producing: the survivor
    only takes its partitions over after 20 s (the session timeout), meanwhile consumptions of
    checkpoints whose writes sit on the dead worker's partitions reach the survivor's cohorts.
    The processor's own outage is not a job's missing record: no halt the offline fold lacks."""
    topics, app_id, new_worker = cluster(partitions=4, extra_args=["--session-timeout", "20"])
    events = interleave_cohorts(list(generate_cohorts(
        jobs=120, cohort_size=12, steps=400, seed=12, divergence_rate=0.05, exploit_every=20,
        exploit_prob=0.8, alias_prob=0.0)), seed=12, chunk=3)
    log = write_log(tmp_path / "events.jsonl", events)
    w = [new_worker(i) for i in range(2)]
    w[0].start()
    w[1].start()
    w[0].wait_ready()
    w[1].wait_ready()
    feeder = Feeder(kafka_bootstrap, topics.events, events, seconds=30)
    feeder.start()
    time.sleep(6)
    w[1].kill()  # dead for 20 s before the survivor takes over: five grace periods
    time.sleep(24)
    w[1].start().wait_ready()
    feeder.join()
    feeder.check()
    out = check_everything(kafka_bootstrap, topics, app_id, log, feeder.poison, allow_copies=True, workers=w)
    assert not [h for h in out["offline"]["halts"] if h["reason"] == "UNTRACEABLE_SOURCE"]


def test_identical_redeliveries_of_a_journal_audit_clean(cluster, kafka_bootstrap, tmp_path):
    """A job client resending its journal after a kill writes identical copies of events the
    log already holds, after later ones of other jobs and, for the job itself, after seqs it
    had already sent: dropped by the fold (SPEC §8), fine for the audit."""
    topics, app_id, new_worker = cluster(partitions=2)
    events = interleave_cohorts(list(generate_cohorts(
        jobs=20, cohort_size=5, steps=200, seed=13, divergence_rate=0.2, exploit_every=40,
        exploit_prob=0.6)), seed=13)
    # a job's last 6 events resent (its journal replayed after the process was killed
    # before it knew they were delivered), interleaved with what the others send next
    resend_at = len(events) // 2
    jobs = sorted({d["job_id"] for d in events[:resend_at]})[:4]
    feed = list(events[:resend_at])
    for job in jobs:
        mine = [d for d in events[:resend_at] if d["job_id"] == job]
        feed.extend(mine[-6:])
    feed.extend(events[resend_at:])
    log = write_log(tmp_path / "events.jsonl", feed)
    w = new_worker(0).start()
    w.wait_ready()
    feeder = Feeder(kafka_bootstrap, topics.events, feed, seconds=5, poison_every=10**9)
    feeder.start()
    feeder.join()
    feeder.check()
    out = check_everything(kafka_bootstrap, topics, app_id, log, 0, allow_copies=False)
    assert out["routing"].valid == len(feed)
    # the job map's entries name the events offset of the JobStarted each was learnt from (what a
    # router's re-read of the map goes by: streams.worker.jobmap)
    from streams.kafka.reader import read_to_end
    from streams.worker.jobmap import read_map_entries

    started = {}
    for m in read_to_end(kafka_bootstrap, topics.events):
        d = CODEC.decode_event(m.value)
        if d["type"] == "JobStarted":
            started.setdefault(d["job_id"], (m.partition, m.offset, d["cohort_id"]))
    for p in range(2):
        entries = read_map_entries(kafka_bootstrap, topics.job_cohorts, [p])
        assert entries == {job: (cohort, o) for job, (q, o, cohort) in started.items() if q == p}


def test_split_stages_take_over_from_all_stage_workers_and_route_every_event_once(cluster, kafka_bootstrap,
                                                                                  tmp_path):
    """An operator moves a running pipeline to route and fold workers of their own (docs/pipeline.md):
    the all-stage worker stops cleanly, a route worker (its group seeded where the all-stage group
    stands) and a fold worker start, a second route worker joins and the first leaves, the fold
    worker restarts: every event routed exactly once (nothing re-routed at the hand-over), and the
    live decisions equal the offline fold."""
    topics, app_id, new_worker = cluster(partitions=4)
    events = interleave_cohorts(list(generate_cohorts(
        jobs=120, cohort_size=8, steps=300, seed=12, divergence_rate=0.1, exploit_every=40,
        exploit_prob=0.6, alias_prob=0.05)), seed=12)
    # one consumption of a checkpoint nobody writes: the fold workers' grace period must run on how far
    # the route workers routed (their group's offsets: streams.worker.clock), or the job is never halted
    unwritten = next(i for i, d in enumerate(events) if i > len(events) // 3 and d["type"] == "CheckpointConsumed")
    events[unwritten] = {**events[unwritten], "source_checkpoint_id": "nobody-wrote-this"}
    log = write_log(tmp_path / "events.jsonl", events)
    everything = new_worker(0)
    route = [new_worker(1, ["--stages", "route"]), new_worker(2, ["--stages", "route"])]
    fold = new_worker(3, ["--stages", "fold"])
    feeder = Feeder(kafka_bootstrap, topics.events, events, seconds=22)
    everything.start()
    feeder.start()
    everything.wait_ready()
    time.sleep(4)
    # beside a worker of the other kind, a worker refuses to start, in one line (streams.worker.stagemix)
    refused = [new_worker(4, ["--stages", "route"]).start()]
    assert refused[0].proc.wait(60) != 0
    stopped = [everything.stop()]
    route[0].start()
    fold.start()
    route[0].wait_ready()
    fold.wait_ready()
    time.sleep(3)
    route[1].start().wait_ready()
    time.sleep(3)
    stopped.append(route[0].stop())
    time.sleep(2)
    stopped.append(fold.stop())
    fold.start().wait_ready()
    refused.append(new_worker(5).start())
    assert refused[1].proc.wait(60) != 0
    feeder.join()
    feeder.check()
    workers = [everything, *route, fold]
    out = check_everything(kafka_bootstrap, topics, app_id, log, feeder.poison, allow_copies=False, workers=workers,
                           split=True)
    assert (events[unwritten]["job_id"], "UNTRACEABLE_SOURCE") in {
        (h["job_id"], h["reason"]) for h in out["offline"]["halts"]}, out["offline"]["halts"]
    assert stopped == [0, 0, 0], stopped
    said = [x.log_path.read_text(errors="replace") for x in refused]
    assert "would route every event a second time" in said[0] and "Traceback" not in said[0], said[0][-2000:]
    assert "route worker(s)" in said[1] and "Traceback" not in said[1], said[1][-2000:]
    assert route[1].owned()["by_cohort"] == [] and fold.owned()["events"] == [], (route[1].owned(), fold.owned())
    for x in workers:
        assert "CRITICAL" not in x.log_path.read_text(errors="replace"), x.log_tail()
