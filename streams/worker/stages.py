"""The worker's two stages, each over one input topic: routing ``lineage.events`` to
``lineage.by-cohort`` and folding ``lineage.by-cohort`` through the referee.

Both process their records the same way (:meth:`Stage.process`): under the stage's lock, in
offset order per partition, only the next record of a partition the worker owns
(:class:`~streams.worker.positions.InputPartitions`); what Faust did not deliver before such a
record is read from the topic directly and processed first. Then everything the records caused
is sent, and the call waits for the deliveries of the call before it: a batch's records are on
their way while the next batch is processed (issue 27). The positions the records moved count as
processed only once their deliveries are in (:meth:`Stage.settle`): everything that commits
positions settles first (:mod:`streams.worker.assignment`), and a feed that finds nothing more
settles at once. :class:`StallWatch` hands a stage the records Faust read but never delivered at
the tail of a partition.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from typing import Any, Callable

from confluent_kafka import KafkaException, TopicPartition

from streams.codec import Codec, DecodeError
from streams.kafka.errors import KafkaSecurityError
from streams.kafka.reader import ReaderError, read_range
from streams.referee.input import ParsedEvents, fold_batch
from streams.referee.records import Emission
from streams.referee.referee import Referee
from streams.worker import metrics
from streams.worker.clock import now_ms
from streams.worker.errors import WorkerError
from streams.worker.jobmap import RECHECK_S, JobCohortMap, entry_headers, read_map_entries
from streams.worker.outbox import Outbox, Ticket
from streams.worker.positions import InputPartitions, Arrival
from streams.worker.router import RawRecord, Routed, Router, dead_letter
from streams.worker.settings import WorkerSettings

log = logging.getLogger("traintrace.worker")

#: records of lineage.events per EventBatch on lineage.by-cohort
EVENTS_PER_BATCH = 1000


class _ReadFirst(Exception):
    """Raised by a stage's ``take`` before it changed anything: ``read`` (blocking) must run
    first, then the same record is taken again. Not an error: how a stage that needs a read
    for a record leaves the event loop free while it reads."""

    def __init__(self, read: Callable[[], None]) -> None:
        super().__init__("read first")
        self.read = read


def die(agent: str, exc: BaseException) -> None:
    """Crash-only: an unexpected error in an agent stops the process at once, before Faust
    acknowledges the batch, so the batch is processed again after a restart (at-least-once).
    Bad input never gets here: it goes to the dead-letter topic."""
    if isinstance(exc, KafkaSecurityError):  # the cluster refused us: one line, no traceback
        log.critical("agent %s failed; exiting so the batch is redelivered: %s", agent, exc)
    else:
        log.critical("agent %s failed; exiting so the batch is redelivered: %r", agent, exc, exc_info=exc)
    logging.shutdown()
    os._exit(70)


#: reads of a range before a record that came back with nothing and short of the record: then the
#: stage gives up (the worker exits to be restarted) rather than step over records it never saw
GAP_READS = 5
#: seconds before the next of those reads, times the reads so far
GAP_BACKOFF_S = 0.2


class ShortRead(WorkerError):
    """A direct read ended before the offset it was asked for, with nothing read."""


def read_records(settings: WorkerSettings, topic: str, partition: int, start: int, end: int) -> list[RawRecord]:
    """The records of ``topic[partition]`` at offsets [start, end), read directly: records a
    worker owns but Faust did not deliver (its fetcher resumed past them after a rebalance and
    dropped the re-fetched ones) are processed from here, in order. Timestamps in ms. Raises
    :class:`ShortRead` when the read ended (the partition's end as the read saw it) short of
    ``end`` with nothing read: a gap is stepped over only when the read reached ``end`` and found
    no record there (a compacted or transactional log), never because a read came back early."""
    if end <= start:
        return []
    complete: set[int] = set()
    out = [RawRecord(topic, partition, msg.offset(), msg.key(), msg.value(), msg.timestamp()[1], msg.headers())
           for msg in read_range(settings.kafka, topic, {partition: (start, end)}, timeout=60.0, complete=complete)]
    if not out and partition not in complete:
        raise ShortRead(f"{topic}[{partition}]: a read of offsets {start}..{end - 1} ended with nothing read")
    return out


def faust_record(e) -> RawRecord:
    """A Faust event's message as a :class:`RawRecord` (timestamp in ms)."""
    m = e.message
    ts = m.timestamp  # float seconds
    return RawRecord(m.topic, m.partition, m.offset, m.key, m.value,
                     int(round(ts * 1000)) if ts is not None and ts > 0 else now_ms(), m.headers)


class Stage:
    """One input topic of the worker: the partitions it owns (:attr:`input`), the lock its
    processing runs under, and what a record does (:meth:`begin`, :meth:`take`, :meth:`finish`)."""

    #: what is done with a record (for the log)
    verb = "processing"
    #: the stage's label in the metrics
    name = "stage"

    def __init__(self, settings: WorkerSettings, topic: str, codec: Codec, outbox: Outbox,
                 lock: asyncio.Lock) -> None:
        self.settings = settings
        self.input = InputPartitions(topic)
        self.codec = codec
        self.outbox = outbox
        self.lock = lock
        #: what the last call sent, not yet known delivered, and what is done once it is
        self.pending: tuple[Ticket, Callable[[Ticket], None]] | None = None

    @property
    def topic(self) -> str:
        return self.input.topic

    async def process(self, records: list[RawRecord]) -> None:
        """Process ``records`` of the input in order and send what they caused; what Faust
        skipped before one of them is read from the topic and processed first. Returns once
        the previous call's records are delivered (:meth:`settle`); this call's are pending."""
        async with self.lock:
            t0 = time.perf_counter()
            batch = self.begin()
            await self._in_order(records, batch)
            t1 = time.perf_counter()
            done = self.finish(batch)
            ticket = self.outbox.cut()
            await self.settle()
            self.pending = (ticket, done)
            t2 = time.perf_counter()
        metrics.STAGE_BATCH.labels(self.name).observe(len(records))
        metrics.STAGE_SECONDS.labels(self.name, "work").observe(t1 - t0)
        metrics.STAGE_SECONDS.labels(self.name, "flush").observe(t2 - t1)

    async def settle(self) -> None:
        """Wait for the deliveries of the last call's records (under the stage's lock): until
        they are in, the positions that call moved are not processed (a failed delivery raises,
        and the worker ends before they are committed)."""
        pending = self.pending
        if pending is None:
            return
        ticket, done = pending
        await self.outbox.wait(ticket)
        self.pending = None
        done(ticket)

    async def _in_order(self, records: list[RawRecord], batch: Any) -> None:
        loop = asyncio.get_running_loop()
        inp = self.input
        queue = list(records)
        i = 0
        while i < len(queue):
            rec = queue[i]
            p, o = rec.partition, rec.offset
            verdict = inp.classify(p, o)
            if verdict is Arrival.STALE or verdict is Arrival.SEEN:
                # not ours any more (its new owner processes it), or processed already
                metrics.STALE.inc()
                i += 1
                continue
            if verdict is Arrival.GAP:
                pos = inp.position[p]
                log.info("%s[%d]: offsets %d..%d were not delivered: %s them from the topic",
                         self.topic, p, pos, o - 1, self.verb)
                missing = await self._read_gap(p, pos, o)
                metrics.DIRECT_READS.inc()
                queue[i:i] = missing  # in order, before this record
                if not missing:  # a read that reached the record and found none before it: a real gap
                    log.warning("%s[%d]: no record at offsets %d..%d (a gap in the log): stepped over",
                                self.topic, p, pos, o - 1)
                    inp.position[p] = o
                continue
            try:
                self.take(batch, rec)
            except _ReadFirst as first:  # something to read before this record: off the event loop
                await loop.run_in_executor(None, first.read)
                continue  # the same record again
            inp.advance(p, o)  # (in memory only: committed once the outputs are out)
            i += 1

    async def _read_gap(self, p: int, pos: int, o: int) -> list[RawRecord]:
        """The records of partition ``p`` at [pos, o), read from the topic; a read that comes back
        short with nothing is tried again (up to :data:`GAP_READS` times, then it raises)."""
        loop = asyncio.get_running_loop()
        for attempt in range(1, GAP_READS + 1):
            try:
                return await loop.run_in_executor(None, read_records, self.settings, self.topic, p, pos, o)
            except ShortRead as exc:
                if attempt == GAP_READS:
                    raise
                log.warning("%s (try %d of %d): reading again", exc, attempt, GAP_READS)
                await asyncio.sleep(GAP_BACKOFF_S * attempt)
        return []  # (not reached)

    def begin(self) -> Any:
        """What the records of one call collect."""
        raise NotImplementedError

    def take(self, batch: Any, rec: RawRecord) -> None:
        """Process the next record of an owned partition into ``batch``."""
        raise NotImplementedError

    def finish(self, batch: Any) -> Callable[[Ticket], None]:
        """Send what ``batch`` collected; returns what to do once it is delivered."""
        raise NotImplementedError


class RouteStage(Stage):
    """Stage one: decode and validate each record of ``lineage.events``, route it to its cohort
    on ``lineage.by-cohort`` (bad records to the dead-letter topic); a job's first cohort goes
    to ``lineage.job-cohorts`` (:mod:`streams.worker.jobmap`)."""

    verb = "routing"
    name = "route"

    def __init__(self, settings: WorkerSettings, codec: Codec, jobmap: JobCohortMap, outbox: Outbox,
                 lock: asyncio.Lock, parsed: ParsedEvents | None = None) -> None:
        super().__init__(settings, settings.topics.events, codec, outbox, lock)
        self.jobmap = jobmap
        self.router = Router(codec, jobmap, parsed, recheck=self.recheck)
        #: events partition -> (monotonic time, its entries) of the last re-read of its map partition
        self.map_reads: dict[int, tuple[float, dict[str, tuple[str, int | None]]]] = {}

    def begin(self) -> tuple[Routed, int]:
        return Routed(), now_ms()

    def take(self, batch: tuple[Routed, int], rec: RawRecord) -> None:
        routed, now = batch
        self.jobmap.partition = rec.partition  # a job's map entry goes to its events partition
        self.jobmap.offset = rec.offset
        self.router.route_one(rec, routed, now)

    def recheck(self, rec: RawRecord, job: str) -> str | None:
        """An event of a job this worker's map has no cohort for: the cohort of the job's entry
        in ``lineage.job-cohorts`` learnt from a JobStarted before it, written by another worker
        since this one read the map, or None (the job is unregistered). When a re-read is due
        (at most every RECHECK_S seconds a partition: streams.worker.jobmap) it raises
        :class:`_ReadFirst`: the read runs in an executor and the record is taken again."""
        p = rec.partition
        at, entries = self.map_reads.get(p, (None, {}))
        if job not in entries and (at is None or time.monotonic() - at >= RECHECK_S):
            raise _ReadFirst(functools.partial(self.read_map, p))  # then this record again
        entry = entries.get(job)
        if entry is None or (entry[1] is not None and entry[1] >= rec.offset):
            metrics.JOBMAP_RECHECKS.labels("no").inc()
            return None
        del entries[job]  # in the map from now on
        cohort = self.jobmap.map.setdefault(job, entry[0])
        metrics.JOBMAP_RECHECKS.labels("yes").inc()
        log.warning("%s[%d]@%d: job %r had no cohort in this worker's map, but %s[%d] has it (%r, from the "
                    "JobStarted at offset %s), written since this worker read it: another worker routed this "
                    "partition meanwhile; routed to %r", self.topic, p, rec.offset, job,
                    self.settings.topics.job_cohorts, p, cohort, entry[1], cohort)
        return cohort

    def read_map(self, partition: int) -> None:
        """Read ``partition`` of ``lineage.job-cohorts`` again (blocking: run in an executor)."""
        entries = read_map_entries(self.settings.kafka, self.settings.topics.job_cohorts, [partition])
        known = self.jobmap.map
        # only what the map lacks is kept: a partition's whole map is not held twice
        self.map_reads[partition] = (time.monotonic(), {j: e for j, e in entries.items() if j not in known})

    def finish(self, batch: tuple[Routed, int]) -> Callable[[Ticket], None]:
        routed, _now = batch
        topics, outbox = self.settings.topics, self.outbox
        self.jobmap.partition = self.jobmap.offset = None
        for job, cohort, p, at in self.jobmap.take_pending():
            outbox.send(topics.job_cohorts, job.encode(), cohort.encode(), entry_headers(at), partition=p)
        for cohort, value in self.router.encode(routed, EVENTS_PER_BATCH):
            outbox.send(topics.by_cohort, cohort.encode(), value)
        for dead in routed.dead:
            outbox.dead_letter(dead)
        events = routed.events
        return lambda _ticket: metrics.ROUTED.inc(events)


class FoldStage(Stage):
    """Stage two: fold each record of ``lineage.by-cohort`` through the referee (one core
    engine per cohort) and publish what it decides."""

    verb = "folding"
    name = "fold"

    def __init__(self, settings: WorkerSettings, codec: Codec, referee: Referee, outbox: Outbox,
                 lock: asyncio.Lock, parsed: ParsedEvents | None = None) -> None:
        super().__init__(settings, settings.topics.by_cohort, codec, outbox, lock)
        self.referee = referee
        #: the events the route stage of this worker parsed already (decoded once, issue 27)
        self.parsed = parsed
        #: partition -> events folded since the last snapshot round (streams.worker.snapshots)
        self.folded: dict[int, int] = {}
        #: events folded on every partition since the worker started (how long a partition or a
        #: cohort without input has been quiet on a backlog: streams.worker.snapshots.quiet_events)
        self.folded_all = 0

    def owns_cohort(self, cohort: str) -> bool:
        return self.referee.partition_of.get(cohort) in self.input.owned

    def begin(self) -> list[Emission]:
        return []

    def take(self, out: list[Emission], rec: RawRecord) -> None:
        # the processor's time of these events is their input record's timestamp (the
        # router's clock), as in a replay: what it decides is reproducible from the log
        n, emissions = fold_batch(self.codec, self.referee, rec.value, rec.partition, rec.offset,
                                  rec.timestamp or now_ms(), True, functools.partial(self._reject, rec), self.parsed)
        out.extend(emissions)
        self.folded[rec.partition] = self.folded.get(rec.partition, 0) + max(n, 1)  # a tick counts too
        self.folded_all += max(n, 1)
        metrics.FOLDED.inc(n)

    def _reject(self, rec: RawRecord, routed: dict[str, Any] | None, reason: str, kind: str) -> None:
        """A dead letter for what could not be folded: the routed event of ``lineage.events``,
        or (``routed`` None) the whole input record."""
        # the original's headers: the by-cohort record's own, or (an event, whose headers the
        # EventBatch does not carry) those its type is written with
        original = rec.kafka_headers()
        if routed:
            try:
                original = self.codec.headers.event(self.codec.decode_event(routed["value"])["type"])
            except (DecodeError, KeyError):
                original = None
            rec = RawRecord(self.settings.topics.events, routed["partition"], routed["offset"], None,
                            routed["value"])
        else:
            rec = RawRecord(rec.topic, rec.partition, rec.offset, None, rec.value)
        self.outbox.dead_letter(dead_letter(rec, kind, reason, now_ms()), original if original is not None else ())

    def finish(self, out: list[Emission]) -> Callable[[Ticket], None]:
        referee = self.referee
        if any(em.topic == "manifests" for em in out):
            out.extend(referee.commitments(now_ms()))
        for em in out:
            self.outbox.emit(em)
        # traintrace_divergence_to_command_seconds, at the last delivery report
        return lambda ticket: metrics.observe_published(out, ticket.acked_at)
        # (the gauges of the referee's state walk every cohort in memory: housekeeping sets
        # them once a second, not every batch, or a batch would cost more the more cohorts)


class StallWatch:
    """An owned partition whose position stays put while records wait past it:

    - over one whole pass, when Faust has already read them: Faust skipped its tail (nothing
      later arrives to show the gap);
    - over :attr:`fetch_stall_passes` passes, when Faust has not read them and its own read
      offset did not move either: its fetcher is stuck on the partition (seen once in CI after
      a partition leader was killed and restarted: half the log was never delivered).

    Its records are read from the topic and processed, in order (at most :attr:`max_records` a
    pass); should Faust deliver them later, they are seen already and skipped."""

    max_records = 5000
    #: passes (the timer runs every 2 s) of no progress, Faust's included, before its fetcher is
    #: taken for stuck: well beyond a rebalance or a leader election
    fetch_stall_passes = 15

    def __init__(self, settings: WorkerSettings, stages: tuple[Stage, ...],
                 faust_read_offset: Callable[[str, int], int | None]) -> None:
        self.settings = settings
        self.stages = stages
        #: Faust's own read offset of (topic, partition), None: not read yet
        self.faust_read_offset = faust_read_offset
        self.watermarks = settings.kafka.consumer(f"{settings.app_id}-watermarks")
        self.waiting: dict[tuple[str, int], int] = {}  # (topic, partition) -> position seen with records waiting
        #: (topic, partition) -> ((position, Faust's read offset), passes seen unchanged) while
        #: Faust has not read to the end
        self.fetching: dict[tuple[str, int], tuple[tuple[int, int | None], int]] = {}

    def close(self) -> None:
        self.watermarks.close()

    async def check(self) -> None:
        for stage in self.stages:
            for p in sorted(stage.input.owned):
                await self._check_partition(stage, p)

    async def _check_partition(self, stage: Stage, p: int) -> None:
        loop = asyncio.get_running_loop()
        topic = stage.topic
        pos = stage.input.position.get(p)
        try:
            _low, high = await loop.run_in_executor(
                None, lambda: self.watermarks.get_watermark_offsets(TopicPartition(topic, p), timeout=10))
        except KafkaException as exc:  # a broker mid-failover: look again on the next pass
            log.warning("%s[%d]: end offset unavailable (%s): stall check skipped this pass", topic, p, exc)
            return
        key = (topic, p)
        # Faust's own read offset: a stall only once Faust has read the partition to its end
        # (it still has a backlog to deliver otherwise: reading it here as well would only
        # duplicate its work)
        faust_read = self.faust_read_offset(topic, p)
        if pos is None or high <= pos:
            self.waiting.pop(key, None)
            self.fetching.pop(key, None)
            return
        if faust_read is None or faust_read + 1 < high:
            self.waiting.pop(key, None)
            mark = (pos, faust_read)
            seen, passes = self.fetching.get(key, (None, 0))
            passes = passes + 1 if seen == mark else 1
            self.fetching[key] = (mark, passes)
            if passes < self.fetch_stall_passes:
                return
            log.warning("%s[%d]: neither the position (%d) nor Faust's fetch (%s) moved for %d passes with %d "
                        "record(s) waiting: Faust's fetcher is stuck", topic, p, pos, faust_read, passes, high - pos)
            metrics.FETCH_STALLS.inc()
            self.fetching.pop(key, None)
        else:
            self.fetching.pop(key, None)
            if self.waiting.get(key) != pos:
                self.waiting[key] = pos
                return
        try:
            records = await loop.run_in_executor(None, read_records, self.settings, topic, p, pos,
                                                 min(high, pos + self.max_records))
        except (ReaderError, ShortRead) as exc:  # likewise: the next pass reads them
            log.warning("%s[%d]: could not read the waiting records (%s): next pass", topic, p, exc)
            return
        log.info("%s[%d]: no progress past %d with %d record(s) waiting: processing them from the topic",
                 topic, p, pos, high - pos)
        metrics.DIRECT_READS.inc()
        try:
            await stage.process(records)
        except Exception as exc:  # as in the agents: never count unflushed outputs as done
            die("stalled_partitions", exc)
