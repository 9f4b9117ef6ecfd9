"""The moving parts of a fault case: the events, a feeder that times its deliveries, a lag watch
that times the processor's catching up, and the session's table of recovery times.

Why its own feeder: a broker fault shows first as produces that do not complete, so every record
remembers when it was sent and when the broker acknowledged it (``acks=all``); the longest wait
of a record acknowledged after the fault is how long produces were blocked.

Recovery (what the table calls ``recovery_s``), measured from the lag samples, never asserted:
from the fault ``t0`` until (1) the group's committed offsets on ``lineage.events`` reach, on
every partition, the end offsets of the last sample before ``t0`` (everything on the log when
the fault hit is routed and committed), then (2) its committed offsets on ``lineage.by-cohort``
reach the end offsets of the sample where (1) first held (what that routing produced is folded
and committed). In words: the pipeline is back where it was when the fault hit. Stage (1) alone
is ``routed_s``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from streams.codec import Codec
from streams.testing.cohort import interleave_cohorts
from streams.kafka.settings import KafkaSettings

CODEC = Codec()
POISON = [b"\xc3\x01" + b"\xff" * 8 + b"body", b"not avro at all", b"", b"\x00\x00"]
RESULTS: list[dict[str, Any]] = []  # one row per case, printed by conftest's terminal summary


def write_log(path: Path, events: list[dict]) -> Path:
    """The events as JSON Lines, what ``analyze`` (and so ``check_pipeline``) folds."""
    with path.open("w") as fh:
        for d in events:
            fh.write(json.dumps(d) + "\n")
    return path


class Feeder(threading.Thread):
    """Produces ``events`` to ``topic`` over about ``seconds`` s with a poison record every
    ``poison_every`` events; remembers each record's send and acknowledgement times."""

    def __init__(self, bootstrap: str, topic: str, events: list[dict], seconds: float,
                 poison_every: int = 499) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaSettings.of(bootstrap).producer(**{"linger.ms": 5})
        self.topic = topic
        self.events = events
        self.seconds = seconds
        self.poison_every = poison_every
        self.poison = 0
        self.errors: list[str] = []
        self.latencies: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic
        self.left = -1  # records not acknowledged after the final flush

    def _produce(self, key: bytes, value: bytes) -> None:
        sent = time.monotonic()

        def done(err, _msg) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.latencies.append((sent, time.monotonic()))

        while True:
            try:
                self.producer.produce(self.topic, key=key, value=value, on_delivery=done)
                return
            except BufferError:
                self.producer.poll(0.05)

    def run(self) -> None:
        t0 = time.monotonic()
        per = self.seconds / max(1, len(self.events))
        for i, d in enumerate(self.events):
            self._produce(d["job_id"].encode(), CODEC.encode_event(d))
            if i and i % self.poison_every == 0:
                self._produce(b"poison", POISON[self.poison % len(POISON)])
                self.poison += 1
            self.producer.poll(0)
            ahead = t0 + i * per - time.monotonic()
            if ahead > 0.005:
                time.sleep(ahead)
        self.left = self.producer.flush(120)

    def blocked(self, t0: float) -> tuple[float, float]:
        """(longest wait of a record acknowledged before ``t0``, longest wait of one
        acknowledged after it): the second is how long produces were blocked by the fault."""
        before = [a - s for s, a in self.latencies if a < t0]
        after = [a - s for s, a in self.latencies if a >= t0]
        return (max(before, default=0.0), max(after, default=0.0))


@dataclass
class Sample:
    at: float
    committed: dict[tuple[str, int], int]
    ends: dict[tuple[str, int], int]


