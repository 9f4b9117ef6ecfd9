"""A stage's records read by a confluent-kafka consumer of its own (issue 27).

Faust delivers every record one by one through its fetcher, conductor, ``Event`` and stream:
on a backlog that machinery, not the routing or the fold, is what the worker spends its core on
(docs/benchmarks.md). A feed takes the records of the partitions the worker owns of one
stage's input (``lineage.events`` for the route stage, ``lineage.by-cohort`` for the fold
stage) in batches from one confluent-kafka consumer (assigned by hand, no group: Faust keeps
the group, the assignment and the commits) and hands them to :meth:`Stage.process
<streams.worker.stages.Stage.process>`, while Faust's own fetch of those partitions is paused.

Nothing about correctness rests on the feed: ``Stage.process`` takes only the next record of a
partition the worker owns, skips what it has seen or no longer owns, and reads a gap from the
topic first. So the feed only follows where the stage is: before each batch, a partition whose
position is not where the feed's consumer stands (a new assignment, a takeover, records the
stall watch or Faust processed) is sought to the stage's position.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.kafka.retry import is_transient
from streams.worker.clock import now_ms
from streams.worker.router import RawRecord
from streams.worker.settings import WorkerSettings

log = logging.getLogger("traintrace.worker")

#: records one batch holds at most
FEED_BATCH = 2000
#: seconds a feed waits for the first record of a batch: ``poll()`` returns as soon as one is
#: there, then ``consume(..., 0)`` takes the rest of the batch from what librdkafka has fetched.
#: (A ``consume()`` of the whole batch waits its whole timeout unless the batch fills: that was
#: 20 ms on every batch of light traffic, and 50 empty rounds a second of an idle feed.) Longer
#: waits cost an idle worker less CPU but made a few incidents in a hundred wait ~130 ms for
#: their commands (0.25 s: p99 126-150 ms in six runs; not explained: the feed's records came
#: at once, docs/benchmarks.md), which 0.05 s did not (p99 21-39 ms in five runs).
FEED_IDLE_S = 0.05
#: ms the broker holds a fetch of the feed's consumer while no record is there (a record that
#: comes answers it at once). 10 ms cost the broker ~12 % of a core per idle worker (its two
#: feeds fetching 100 times a second each); this bounds how long a seek waits for the fetch in
#: flight (librdkafka has one a broker).
FEED_FETCH_WAIT_MS = 100


class DirectFeed:
    def __init__(self, settings: WorkerSettings, stage: Any, batch: int = FEED_BATCH) -> None:
        self.stage = stage
        self.batch = batch
        self.consumer = settings.kafka.consumer(
            f"{settings.app_id}-feed-{stage.name}", **{"enable.auto.commit": False, "enable.partition.eof": False,
                                          "fetch.wait.max.ms": FEED_FETCH_WAIT_MS})
        #: partition -> the offset the consumer delivers next
        self.at: dict[int, int] = {}
        self.errors = 0
        self.closing = False  # the worker is stopping: no more batches
        self._busy = False  # a poll() or consume() runs in the feed's thread
        self._closed = False
        # a thread of its own: a poll() that waits for records holds no thread of the event
        # loop's default executor, which the stages' flushes and the snapshot rounds use
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"traintrace-feed-{stage.name}")

    def close(self) -> None:
        """Stop taking batches and close the consumer: now, or (a poll() or consume() running in
        its thread) as soon as that returns: a consumer is never closed under a running call,
        and a clean stop is not a crash of the feed."""
        self.closing = True
        if not self._busy:
            self._close_now()

    def _close_now(self) -> None:
        if not self._closed:
            self._closed = True
            self.consumer.close()
            self._thread.shutdown(wait=False)

    def highwater(self, topic: str, partition: int) -> int | None:
        """The high watermark of an events partition the feed reads, as its last fetch saw it
        (None: another topic, or none known yet). No broker call."""
        if topic != self.stage.topic or partition not in self.at:
            return None
        tp = TopicPartition(topic, partition)
        try:
            _low, high = self.consumer.get_watermark_offsets(tp, cached=True)  # retried: cached, no broker call
        except KafkaException:
            return None
        return high if high >= 0 else None

    def _follow(self) -> None:
        """Seek the consumer to the stage's positions where they differ (or were revoked)."""
        inp = self.stage.input
        want = {p: inp.position[p] for p in inp.owned if p in inp.position}
        if want == self.at:
            return
        self.consumer.assign([TopicPartition(inp.topic, p, o) for p, o in sorted(want.items())])
        self.at = dict(want)

    def _consume(self, wait: float = FEED_IDLE_S) -> list[RawRecord]:
        """One batch of records (runs in the feed's thread): the first as soon as it comes
        (within ``wait`` seconds), then what is fetched already, up to the batch."""
        first = self.consumer.poll(wait)
        if first is None:
            return []
        msgs = [first]
        if self.batch > 1:
            msgs.extend(self.consumer.consume(self.batch - 1, 0))
        out = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self._error(KafkaException(err))
                continue
            ts = m.timestamp()[1]
            out.append(RawRecord(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                                 ts if ts > 0 else now_ms(), m.headers))  # (read if a dead letter needs them)
        return out

    def _error(self, exc: KafkaException) -> None:
        self.errors += 1
        if self.errors == 1 or self.errors % 1000 == 0:
            log.warning("feed of %s: %s (%d error(s) so far; %s)", self.stage.topic, exc, self.errors,
                        "retried" if is_transient(exc) else "the stall watch reads what waits")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.closing:
            self._follow()
            if not self.at:
                await asyncio.sleep(0.1)
                continue
            self._busy = True
            try:
                # the last batch not yet delivered: take only what is fetched already, and if nothing
                # is, settle it now (its records are sent at once, not after librdkafka's linger)
                wait = 0.0 if self.stage.pending is not None else FEED_IDLE_S
                records = await loop.run_in_executor(self._thread, self._consume, wait)
            except KafkaException as exc:  # retried: the next round consumes again
                self._error(exc)
                await asyncio.sleep(0.5)
                continue
            finally:
                self._busy = False
            if self.closing:  # stopped while it consumed: what it got is the next owner's
                self._close_now()
                return
            if not records:  # nothing more for now: the last batch's deliveries are waited for now,
                # not when the next batch comes (it counts as processed, and is committed, only then;
                # and the wait sends what lingers)
                if self.stage.pending is not None:
                    async with self.stage.lock:
                        await self.stage.settle()
                continue
            for r in records:
                if self.at.get(r.partition, -1) <= r.offset:
                    self.at[r.partition] = r.offset + 1
            await self.stage.process(records)
