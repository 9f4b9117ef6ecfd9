"""Following the pipeline's topics and emitting OpenLineage as records arrive.

``lineage.events`` (the jobs' events), then the referee's ``lineage.manifests``,
``lineage.control`` and ``lineage.checkpoints``, each read from where the last round stopped
(:func:`streams.kafka.reader.read_range`, no consumer group: nothing is left on the broker), in
rounds: in a round, events go first, so a run's START usually precedes what the referee says of
it. ``once`` stops after the round that reached the end offsets taken when it began (a
backfill); otherwise rounds repeat every ``poll`` seconds until interrupted.

Every record goes through :class:`~streams.openlineage.mapping.OpenLineageMapper`, whose ids
are deterministic: following again from the beginning re-sends the same events, which a
backend merges.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from streams.codec import Codec, DecodeError
from streams.core.errors import InvalidEvent
from streams.kafka.retry import retry_transient
from streams.kafka.reader import read_range, topic_partitions
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.openlineage.mapping import OpenLineageMapper
from streams.records import typed

#: the topics read, in the order of a round: TopicNames field -> what its records are
TOPICS = ("events", "manifests", "control", "checkpoints")

#: (topic, partition, offset, reason) of a record that could not be read
SkipFn = Callable[[str, int, int, str], None]


@dataclass
class FollowStats:
    records: int = 0
    skipped: int = 0
    emitted: int = 0
    by_type: dict[str, int] = field(default_factory=dict)


def end_offsets(kafka: KafkaSettings, topic: str) -> dict[int, int]:
    """partition -> end offset of ``topic`` now (the start of ``--from-end``)."""
    consumer = kafka.consumer(f"traintrace-openlineage-{uuid.uuid4().hex[:12]}", **{"enable.auto.commit": False})
    try:
        return {p: retry_transient(lambda left, p=p: consumer.get_watermark_offsets(_tp(topic, p), timeout=left,
                                                                                 cached=False),
                                   f"the end offset of {topic}[{p}]", 30.0)[1]
                for p in topic_partitions(kafka, topic)}
    finally:
        consumer.close()


def _tp(topic: str, partition: int) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition)


class Follower:
    """Rounds over :data:`TOPICS`, yielding each record's decoded content in order."""

    def __init__(self, kafka: KafkaSettings, topics: TopicNames, codec: Codec | None = None,
                 from_end: bool = False, on_skip: SkipFn | None = None) -> None:
        self.kafka = kafka
        self.names = {kind: getattr(topics, kind) for kind in TOPICS}
        self.codec = codec or Codec()
        self.on_skip = on_skip
        self.positions: dict[str, dict[int, int]] = {
            kind: (end_offsets(kafka, name) if from_end else {}) for kind, name in self.names.items()}

    def round(self) -> Iterator[tuple[str, str, Any]]:
        """One pass over every topic from the last positions to the current end offsets: yields
        (kind, record name, value): ("event", event type, Event) or ("record", name, its typed
        record)."""
        for kind, topic in self.names.items():
            pos = self.positions[kind]
            ranges = {p: (pos.get(p, 0), None) for p in topic_partitions(self.kafka, topic)}
            for msg in read_range(self.kafka, topic, ranges):
                pos[msg.partition()] = msg.offset() + 1
                item = self._decode(kind, msg)
                if item is not None:
                    yield item

    def _decode(self, kind: str, msg: Any) -> tuple[str, str, Any] | None:
        try:
            if kind == "events":
                event = self.codec.decode_event_typed(msg.value() or b"")
                return "event", type(event).__name__, event
            name, value = self.codec.decode_record(msg.value() or b"")
            return "record", name, typed(name, value)
        except (DecodeError, InvalidEvent, ValueError, KeyError, TypeError) as exc:
            if self.on_skip is not None:
                self.on_skip(msg.topic(), msg.partition(), msg.offset(), str(exc))
            return None


def stream_openlineage(follower: Follower, mapper: OpenLineageMapper, emit: Callable[[dict[str, Any]], None],
                       once: bool = False, poll: float = 1.0, stats: FollowStats | None = None,
                       should_stop: Callable[[], bool] | None = None) -> FollowStats:
    """Map and ``emit`` every record ``follower`` reads: one round with ``once``, else rounds
    every ``poll`` seconds until ``should_stop()`` (or Ctrl-C). Returns the counts."""
    stats = stats or FollowStats()
    while True:
        for kind, name, value in follower.round():
            stats.records += 1
            events = mapper.on_event(value) if kind == "event" else mapper.on_record(value)
            for event in events:
                emit(event)
                stats.emitted += 1
                stats.by_type[event["eventType"]] = stats.by_type.get(event["eventType"], 0) + 1
        if once or (should_stop is not None and should_stop()):
            return stats
        time.sleep(poll)


__all__ = ["FollowStats", "Follower", "TOPICS", "end_offsets", "stream_openlineage"]
