"""The smoke round trip: produce the worked example to Kafka, consume it back, fold it."""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

from streams.kafka.settings import consumer_config, producer_config
from streams.kafka.topics import ensure_topics
from streams.codec import Codec, DecodeError
from streams.core.decide import Lineage
from streams.core.events import parse_event
from streams.demo.examples import worked_example
from streams.demo.pipeline import DemoError


class SmokeError(DemoError):
    pass


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


def run_smoke(bootstrap: str, topic: str, partitions: int = 3, timeout: float = 60.0) -> SmokeResult:
    codec = Codec()
    events = worked_example()
    ensure_topics(bootstrap, [(topic, partitions, None)])
    producer = Producer(producer_config(bootstrap))
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

    consumer = Consumer(consumer_config(bootstrap, f"traintrace-smoke-{topic}"))
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


def run_live(bootstrap: str, data_dir: str, partitions: int = 3, timeout: float = 120.0) -> LiveResult:
    """Start one real processor worker on fresh topics, publish the worked example to
    lineage.events, wait until the worker has committed everything, and read the effective
    plans back from lineage.control."""
    import time
    import uuid
    from pathlib import Path

    from streams.kafka.topics import TopicNames, standard_topics
    from streams.kafka.reader import read_to_end
    from streams.core.cohorts import CohortLineage
    from streams.operators.plans import effective_plans
    from streams.worker.process import WorkerProcess, wait_quiescent

    codec = Codec()
    prefix = f"smoke{uuid.uuid4().hex[:8]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(bootstrap, standard_topics(topics, partitions))
    worker = WorkerProcess(bootstrap, prefix, f"traintrace-smoke-{prefix.rstrip('.')}",
                           Path(data_dir) / "worker", partitions,
                           extra_args=["--commit-interval", "0.2", "--loglevel", "warn"]).start()
    try:
        worker.wait_ready(timeout)
        events = worked_example()
        producer = Producer(producer_config(bootstrap))
        t = time.perf_counter()
        for ev in events:
            producer.produce(topics.events, key=ev["job_id"].encode(), value=codec.encode_event(ev),
                             headers=codec.headers.event(ev["type"]))
        if producer.flush(30) > 0:
            raise SmokeError("could not deliver the events")
        wait_quiescent(bootstrap, worker.app_id, topics, timeout=timeout, settle=0.5)
        elapsed = time.perf_counter() - t
        live = effective_plans(bootstrap, topics, codec)
        offline = CohortLineage()
        offline.apply_many(parse_event(e) for e in events)
        offline.finish_input()
        want = [(p["job_id"], p["command_id"]) for p in offline.final_state()["plans"]]
        got = [(p["job_id"], p["command_id"]) for p in live["plans"]]
        manifests = sum(1 for _ in read_to_end(bootstrap, topics.manifests))
        commitments = sum(1 for _ in read_to_end(bootstrap, topics.commitments))
        return LiveResult(live["plans"], live["halts"], manifests, commitments, elapsed, got == want)
    except TimeoutError as exc:
        raise SmokeError(f"{exc}\n{worker.log_tail()}") from exc
    finally:
        worker.stop()
