"""``traintrace smoke``: the worked example (SPEC §12) produced to Kafka, consumed back and folded
(:func:`run_smoke`); then through a live processor worker (:func:`run_live`)."""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import ensure_topics
from streams.codec import Codec, DecodeError
from streams.core.decide import Lineage
from streams.core.events import parse_event
from streams.demo.examples import worked_example
from streams.demo.errors import DemoError


class SmokeError(DemoError):
    """The smoke round trip failed (delivery, consumption, decoding, the live worker)."""


def smoke_topic() -> str:
    """A fresh topic for one round trip."""
    return f"traintrace.smoke.{uuid.uuid4().hex[:12]}"


@dataclass
class SmokeResult:
    produced: int
    consumed: int
    equal: int
    by_type: dict[str, tuple[int, int]]
    final: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"produced": self.produced, "consumed": self.consumed, "equal": self.equal,
                "by_type": {k: {"produced": a, "equal": b} for k, (a, b) in self.by_type.items()},
                "result": self.final}


def same_event(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = set(a) | set(b)
    for k in keys:
        x, y = a.get(k), b.get(k)
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if x != y:
            return False
    return True


def run_smoke(kafka: KafkaSettings | str, topic: str, partitions: int = 3, timeout: float = 60.0) -> SmokeResult:
    """Produce every event of the worked example to ``topic`` (Avro, keyed by job_id), consume
    them back, compare them and fold them with the lineage core."""
    kafka = KafkaSettings.of(kafka)
    codec = Codec()
    events = worked_example()
    ensure_topics(kafka, [(topic, partitions, None)])
    producer = kafka.producer()
    errors: list[str] = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(str(err))

    for ev in events:
        producer.produce(topic, key=ev["job_id"].encode(), value=codec.encode_event(ev),
                         headers=codec.headers.event(ev["type"]), on_delivery=on_delivery)
        producer.poll(0)
    if producer.flush(timeout) > 0 or errors:
        raise SmokeError(f"delivery to {topic} failed: {errors[:3] or 'flush timed out'}")

    consumer = kafka.consumer(f"traintrace-smoke-{topic}")
    consumer.subscribe([topic])
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < len(events) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise SmokeError(f"consume failed: {msg.error()}")
            try:
                got.append(codec.decode_event(msg.value()))
            except DecodeError as exc:
                raise SmokeError(f"offset {msg.offset()}: {exc}") from exc
    except KafkaException as exc:
        raise SmokeError(str(exc)) from exc
    finally:
        consumer.close()
    if len(got) < len(events):
        raise SmokeError(f"consumed {len(got)} of {len(events)} events within {timeout}s")

    # per job, the consumed order must be the produced order (one partition per job_id)
    originals = {(e["job_id"], e["seq"]): e for e in events}
    equal = Counter()
    produced = Counter(e["type"] for e in events)
    for d in got:
        if same_event(originals[(d["job_id"], d["seq"])], d):
            equal[d["type"]] += 1
    lineage = Lineage()
    lineage.apply_many(parse_event(d) for d in got)
    lineage.finish_input()
    return SmokeResult(
        produced=len(events), consumed=len(got), equal=sum(equal.values()),
        by_type={t: (produced[t], equal[t]) for t in produced},
        final=lineage.final_state(),
    )


@dataclass
class LiveResult:
    plans: list[dict[str, Any]]
    halts: list[dict[str, Any]]
    manifests: int
    commitments: int
    seconds_to_quiescence: float
    equal_to_offline: bool

    def summary(self) -> dict[str, Any]:
        """The ``live`` part of ``traintrace smoke --json``."""
        return {"plans": self.plans, "halts": self.halts, "manifests": self.manifests,
                "commitments": self.commitments, "seconds_to_quiescence": self.seconds_to_quiescence,
                "equal_to_offline": self.equal_to_offline}


def run_live(kafka: KafkaSettings | str, data_dir: str, partitions: int = 3, timeout: float = 120.0) -> LiveResult:
    """Start one real processor worker on fresh topics, publish the worked example to
    lineage.events, wait until the worker has committed everything, and read the effective
    plans back from lineage.control."""
    from streams.kafka.topics import TopicNames, standard_topics
    from streams.kafka.reader import read_to_end
    from streams.core.cohorts import CohortLineage
    from streams.operator_commands.plans import effective_plans
    from streams.devtools.worker_process import WorkerProcess, wait_quiescent

    kafka = KafkaSettings.of(kafka)
    codec = Codec()
    prefix = f"smoke{uuid.uuid4().hex[:8]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(kafka, standard_topics(topics, partitions))
    worker = WorkerProcess(kafka.bootstrap, prefix, f"traintrace-smoke-{prefix.rstrip('.')}",
                           Path(data_dir) / "worker", partitions,
                           extra_args=["--commit-interval", "0.2", "--loglevel", "warn"]).start()
    try:
        worker.wait_ready(timeout)
        events = worked_example()
        producer = kafka.producer()
        t = time.perf_counter()
        for ev in events:
            producer.produce(topics.events, key=ev["job_id"].encode(), value=codec.encode_event(ev),
                             headers=codec.headers.event(ev["type"]))
        if producer.flush(30) > 0:
            raise SmokeError("could not deliver the events")
        wait_quiescent(kafka.bootstrap, worker.app_id, topics, timeout=timeout, settle=0.5)
        elapsed = time.perf_counter() - t
        live = effective_plans(kafka.bootstrap, topics, codec)
        offline = CohortLineage()
        offline.apply_many(parse_event(e) for e in events)
        offline.finish_input()
        want = [(p["job_id"], p["command_id"]) for p in offline.final_state()["plans"]]
        got = [(p["job_id"], p["command_id"]) for p in live["plans"]]
        manifests = sum(1 for _ in read_to_end(kafka, topics.manifests))
        commitments = sum(1 for _ in read_to_end(kafka, topics.commitments))
        return LiveResult(live["plans"], live["halts"], manifests, commitments, elapsed, got == want)
    except TimeoutError as exc:
        raise SmokeError(f"{exc}\n{worker.log_tail()}") from exc
    finally:
        worker.stop()
