"""Taking a ``lineage.by-cohort`` partition over: the referee's state is event-sourced from it.

A worker assigned a partition replays it up to the group's committed offset without
publishing (:func:`replay_partition`), learns the command ids already on ``lineage.control``
(a previous owner may have published for offsets it never committed), and publishes what the
rebuilt state holds and ``lineage.control`` lacks (a previous owner may have committed offsets
whose commands never got out): :meth:`Takeover.catch_up`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from confluent_kafka import TopicPartition

from streams.codec import Codec
from streams.kafka.reader import read_range, retry_transient
from streams.referee.input import fold_batch
from streams.referee.referee import Referee
from streams.worker import metrics, verify
from streams.worker.clock import now_ms
from streams.worker.errors import WorkerError
from streams.worker.gctune import release_free_memory, rss_mb
from streams.worker.outbox import Outbox
from streams.worker.published import read_published_commands
from streams.worker.settings import TAKEOVER_PATIENCE_S, WorkerSettings
from streams.worker.snapshots import SnapshotStore

log = logging.getLogger("traintrace.worker")


def replay_partition(settings: WorkerSettings, codec: Codec, referee: Referee, partition: int,
                     start: int, end: int, skip: dict[bytes, int] | None = None) -> int:
    """Fold ``lineage.by-cohort`` partition ``partition`` offsets [start, end) into the
    referee without publishing; a record keyed ``k`` before ``skip[k]`` is left out (its
    cohort's snapshot covers it). Returns the number of events folded."""
    if end <= start:
        return 0
    topic = settings.topics.by_cohort
    n = 0
    position = start
    complete: set[int] = set()
    for msg in read_range(settings.kafka, topic, {partition: (start, end)}, timeout=TAKEOVER_PATIENCE_S, complete=complete):
        position = msg.offset() + 1
        if skip and msg.offset() < skip.get(msg.key(), -1):
            continue
        n += fold_batch(codec, referee, msg.value(), partition, msg.offset(), msg.timestamp()[1],
                        publish=False, on_reject=None)[0]
    if partition not in complete:
        raise WorkerError(f"{topic}[{partition}] ends at {position}, expected {end}")
    return n


def group_starts(settings: WorkerSettings, topic: str, partitions: list[int]) -> dict[int, int]:
    """Where the group resumes each partition: its committed offset, or where the partition
    begins when it has none."""
    consumer = settings.kafka.consumer(settings.group_id)
    try:
        got = retry_transient(lambda left: consumer.committed([TopicPartition(topic, p) for p in partitions],
                                                              timeout=left),
                              f"the committed offsets of {topic}", TAKEOVER_PATIENCE_S)
        out = {}
        for tp in got:
            if tp.offset >= 0:
                out[tp.partition] = tp.offset
            else:
                low, _high = retry_transient(
                    lambda left: consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=left),
                    f"the start offset of {topic}[{tp.partition}]", TAKEOVER_PATIENCE_S)
                out[tp.partition] = max(low, 0)
        return out
    finally:
        consumer.close()


class Takeover:
    """Brings the referee's state of a by-cohort partition up to where the group resumes it.
    ``position`` (by-cohort partition -> next offset folded into the referee) is the fold
    stage's."""

    def __init__(self, settings: WorkerSettings, codec: Codec, referee: Referee, outbox: Outbox,
                 position: dict[int, int], snapshots: SnapshotStore | None = None) -> None:
        self.settings = settings
        self.codec = codec
        self.referee = referee
        self.outbox = outbox
        self.position = position
        self.snapshots = snapshots

    async def _learn_published(self) -> dict[str, tuple[str, str]]:
        """Mark every command id on ``lineage.control`` published; the last plan record of each job."""
        loop = asyncio.get_running_loop()
        on = await loop.run_in_executor(None, read_published_commands, self.settings, self.codec)
        self.referee.published |= on.command_ids
        self.referee.learn_in_force(on.in_force)
        return on.last_plans

    async def catch_up(self, partition: int, end: int) -> None:
        """Take over a by-cohort partition: learn every command id already published (a
        previous owner may have published for offsets it never committed), then replay the
        partition up to ``end`` without publishing: from its snapshots on when there are any
        (:mod:`streams.worker.snapshots`), else from its start."""
        loop = asyncio.get_running_loop()
        position, referee = self.position, self.referee
        skip: dict[bytes, int] = {}
        loaded = False
        if partition not in position:  # a takeover: learn what a previous owner published
            await self._learn_published()
            if self.snapshots is not None and end > 0:
                first, covered = await loop.run_in_executor(None, self.snapshots.load, partition, end)
                position[partition] = first
                skip = {c.encode(): o for c, o in covered.items()}
                loaded = first > 0 or bool(covered)
        start = position.get(partition, 0)
        if end <= start and not loaded:
            position.setdefault(partition, start)
            return
        t = time.perf_counter()
        n = await loop.run_in_executor(None, replay_partition, self.settings, self.codec, referee, partition,
                                       start, end, skip)
        position[partition] = end
        metrics.REPLAYED.inc(n)
        if self.settings.verify_rebuilds and self.snapshots is not None:
            await loop.run_in_executor(None, verify.check, self.settings, self.codec,
                                       f"the takeover of {self.settings.topics.by_cohort}[{partition}] at {end} "
                                       f"(re-folded from {start})", partition, end,
                                       lambda: self.snapshots.partition_heads(partition))
        # publish what the rebuilt state holds and lineage.control lacks (a previous owner may
        # have committed offsets whose commands never got out)
        last_plan = await self._learn_published()
        missing = referee.reconcile(partition, last_plan, now_ms())
        for em in missing:
            self.outbox.emit(em)
        if missing:
            await self.outbox.flush()
        release_free_memory()  # what reading the topics freed (streams.worker.gctune)
        log.info("rebuilt %s[%d] from offsets %d..%d: %d events in %.2fs; %d record(s) reconciled; RSS %.0f MiB",
                 self.settings.topics.by_cohort, partition, start, end, n, time.perf_counter() - t, len(missing),
                 rss_mb())