class LagWatch(threading.Thread):
    """Samples the group's committed offsets and the end offsets of both processor inputs
    (``topics``: lineage.events, lineage.by-cohort) every ``every`` s until stopped; a sample
    the cluster cannot answer (mid-fault) is skipped."""

    def __init__(self, bootstrap: str, app_id: str, topics: tuple[str, str], every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.app_id = app_id
        self.topics = topics
        self.every = every
        self.samples: list[Sample] = []
        self.failures = 0
        self.last_failure = ""
        self._stop_flag = threading.Event()

    def _sample(self, consumer: Any, parts: list[TopicPartition]) -> Sample:
        at = time.monotonic()
        committed = {(tp.topic, tp.partition): max(tp.offset, 0) for tp in consumer.committed(parts, timeout=2)}
        ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=1)[1] for tp in parts}
        return Sample(at, committed, ends)

    def _partitions(self, consumer: Any) -> list[TopicPartition]:
        md = consumer.list_topics(timeout=10)
        return [TopicPartition(t, p) for t in self.topics for p in sorted(md.topics[t].partitions)]

    def run(self) -> None:
        kafka = KafkaSettings.of(self.bootstrap)
        consumer = kafka.consumer(self.app_id)
        parts: list[TopicPartition] = []
        try:
            while not self._stop_flag.is_set():
                try:
                    if not parts:  # the partitions, asked inside the loop: the first ask may fall mid-fault too
                        parts = self._partitions(consumer)
                    self.samples.append(self._sample(consumer, parts))
                except Exception as exc:  # the cluster is mid-fault: no sample this time, and a
                    self.failures += 1     # new client (an old one may cling to a dead leader)
                    self.last_failure = repr(exc)
                    consumer.close()
                    consumer = kafka.consumer(self.app_id)
                self._stop_flag.wait(self.every)
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop_flag.set()
        self.join(30)

    def last_lags(self) -> dict[str, int]:
        """The newest sample's lag of every partition that has one, as ``topic[partition]``."""
        if not self.samples:
            return {}
        s = self.samples[-1]
        return {f"{t}[{p}]": s.ends[(t, p)] - c for (t, p), c in s.committed.items() if s.ends[(t, p)] > c}

    def _reached(self, sample: Sample, topic: str, target: Sample) -> bool:
        return all(sample.committed.get(k, 0) >= end for k, end in target.ends.items() if k[0] == topic)

    def recovery(self, t0: float) -> tuple[float | None, float | None]:
        """(routed_s, recovery_s) after a fault at ``t0`` (see the module doc); None when the
        pipeline was not seen back before the watch stopped."""
        before = [s for s in self.samples if s.at <= t0]
        if not before:
            return None, None
        mark = before[-1]
        after = [s for s in self.samples if s.at > t0]
        events, by_cohort = self.topics
        routed = next((s for s in after if self._reached(s, events, mark)), None)
        if routed is None:
            return None, None
        folded = next((s for s in after if s.at >= routed.at and self._reached(s, by_cohort, routed)), None)
        return routed.at - t0, (folded.at - t0 if folded is not None else None)


def record(case: str, **values: Any) -> dict[str, Any]:
    """Add the case's row to the session's table (rounded seconds)."""
    row = {"case": case, **{k: (round(v, 2) if isinstance(v, float) else v) for k, v in values.items()}}
    RESULTS.append(row)
    return row


# takeovers go through snapshots; TRAINTRACE_FAULTS_SNAPSHOT_EVERY=0 runs the cases without them.
# Supervised, as a deployment runs them (a pod's restart policy): a worker the watchdog ends
# (no progress for 60 s with records waiting and every dependency up) is restarted, and the
# case's row counts it (``watchdog_restarts``)
WORKER_ARGS = ["--commit-interval", "0.2", "--grace-seconds", "4", "--session-timeout", "6",
               "--snapshot-every", os.environ.get("TRAINTRACE_FAULTS_SNAPSHOT_EVERY", "200"),
               "--snapshot-interval", "1", "--loglevel", "info", "--supervise", "--watchdog-seconds", "60"]
GRACE_S = 4


