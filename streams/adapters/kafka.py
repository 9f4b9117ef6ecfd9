"""confluent-kafka helpers: client configuration, topics, bootstrap discovery.

Producers use ``partitioner=murmur2_random`` so a key lands on the same partition as with
Faust/aiokafka (Java's default partitioner), plus idempotence and ``acks=all``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"

# librdkafka's own log lines (e.g. the harmless "Coordinator load in progress: retrying" of a
# fresh broker) go to this logger instead of stderr; TRAINTRACE_KAFKA_DEBUG=1 shows them.
client_logger = logging.getLogger("traintrace.kafka")
if not os.environ.get("TRAINTRACE_KAFKA_DEBUG"):
    client_logger.propagate = False
    client_logger.addHandler(logging.NullHandler())


class KafkaAdapterError(Exception):
    """A Kafka operation of traintrace failed; the message says which and why."""


_TOPIC_FIELDS = ("events", "control", "alerts", "manifests", "commitments", "dlq", "by_cohort", "checkpoints")


@dataclass(frozen=True)
class TopicNames:
    """The topics of SPEC §3 and the processor's internal ones.

    Every name is configurable: ``TRAINTRACE_TOPIC_<NAME>`` sets one (e.g.
    ``TRAINTRACE_TOPIC_EVENTS``), ``TRAINTRACE_TOPIC_PREFIX`` prefixes them all (tests use a
    fresh prefix to get fresh topics).
    """

    events: str = "lineage.events"
    control: str = "lineage.control"
    alerts: str = "lineage.alerts"
    manifests: str = "lineage.manifests"
    commitments: str = "lineage.commitments"
    dlq: str = "lineage.dlq"
    # internal: events routed by cohort (EventBatch), checkpoint statuses (compacted)
    by_cohort: str = "lineage.by-cohort"
    checkpoints: str = "lineage.checkpoints"

    @classmethod
    def from_env(cls, prefix: str | None = None) -> "TopicNames":
        base = cls()
        if prefix is None:
            prefix = os.environ.get("TRAINTRACE_TOPIC_PREFIX", "")
        return cls(**{
            name: prefix + os.environ.get(f"TRAINTRACE_TOPIC_{name.upper()}", getattr(base, name))
            for name in _TOPIC_FIELDS
        })

    def all(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in _TOPIC_FIELDS}


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    conf = {
        "bootstrap.servers": bootstrap,
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "logger": client_logger,
    }
    conf.update(overrides)
    return conf


def consumer_config(bootstrap: str, group_id: str, **overrides: Any) -> dict[str, Any]:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "logger": client_logger,
    }
    conf.update(overrides)
    return conf


def ensure_topics(bootstrap: str, topics: Iterable[tuple[str, int, dict[str, str] | None]],
                  timeout: float = 30.0) -> None:
    """Create the topics that do not exist yet: (name, partitions, config)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise KafkaAdapterError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    new = [NewTopic(name, num_partitions=parts, replication_factor=1, config=config or {})
           for name, parts, config in topics if name not in existing]
    if not new:
        return
    for name, fut in admin.create_topics(new, operation_timeout=timeout).items():
        try:
            fut.result()
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise KafkaAdapterError(f"cannot create topic {name}: {exc}") from exc
    deadline = time.monotonic() + timeout
    wanted = {t.topic for t in new}
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=timeout).topics
        if all(n in md and md[n].partitions and all(p.leader >= 0 for p in md[n].partitions.values())
               for n in wanted):
            return
        time.sleep(0.1)
    raise KafkaAdapterError(f"topics {sorted(wanted)} did not get leaders within {timeout}s")


def standard_topics(names: TopicNames, partitions: int = 8) -> list[tuple[str, int, dict[str, str] | None]]:
    """Every topic of the pipeline with its partition count and config."""
    compact = {"cleanup.policy": "compact"}
    keep = {"retention.ms": "-1"}  # the event-sourced internal log is kept whole
    small = max(1, partitions // 2)
    return [
        (names.events, partitions, None),
        (names.control, partitions, None),
        (names.alerts, small, None),
        (names.manifests, small, compact),
        (names.commitments, small, None),  # every commitment is kept for audits
        (names.dlq, small, None),
        (names.by_cohort, partitions, keep),
        (names.checkpoints, partitions, compact),
    ]


def seed_group_offsets(bootstrap: str, group_id: str, topics: Iterable[str], timeout: float = 10.0) -> int:
    """Give every partition of ``topics`` a committed offset for ``group_id`` (its low
    watermark) where it has none yet. Best effort, and only possible while the group has no
    member: a partition with no committed offset is left to the consumer's reset policy, which
    Faust applies late after a rebalance (records produced meanwhile could be skipped).
    Returns how many offsets were seeded."""
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    topics = list(topics)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False,
                         "logger": client_logger})
    seeds: list[TopicPartition] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                seeds = []
                for topic in topics:
                    md = consumer.list_topics(topic, timeout=timeout)
                    if topic not in md.topics:
                        continue
                    parts = list(md.topics[topic].partitions)
                    committed = consumer.committed([TopicPartition(topic, p) for p in parts], timeout=timeout)
                    for tp in committed:
                        if tp.offset < 0:
                            low, _high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition),
                                                                        timeout=timeout)
                            seeds.append(TopicPartition(topic, tp.partition, max(low, 0)))
                break
            except KafkaException:  # e.g. the group coordinator of a fresh broker is still loading
                if time.monotonic() > deadline:
                    return 0
                time.sleep(0.5)
    finally:
        consumer.close()
    if not seeds:
        return 0
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": client_logger})
    try:
        futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id, seeds)],
                                                     request_timeout=timeout)
        for fut in futures.values():
            fut.result()
    except KafkaException:
        return 0  # the group has members (they commit as they go): nothing to seed
    return len(seeds)
