"""The processor's clock for grace periods: how far the input has been read, not the wall clock.

SPEC §8 halts a job whose consumption names a checkpoint nobody recorded "after a
configurable grace period". The writer of that checkpoint may be any job, so its
``CheckpointWritten`` may sit on any partition of ``lineage.events``. While a partition is not
routed (its worker died and nobody took it over yet, or it lags), a write on it is not
*missing*: the processor has not read it. So the grace period runs on the **input watermark**:

    the earliest record timestamp the processor may still have to read on ``lineage.events``
    = min over its partitions of: the timestamp of the first record not yet routed (the
    group's committed offset), or, for a partition routed to its end, the time it was found so
    (less ``slack_ms`` for records stamped just before and appended just after).

A consumption (first seen at the timestamp of its input record) is past its grace period when
the watermark is ``grace_ms`` beyond it. The worker then appends a tick carrying the watermark
to the cohort's input, and the fold halts there: every replay halts at the same point. A worker
that is away, or behind, holds the watermark back instead of halting healthy jobs.
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from streams.kafka.retry import RetryPolicy, retry_transient
from streams.kafka.settings import KafkaSettings

log = logging.getLogger("traintrace.worker")


def now_ms() -> int:
    """The wall clock in integer milliseconds (what Kafka timestamps are)."""
    return int(time.time() * 1000)


def one_record_config(kafka: KafkaSettings | str, group: str) -> dict:
    """A consumer that reads one record at a time (no prefetching of whole partitions)."""
    kafka = KafkaSettings.of(kafka)
    return kafka.consumer_config(group, **{"enable.partition.eof": True, "queued.min.messages": 1,
                                           "queued.max.messages.kbytes": 1024,
                                           "max.partition.fetch.bytes": 262144})


def first_record(consumer: Consumer, topic: str, partition: int, offset: int, timeout: float):
    """The first record of ``topic[partition]`` at or after ``offset``, read through
    ``consumer`` (made with :func:`one_record_config`), or None when there is none yet."""
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return None
                continue
            return msg
    finally:
        consumer.unassign()
    raise TimeoutError(f"no record of {topic}[{partition}] at or after {offset} within {timeout}s")


class InputClock:
    """Reads the input watermark of ``topic`` for consumer group ``group`` (thread-safe,
    blocking: call it from an executor)."""

    def __init__(self, kafka: KafkaSettings | str, topic: str, group: str, slack_ms: int = 1000) -> None:
        kafka = KafkaSettings.of(kafka)
        self.topic = topic
        self.group = group
        self.slack_ms = slack_ms
        self._lock = threading.Lock()
        # committed offsets are read through a consumer of the group that never subscribes
        # (so it does not join it); records are fetched by a second, group-less one
        self._offsets = kafka.consumer(group, **{"enable.partition.eof": False})
        self._fetch = Consumer(one_record_config(kafka, f"{group}-clock"))
        self._ts_cache: dict[tuple[int, int], int] = {}

    def close(self) -> None:
        with self._lock:
            self._offsets.close()
            self._fetch.close()

    def _timestamp_at(self, partition: int, offset: int, timeout: float) -> int | None:
        """The timestamp of the first record at or after ``offset`` (None: none there yet)."""
        key = (partition, offset)
        if key in self._ts_cache:
            return self._ts_cache[key]
        msg = first_record(self._fetch, self.topic, partition, offset, timeout)
        if msg is None:
            return None
        if len(self._ts_cache) > 4096:
            self._ts_cache.clear()
        ts = self._ts_cache[key] = msg.timestamp()[1]
        return ts

    def watermark(self, now_ms: int, timeout: float = 10.0) -> int:
        """The input watermark in milliseconds (see the module's doc); ``now_ms`` is the wall
        clock read before the offsets."""
        policy = RetryPolicy(deadline_s=timeout)
        with self._lock:
            md = retry_transient(lambda left: self._offsets.list_topics(self.topic, timeout=left),
                                 f"the partitions of {self.topic}", policy)
            parts = sorted(md.topics[self.topic].partitions) if self.topic in md.topics else []
            committed = retry_transient(
                lambda left: self._offsets.committed([TopicPartition(self.topic, p) for p in parts], timeout=left),
                f"the committed offsets of {self.group} on {self.topic}", policy)
            mark = now_ms - self.slack_ms
            for tp in committed:
                low, high = retry_transient(
                    lambda left, p=tp.partition: self._offsets.get_watermark_offsets(
                        TopicPartition(self.topic, p), timeout=left),
                    f"the end offsets of {self.topic}[{tp.partition}]", policy)
                pos = tp.offset if tp.offset >= 0 else low
                if pos >= high:
                    continue  # routed to its end
                ts = self._timestamp_at(tp.partition, pos, timeout)
                if ts is not None:
                    mark = min(mark, ts)
            return mark