class Case:
    """One fault case on the shared cluster: fresh topics (RF 3, min ISR 2) under a new prefix, a
    new app id, two workers (bootstrap: every node), a feeder with poison and a lag watch.

    ``start()`` starts feeding; ``fault(what)`` marks the fault's moment; ``finish()`` waits for
    the feeder, asserts every invariant (``check_pipeline``) and records the case's row."""

    def __init__(self, cluster: Any, tmp: Path, name: str, *, partitions: int = 4, jobs: int = 100,
                 steps: int = 200, seconds: float = 15.0, seed: int = 1, extra_args: tuple[str, ...] = (),
                 grace_s: float = GRACE_S) -> None:
        import uuid

        from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
        from streams.devtools.worker_process import WorkerProcess

        self.name, self.cluster, self.tmp = name, cluster, tmp
        self.bootstrap = cluster.bootstrap
        self.prefix = f"f{uuid.uuid4().hex[:8]}."
        self.topics = TopicNames.from_env(self.prefix)
        ensure_topics(self.bootstrap, standard_topics(self.topics, partitions))
        self.app_id = f"tt-{self.prefix.rstrip('.')}"
        self.events = interleave_cohorts(list(_cohorts(jobs, steps, seed)), seed=seed)
        self.workers = [WorkerProcess(self.bootstrap, self.prefix, self.app_id, tmp / f"worker{i}", partitions,
                                      extra_args=[*WORKER_ARGS, "--grace-seconds", str(grace_s), *extra_args])
                        for i in range(2)]
        self.grace_s = grace_s
        self.feeder = Feeder(self.bootstrap, self.topics.events, self.events, seconds)
        self.watch = LagWatch(self.bootstrap, self.app_id, (self.topics.events, self.topics.by_cohort))
        self.faults: list[tuple[str, float]] = []
        self.notes: dict[str, Any] = {}
        self.t_start = time.monotonic()

    def start(self) -> "Case":
        for w in self.workers:
            w.start()
        for w in self.workers:
            w.wait_ready()
        self.watch.start()
        self.feeder.start()
        return self

    def fault(self, what: str) -> float:
        t0 = time.monotonic()
        self.faults.append((what, t0))
        return t0

    def kill_workers(self) -> None:
        for w in self.workers:
            w.kill()

    def finish(self, extra_log: list[dict] | None = None) -> dict[str, Any]:
        from streams.testing.invariants import check_pipeline
        from streams.devtools.worker_process import wait_quiescent

        self.feeder.join(180)
        assert not self.feeder.is_alive(), "the feeder did not finish within 180 s"
        assert not self.feeder.errors and self.feeder.left == 0, (self.feeder.errors[:3], self.feeder.left)
        t_fed = time.monotonic()
        for w in self.workers:
            assert w.alive(), f"a worker died:\n{w.log_tail()}"
        try:
            wait_quiescent(self.bootstrap, self.app_id, self.topics, timeout=180)
        except TimeoutError as exc:
            logs = "\n".join(f"--- worker {i} ({'alive' if w.alive() else 'dead'}) ---\n{w.log_tail(120)}"
                             for i, w in enumerate(self.workers))
            raise AssertionError(f"{exc}\nper partition: {self.watch.last_lags()}\n{logs}") from exc
        tail = time.monotonic() - t_fed
        self.watch.stop()
        log = write_log(self.tmp / "events.jsonl", self.events + (extra_log or []))
        check_pipeline(self.bootstrap, self.topics, self.app_id, str(log), self.feeder.poison,
                       allow_copies=True, grace_s=self.grace_s)
        self.notes["watchdog_restarts"] = sum(
            (w.log_path.read_text(errors="replace").count("watchdog: ") if w.log_path and w.log_path.exists() else 0)
            for w in self.workers)
        self.notes["worker_tracebacks"] = sum(
            (w.log_path.read_text(errors="replace").count("Traceback") if w.log_path and w.log_path.exists() else 0)
            for w in self.workers)
        return self._record(tail)

    def _record(self, tail: float) -> dict[str, Any]:
        what, t0 = self.faults[0] if self.faults else ("-", self.t_start)
        routed, recovery = self.watch.recovery(t0)
        wait_before, blocked = self.feeder.blocked(t0)
        return record(self.name, fault=what, events=len(self.events), poison=self.feeder.poison,
                      routed_s=routed, recovery_s=recovery, produce_blocked_s=blocked,
                      produce_wait_before_s=wait_before, quiescent_after_feed_s=tail,
                      case_s=time.monotonic() - self.t_start, lag_samples=len(self.watch.samples),
                      lag_sample_failures=self.watch.failures, **self.notes)


def _cohorts(jobs: int, steps: int, seed: int):
    from streams.testing.cohort import generate_cohorts

    return generate_cohorts(jobs=jobs, cohort_size=10, steps=steps, seed=seed, divergence_rate=0.1,
                            exploit_every=40, exploit_prob=0.6, alias_prob=0.05)
