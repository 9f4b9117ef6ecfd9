"""Snapshots of the fold on ``lineage.snapshots``: recovery that does not grow with history.

Without them a worker taking a ``lineage.by-cohort`` partition over re-folds it from its first
record. With them:

- **Rounds.** Right after the worker commits a partition's offsets at ``P`` (so ``P`` is where
  any later owner resumes, or beyond), when ``snapshot_every`` events were folded there since the
  last round or ``snapshot_interval_s`` passed with any, it writes a ``CohortSnapshot`` of every
  cohort of the partition that had input since its last one (the state covering all its input
  before ``P``: :mod:`streams.referee.snapshots`), waits for them (``acks=all``), then writes a
  ``SnapshotRound`` saying so. The topic is compacted by key (``c:<cohort>``, ``r``) and has the
  partitions of ``lineage.by-cohort``: snapshot partition ``p`` holds partition ``p``'s cohorts.
- **Recovery** (:meth:`SnapshotStore.load`): read snapshot partition ``p``; the last round at or
  before the group's offset says where to start re-folding; each cohort's latest snapshot is
  loaded; one written after that round (a round cut short by a crash) makes the replay skip the
  cohort's records it already covers. No usable snapshot: the replay starts at 0, as before.
- **Memory** follows the active cohorts: after a round, a *settled* cohort (every job finished,
  every plan acknowledged) leaves memory; only where its snapshot is stays. Its next input
  brings it back (``Referee.restorer``: one direct read of that record).

The state is deterministic, so a snapshot is the same whoever writes it: an audit recomputes
every digest (``streams.audit.snapshots``), and a worker signs them with its commitment key and
refuses, at load, one whose digest or signature does not hold (it re-folds instead).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from streams.codec import Codec, DecodeError
from streams.kafka.reader import RecordReader, read_range
from streams.referee import snapshots as images
from streams.referee.referee import Referee
from streams.worker import metrics, verify
from streams.worker.clock import now_ms
from streams.worker.errors import WorkerError
from streams.worker.resting import RestingViews, Rows, counts_of, rows_of
from streams.worker.settings import TAKEOVER_PATIENCE_S, WorkerSettings

log = logging.getLogger("traintrace.worker")

ROUND_KEY = b"r"
#: a round is due no sooner than this many times the events it would write again (see ``due``)
REWRITE_FACTOR = 2
COHORT_PREFIX = b"c:"
#: the largest snapshot record the worker writes (the topic's max.message.bytes)
MAX_RECORD = 64 * 1024 * 1024
#: seconds a revoke waits for the snapshot records in flight (SnapshotStore.deliver_pending)
REVOKE_FLUSH_S = 10.0


def round_is_due(folded: int, rewritten: int, freed: int) -> bool:
    """Whether a round that is due by count or by time goes ahead, ``folded`` events after the
    partition's last one: when it re-encodes no more than half the input since (``folded`` at
    least :data:`REWRITE_FACTOR` times ``rewritten``, the events the changed cohorts that are
    still training held at their last snapshot: a large cohort training on is written again once
    its input has grown by twice its size, not every round; encoding costs about a tenth of the
    bare fold per event written, so every event is written about 1.5 times at most), or when the
    settled cohorts it writes and lets leave memory hold at least as many events as it re-encodes
    (``freed`` >= ``rewritten``: a cohort settles once, so this costs at most one more encoding
    of each event, and a partition gone quiet with settled cohorts in memory does not keep them
    until its next input)."""
    if folded <= 0:
        return False
    return folded >= REWRITE_FACTOR * rewritten or (freed > 0 and freed >= rewritten)


def quiet_events(settings: WorkerSettings, held: int) -> int:
    """The events the worker folds (on any of its partitions) while a cohort holding ``held``
    events has no input, after which it may leave memory (with ``--evict-idle``) before
    ``--evict-idle-after`` seconds: twice what it holds, and at least ``--snapshot-every``.
    Bringing it back at its next event decodes its snapshot, which costs about a tenth of folding
    its events (:func:`round_is_due`), so this is at most a twentieth of a fold's cost per event
    folded meanwhile. Without it a backlog (events that come faster than that many seconds of
    them) kept in memory every cohort it passed until it was caught up: the running worker's
    memory grew with the backlog, not with the cohorts that train (issue 27). Counted over the
    worker's partitions, not the cohort's own: a backlog's cohorts train one after another, so
    the partition of one that finished may get no input for most of the catch-up, and counted
    there (or in seconds) it stayed in memory for as long (``bench/bench_worker_memory.py``'s
    1M backlog held 20-31 cohorts at once that way)."""
    return max(settings.snapshot_every, REWRITE_FACTOR * held)


@dataclass
class Latest:
    """What the worker knows of a cohort's latest snapshot."""

    covers: int
    offset: int  # in the snapshot topic's partition
    settled: bool = False
    events: int = 0  # events the state held (what writing the cohort again re-encodes)


@dataclass
class Round:
    """One round of one partition, between :meth:`SnapshotStore.begin_round` and
    :meth:`SnapshotStore.settle_round`."""

    partition: int
    covers: int
    t0: float
    written: dict[str, tuple[bool, int]] = field(default_factory=dict)  # cohort -> (settled, events held)
    offsets: dict[str, int] = field(default_factory=dict)  # cohort -> its record's offset
    idle: list[str] = field(default_factory=list)  # unchanged since their snapshot, nothing on the clock
    #: written now, and quiet long enough before (:meth:`SnapshotStore._quiet_before`) or on a
    #: partition gone ``quiet``: they leave memory after it if quiescent
    leaving: list[str] = field(default_factory=list)
    #: its partition had no input for ``--evict-idle-after`` seconds: its quiescent cohorts leave memory after it
    quiet: bool = False
    encode_s: float = 0.0
    #: cohort -> the image written (kept only under --verify-rebuilds: streams.worker.verify)
    images: dict[str, bytes] = field(default_factory=dict)


class SnapshotStore:
    def __init__(self, settings: WorkerSettings, codec: Codec, referee: Referee, signer: Any = None) -> None:
        self.settings = settings
        self.codec = codec
        self.referee = referee
        self.topic = settings.topics.snapshots
        self.enabled = settings.snapshot_every > 0
        self.sign = None
        self.keys: dict[str, Any] = {}
        if signer is not None:
            from streams.signing import SnapshotSigner

            self.sign = SnapshotSigner(signer.private_key)
            self.keys = {self.sign.key_id: self.sign.public_key}
        self.latest: dict[str, Latest] = {}  # cohort -> its latest snapshot (in memory or not)
        self.out_of_memory: dict[str, int] = {}  # settled cohort out of memory -> its partition
        #: what the HTTP views show of the cohorts out of memory (streams.worker.resting)
        self.resting = RestingViews(str(settings.store), settings.data_dir)
        self.resting.out_of_memory = self.out_of_memory
        self.last_round: dict[int, float] = {}  # partition -> monotonic time of its last round
        #: partition -> monotonic time :meth:`rest_idle` last looked at it
        self._idle_looked: dict[int, float] = {}
        #: cohort -> (monotonic time, the worker's events folded everywhere) as of the round that wrote its
        #: last input (or, for a cohort that came with its snapshot, the first look that found it
        #: without input since): where its quiet counts start
        self.quiet_since: dict[str, tuple[float, int]] = {}
        #: partition -> events folded there by this worker, as of its last round
        self.folded_total: dict[int, int] = {}
        #: partition -> the offset its last round covered (with ``folded_total``: the events a
        #: record of it held on average since, see :meth:`_quiet_before`)
        self.round_covers: dict[int, int] = {}
        #: partition -> the worker's events folded everywhere as of its last round (with
        #: ``round_covers``: the worker's events a record of it stood for since)
        self.round_everywhere: dict[int, int] = {}
        #: partition -> (events folded there, monotonic time that count last grew, the worker's
        #: events folded everywhere then), as seen by :meth:`due` and :meth:`rest_idle`: how long,
        #: in seconds and in the worker's events, the partition has had no input
        self.input_seen: dict[int, tuple[int, float, int]] = {}
        #: the events this worker folded on all its partitions since it started (the fold stage's
        #: count, set where the stages are built); None (tests, tools): those of the rounds so far
        self.folded_everywhere: Callable[[], int] | None = None
        #: partition -> the worker's events folded everywhere when :meth:`rest_idle` last looked at it
        self._idle_looked_at: dict[int, int] = {}
        self._producer = None
        self._reader: RecordReader | None = None  # single snapshot records (bring_back, the views)
        self._delivered: dict[str, int] = {}
        self._errors: list[str] = []
        referee.restorer = self.bring_back

    # ------------------------------------------------------------------ rounds

    def due(self, partition: int, folded: int, covers: int | None = None) -> bool:
        """Whether a round of ``partition`` is due, ``folded`` events after its last one
        (:func:`round_is_due`, with what the partition's changed cohorts would cost to write and
        what writing them would let leave memory); or sooner, at ``covers`` (its position,
        committed), when it would let cohorts leave memory holding at least as many events as it
        writes of those that stay (:meth:`_worth_letting_go`)."""
        if not self.enabled:
            return False
        now = time.monotonic()
        quiet = self._partition_quiet(partition, folded, now)
        if folded == 0:
            return False
        since = now - self.last_round.get(partition, 0.0)
        if folded < self.settings.snapshot_every and since < self.settings.snapshot_interval_s and not quiet:
            return covers is not None and self._worth_letting_go(partition, covers, folded)
        return round_is_due(folded, *self._rewritten(partition, self.settings.evict_settled, idle=quiet))

    def _worth_letting_go(self, partition: int, covers: int, folded: int) -> bool:
        """Whether a round of ``partition`` at ``covers`` now, before ``--snapshot-every``, would
        let cohorts leave memory (settled ones, with ``--evict-settled``; quiet ones,
        :meth:`_quiet_before`) holding at least as many events as the changed cohorts that stay
        (which it writes now and again later): so each event is encoded at most twice more
        than it would have been, and a cohort a backlog passed leaves memory once quiet, not
        when its partition has folded ``--snapshot-every`` more (on
        ``bench/bench_worker_memory.py``'s backlog, four to six cohorts a partition)."""
        referee, per_record = self.referee, self._per_record(partition, covers, folded)
        leaving = staying = 0
        for cohort in self._in_memory(partition):
            if self._unchanged(cohort):
                continue
            lin = referee.engines[cohort]
            held = lin.state.events_folded
            if (self.settings.evict_settled and self.may_rest(cohort, lin)) \
                    or self._quiet_before(cohort, covers, referee.position.get(cohort), per_record):
                leaving += held
            else:
                staying += held
        return leaving > 0 and leaving >= staying

    def _per_record(self, partition: int, covers: int, folded: int) -> float:
        """The worker's events (on all its partitions) a record of ``partition`` stood for on
        average since its last round, ``covers`` being its position now and ``folded`` its events
        since (without the count of the last round: the partition's own; 0.0 before its first)."""
        since, since_everywhere = self.round_covers.get(partition), self.round_everywhere.get(partition)
        if since is None or covers <= since:
            return 0.0
        return (folded if since_everywhere is None else self._everywhere(folded) - since_everywhere) \
            / (covers - since)

    def _partition_quiet(self, partition: int, folded: int, now: float) -> bool:
        """Whether ``partition`` (``folded`` events since its last round) has had no input for
        ``--evict-idle-after`` seconds, or while the worker folded :func:`quiet_events` of its
        largest cohort in memory, with ``--evict-idle``: then every cohort of it has been idle
        that long, and a round lets the quiescent ones leave memory (the last input of a
        partition gone quiet is written then, not at the next ``--snapshot-interval`` or never:
        a cohort with a large snapshot and a little input since it would wait for its
        partition's next ``REWRITE_FACTOR`` times its events). The first look starts both
        counts."""
        total = self._folded_now(partition, folded)
        everywhere = self._everywhere(folded)
        seen = self.input_seen.get(partition)
        if seen is None or seen[0] != total:
            self.input_seen[partition] = (total, now, everywhere)
            return False
        if not self.settings.evict_idle:
            return False
        if now - seen[1] >= self.settings.evict_idle_after_s:
            return True
        if everywhere - seen[2] < self.settings.snapshot_every:
            return False  # (the least quiet_events can be: no need to look at the cohorts)
        engines = self.referee.engines
        held = max((engines[c].state.events_folded for c in self._in_memory(partition)), default=0)
        return everywhere - seen[2] >= quiet_events(self.settings, held)

    def _everywhere(self, folded: int = 0) -> int:
        """The events this worker folded on all its partitions (:attr:`folded_everywhere`; without
        it, those of the rounds so far and ``folded``, the calling partition's since its last)."""
        if self.folded_everywhere is not None:
            return self.folded_everywhere()
        return sum(self.folded_total.values()) + folded

    def _folded_now(self, partition: int, folded: int) -> int:
        """The events this worker folded on ``partition``: as of its last round, and ``folded``
        since."""
        return self.folded_total.get(partition, 0) + folded

    def _in_memory(self, partition: int) -> list[str]:
        """The cohorts of ``partition`` in memory, in order."""
        referee = self.referee
        return sorted(c for c, p in referee.partition_of.items() if p == partition and c in referee.engines)

    def _unchanged(self, cohort: str) -> bool:
        """Whether ``cohort`` had no input since its latest snapshot (which then holds it)."""
        last = self.latest.get(cohort)
        pos = self.referee.position.get(cohort)
        return last is not None and (pos is None or pos[1] < last.covers)

    def _quiet_long_enough(self, cohort: str, now: float, everywhere: int) -> bool:
        """Whether ``cohort``, unchanged since its snapshot, has been seen so for
        ``--evict-idle-after`` seconds, or while the worker folded (``everywhere``: its count
        now) :func:`quiet_events`. Both count from the round that wrote its last input (its
        input had stopped by then), or from the first look at a cohort no round of this worker
        wrote. (Counted from the first round that found it quiet, a cohort stayed a round longer:
        ``bench/bench_worker_memory.py``'s 1M backlog kept 31-45 cohorts in memory at once.)"""
        since, at = self.quiet_since.setdefault(cohort, (now, everywhere))
        if now - since >= self.settings.evict_idle_after_s:
            return True
        lin = self.referee.engines.get(cohort)
        return lin is not None and everywhere - at >= quiet_events(self.settings, lin.state.events_folded)

    def _quiet_before(self, cohort: str, covers: int, pos: tuple[int, int] | None, per_record: float) -> bool:
        """Whether ``cohort``, written by a round at ``covers``, had its last input (the record at
        ``pos``) long enough before it to leave memory after it (with ``--evict-idle``, quiescent):
        its partition's records since, at ``per_record`` events each (the worker's events, on all
        its partitions, a record of this one stood for on average since the last round), held
        :func:`quiet_events`. On a backlog a round comes every few tens of thousands of events,
        and a cohort whose input stopped early in that stretch has been quiet for most of it: it
        leaves now, not a round later (``bench/bench_worker_memory.py``'s 1M backlog kept 25-41
        cohorts in memory at once without this, 21-28 with it counted in the partition's events).
        An estimate (records hold different numbers of events, and the partitions' input comes at
        different times) that only decides when a cohort leaves memory, never what the fold
        decides."""
        if not self.settings.evict_idle or pos is None or per_record <= 0:
            return False
        lin = self.referee.engines[cohort]
        return (covers - 1 - pos[1]) * per_record >= quiet_events(self.settings, lin.state.events_folded) \
            and self.may_rest(cohort, lin, settled_only=False)

    def _rewritten(self, partition: int, evicting: bool, idle: bool = False) -> tuple[int, int]:
        """(events the changed cohorts of ``partition`` that stay in memory held at their last
        snapshot, events the changed cohorts that would leave it hold now): settled cohorts leave
        only when ``evicting``, quiescent ones when ``idle`` (the partition gone quiet)."""
        referee, n, freed = self.referee, 0, 0
        for cohort, p in referee.partition_of.items():
            if p != partition:
                continue
            if self._unchanged(cohort):
                continue  # no input since its last snapshot: not written
            last = self.latest.get(cohort)
            lin = referee.engines.get(cohort)
            if lin is not None and ((evicting and self.may_rest(cohort, lin))
                                    or (idle and self.may_rest(cohort, lin, settled_only=False))):
                freed += lin.state.events_folded
            elif last is not None:
                n += last.events
        return n, freed

    def begin_round(self, partition: int, covers: int, folded: int = 0) -> "Round":
        """Encode the cohorts of ``partition`` that changed since their last snapshot and hand
        them to the producer. Call under the fold's lock (the state must not move meanwhile),
        right after ``covers`` was committed, with the events ``folded`` there since the last
        round; the rest of the round needs no lock."""
        t0 = time.perf_counter()
        referee = self.referee
        rnd = Round(partition, covers, t0)
        now = time.monotonic()
        rnd.quiet = self._partition_quiet(partition, folded, now)
        per_record = self._per_record(partition, covers, folded)
        self.folded_total[partition] = self._folded_now(partition, folded)
        everywhere = self._everywhere()
        self.round_covers[partition] = covers
        self.round_everywhere[partition] = everywhere
        for cohort in self._in_memory(partition):
            if self._unchanged(cohort):
                # no input since its last snapshot: with --evict-idle it may leave memory, once it
                # has been seen so for --evict-idle-after seconds or for enough of the worker's input
                if (rnd.quiet or self._quiet_long_enough(cohort, now, everywhere)) and self.settings.evict_idle \
                        and self.may_rest(cohort, referee.engines[cohort], settled_only=False):
                    rnd.idle.append(cohort)
                continue
            self.quiet_since[cohort] = (now, everywhere)  # its input stopped before this round: quiet from here
            pos = referee.position.get(cohort)
            rnd.written[cohort] = self._send_cohort(cohort, partition, covers, pos, rnd)
            if rnd.quiet or self._quiet_before(cohort, covers, pos, per_record):
                rnd.leaving.append(cohort)  # its partition gone quiet, or itself quiet long before
        rnd.encode_s = time.perf_counter() - t0
        metrics.SNAPSHOT_ENCODE_SECONDS.observe(rnd.encode_s)
        self.last_round[partition] = time.monotonic()
        return rnd

    def rest_idle(self, partition: int, folded: int = 0) -> int:
        """A partition with no round due (no input since its last round, or too little to be
        worth one: :func:`round_is_due`) may have none to come for a long time, so its idle
        cohorts are looked at here (at most every ``--snapshot-interval``, or ``--evict-idle-after``
        if shorter, or once the worker folded ``--snapshot-every`` events since the last look):
        each with no input since its snapshot, seen so for ``--evict-idle-after`` seconds or
        :func:`quiet_events` of the worker's (or its whole partition without input that long) and
        quiescent, leaves
        memory now, as in a round (its snapshot is on the broker already, so no round is
        written). Without this a partition that went quiet kept every cohort it had folded
        until its next round. Call under the fold's lock, while the partition is owned, with the
        events ``folded`` there since its last round. Returns how many left memory."""
        if not self.enabled or not self.settings.evict_idle:
            return 0
        now = time.monotonic()
        quiet = self._partition_quiet(partition, folded, now)
        everywhere = self._everywhere(folded)
        looked_at = self._idle_looked_at.setdefault(partition, everywhere)
        if now - max(self._idle_looked.get(partition, 0.0), self.last_round.get(partition, 0.0)) \
                < min(self.settings.snapshot_interval_s, self.settings.evict_idle_after_s) \
                and everywhere - looked_at < self.settings.snapshot_every:
            return 0
        self._idle_looked[partition] = now
        self._idle_looked_at[partition] = everywhere
        idle = [c for c in self._in_memory(partition)
                if self._unchanged(c) and (quiet or self._quiet_long_enough(c, now, everywhere))]
        return self._evict(idle, partition, settled_only=False) if idle else 0

    def finish_round(self, rnd: "Round") -> None:
        """Wait for the round's snapshots (``acks=all``), then write and wait for its
        ``SnapshotRound``. No lock: the fold goes on meanwhile."""
        self._flush()
        rnd.offsets = {c: self._delivered.pop(c) for c in rnd.written}
        known = len(rnd.written) + sum(1 for c in self.latest
                                       if c not in rnd.written and self._partition_of(c) == rnd.partition)
        self._send(ROUND_KEY, "SnapshotRound", {"partition": rnd.partition, "covers": rnd.covers, "cohorts": known,
                                                "written": len(rnd.written), "ts": now_ms()}, rnd.partition)
        self._flush()
        if rnd.images:
            config = self.referee.config
            verify.check(self.settings, self.codec, f"the snapshot round of {self.topic}[{rnd.partition}] at "
                         f"{rnd.covers} ({len(rnd.images)} cohort(s))", rnd.partition, rnd.covers,
                         lambda: {c: verify.heads_of(images.engine_of(config, c, b)) for c, b in rnd.images.items()},
                         only=set(rnd.images))

    def settle_round(self, rnd: "Round") -> int:
        """The round is on the broker: note each cohort's snapshot, and let the settled cohorts
        with no input since leave memory. Call under the fold's lock, while the partition is
        still owned. Returns how many left memory."""
        for cohort, (settled, events) in rnd.written.items():
            self.latest[cohort] = Latest(rnd.covers, rnd.offsets[cohort], settled, events)
        evicted = self._evict(sorted(rnd.written), rnd.partition) if self.settings.evict_settled else 0
        if rnd.idle or rnd.leaving:
            evicted += self._evict(rnd.idle + rnd.leaving, rnd.partition, settled_only=False)
        metrics.SNAPSHOTS.inc(len(rnd.written))
        metrics.SNAPSHOT_SECONDS.observe(time.perf_counter() - rnd.t0)
        log.debug("snapshot round %s[%d]@%d: %d written (encoded in %.3fs), %d left memory, %.3fs", self.topic,
                  rnd.partition, rnd.covers, len(rnd.written), rnd.encode_s, evicted, time.perf_counter() - rnd.t0)
        return evicted

    def round(self, partition: int, covers: int) -> int:
        """A whole round at once (tests, tools): :meth:`begin_round`, :meth:`finish_round`,
        :meth:`settle_round`. Returns the number of cohort snapshots written."""
        rnd = self.begin_round(partition, covers)
        self.finish_round(rnd)
        self.settle_round(rnd)
        return len(rnd.written)

    def _partition_of(self, cohort: str) -> int | None:
        p = self.referee.partition_of.get(cohort)
        return p if p is not None else self.out_of_memory.get(cohort)

    def _send_cohort(self, cohort: str, partition: int, covers: int,
                     pos: tuple[int, int] | None, rnd: Round | None = None) -> tuple[bool, int]:
        encoded = images.encode(self.referee, cohort)
        if rnd is not None and self.settings.verify_rebuilds:
            rnd.images[cohort] = encoded
        lin = self.referee.engines[cohort]
        settled = images.settled(lin)
        record = {"cohort_id": cohort, "partition": partition, "covers": covers,
                  "input_offset": pos[1] if pos is not None else None, "settled": settled,
                  "format": images.FORMAT, "digest": images.digest(encoded), "state": encoded,
                  "ts": now_ms(), "signature": None, "key_id": None}
        if self.sign is not None:
            record = self.sign(record)
        self._send(COHORT_PREFIX + cohort.encode(), "CohortSnapshot", record, partition, cohort)
        return settled, lin.state.events_folded

    def may_rest(self, cohort: str, lin, settled_only: bool = True) -> bool:
        """Whether ``cohort`` may leave memory after its snapshot: settled
        (:func:`images.settled`), or with ``settled_only`` False quiescent
        (:func:`images.quiescent`); and, under a settle horizon (SPEC §13), with no retention
        decision still to come on the clock (a retention tick needs the cohort in memory: a cohort
        whose checkpoints will settle later stays until they have)."""
        if not (images.settled(lin) if settled_only else images.quiescent(lin)):
            return False
        horizon = self.settings.horizon_of(cohort)
        return horizon is None or not lin.state.checkpoints or not lin.retention_due(2 ** 62, horizon)

    def _evict(self, cohorts: list[str], partition: int, settled_only: bool = True) -> int:
        """Let the cohorts whose latest snapshot holds their state leave memory: the settled
        ones, or (``settled_only`` False) the quiescent ones (:func:`images.quiescent`)."""
        referee, n = self.referee, 0
        for cohort in cohorts:
            last = self.latest.get(cohort)
            lin = referee.engines.get(cohort)
            if last is None or lin is None or not self.may_rest(cohort, lin, settled_only):
                continue
            if not self._unchanged(cohort):
                continue  # input since the snapshot: not what it holds any more
            self.resting.keep(cohort, lin)
            self.quiet_since.pop(cohort, None)
            referee.forget_cohorts([cohort], idle=not settled_only)
            self.out_of_memory[cohort] = partition
            n += 1
        if n:
            metrics.EVICTED.inc(n)
        return n

    # ------------------------------------------------------------------ the producer

    def _producer_(self):
        if self._producer is None:
            # zstd: librdkafka compresses the batches in its own threads, off the fold's
            self._producer = self.settings.kafka.producer(**{"linger.ms": 5, "message.max.bytes": MAX_RECORD,
                                                             "compression.type": "zstd"})
        return self._producer

    def _send(self, key: bytes, record: str, value: dict[str, Any], partition: int, cohort: str | None = None) -> None:
        producer = self._producer_()

        def delivered(err, msg) -> None:
            if err is not None:
                self._errors.append(str(err))
            elif cohort is not None:
                self._delivered[cohort] = msg.offset()

        while True:
            try:
                producer.produce(self.topic, key=key, value=self.codec.encode_record(record, value),
                                 headers=self.codec.headers.record(record), partition=partition,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)

    def _flush(self) -> None:
        remaining = self._producer_().flush(60)
        if remaining or self._errors:
            errors, self._errors = self._errors, []
            raise WorkerError(f"snapshots to {self.topic} not delivered ({remaining} pending): {errors[:3]}")

    def deliver_pending(self, timeout: float = REVOKE_FLUSH_S) -> int:
        """Wait (at most ``timeout`` s) for every snapshot record handed to the producer to be
        written; returns how many are still pending. Called when partitions are revoked, before the
        next owner may start: a cohort snapshot this worker encoded must not land after the next
        owner's snapshot of that cohort, or compaction, which keeps the last record written per key,
        could keep this older one while the next owner's rounds count on its newer one."""
        if self._producer is None:
            return 0
        remaining = self._producer.flush(timeout)
        if remaining:
            log.warning("%d snapshot record(s) still not written %.0f s after a revoke: should they land after the "
                        "next owner's, compaction could keep them in place of newer ones", remaining, timeout)
        return remaining

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
        if self._reader is not None:
            self._reader.close()

    # ------------------------------------------------------------------ recovery

    def load(self, partition: int, end: int) -> tuple[int, dict[str, int]]:
        """Before re-folding ``lineage.by-cohort[partition]`` up to ``end``: load the latest
        snapshots; returns (the offset to re-fold from, cohort -> offset its re-fold starts at
        where that is later)."""
        if not self.enabled:
            return 0, {}
        t0 = time.perf_counter()
        rounds, latest, records = self._scan(partition, end)
        start = max(rounds, default=0)
        skip: dict[str, int] = {}
        loaded: list[str] = []
        idle = 0
        for cohort in sorted(latest):
            last = latest[cohort]
            value = records[cohort]
            if last.covers > start:
                skip[cohort] = last.covers
            if last.settled and last.covers <= start:
                self.latest[cohort] = last
                self.out_of_memory[cohort] = partition  # back when its next input arrives
                continue
            if value is None:
                value = self._read_at(cohort, partition, last.offset)
            if not self._restore(cohort, partition, value):  # unusable: re-fold the partition from 0
                self.referee.forget_cohorts(loaded)
                self.drop_partition(partition)
                return 0, {}
            last.events = self.referee.engines[cohort].state.events_folded
            self.latest[cohort] = last
            if self.settings.evict_idle and last.covers < start \
                    and self.may_rest(cohort, self.referee.engines[cohort], settled_only=False):
                # no input in [covers, start) (the round at ``start`` would have written it) and
                # nothing on the clock: idle, out of memory again until its next event
                self.resting.keep(cohort, self.referee.engines[cohort])
                self.referee.forget_cohorts([cohort], idle=True)
                self.out_of_memory[cohort] = partition
                idle += 1
                continue
            loaded.append(cohort)
        self.last_round[partition] = time.monotonic()
        log.info("%s[%d]: %d snapshot(s) loaded, %d settled and %d idle left out of memory; re-folding from %d "
                 "(of %d) in %.2fs", self.topic, partition, len(loaded), len(latest) - len(loaded) - idle, idle,
                 start, end, time.perf_counter() - t0)
        return start, skip

    def _scan(self, partition: int, end: int) -> tuple[list[int], dict[str, Latest], dict[str, dict | None]]:
        """The rounds (their ``covers``) and each cohort's latest snapshot at or before ``end``."""
        rounds: list[int] = []
        latest: dict[str, Latest] = {}
        records: dict[str, dict] = {}
        for msg in read_range(self.settings.kafka, self.topic, {partition: (0, None)}, timeout=TAKEOVER_PATIENCE_S):
            try:
                name, value = self.codec.decode_record(msg.value())
            except (DecodeError, ValueError) as exc:
                log.warning("%s[%d]@%d: not a snapshot (%s): ignored", self.topic, partition, msg.offset(), exc)
                continue
            if value.get("covers", end + 1) > end or value.get("partition") != partition:
                continue  # beyond the group's offset (or misfiled): not a state to resume from
            if name == "SnapshotRound":
                rounds.append(value["covers"])
            elif name == "CohortSnapshot":
                cohort = value["cohort_id"]
                prev = latest.get(cohort)
                if prev is None or value["covers"] >= prev.covers:
                    # a settled cohort stays out of memory: its state is read again if ever needed,
                    # so it is checked now (signature, digest), while it is at hand; one that fails
                    # is restored like an unsettled one, which refuses it and re-folds the partition
                    settled = bool(value["settled"]) and self._refusal(value) is None
                    latest[cohort] = Latest(value["covers"], msg.offset(), settled)
                    records[cohort] = None if settled else value
        return rounds, latest, records

    def _refusal(self, value: dict) -> str | None:
        """Why a ``CohortSnapshot`` may not be used (its signature under ``--trusted-keys``, its
        digest), or None."""
        if self.keys:
            from streams.signing import check_snapshot

            ok, reason = check_snapshot(value, self.keys)
            if not ok:
                return reason
        try:
            images.verify(value["state"], value["digest"])
        except (images.SnapshotRejected, KeyError) as exc:
            return str(exc)
        return None

    def _restore(self, cohort: str, partition: int, value: dict) -> bool:
        reason = self._refusal(value)
        if reason is not None:
            log.warning("snapshot of cohort %r refused (%s): re-folding its partition", cohort, reason)
            metrics.SNAPSHOTS_REFUSED.inc()
            return False
        try:
            images.restore(self.referee, cohort, partition, bytes(value["state"]))
        except images.SnapshotRejected as exc:
            log.warning("snapshot of cohort %r refused (%s): re-folding its partition", cohort, exc)
            metrics.SNAPSHOTS_REFUSED.inc()
            return False
        if value.get("input_offset") is not None:
            self.referee.position[cohort] = (partition, value["input_offset"])
        return True

    def bring_back(self, cohort: str) -> bool:
        """``Referee.restorer``: a settled cohort out of memory, back from its snapshot."""
        partition = self.out_of_memory.get(cohort)
        last = self.latest.get(cohort)
        if partition is None or last is None:
            return False
        if not self._restore(cohort, partition, self._read_at(cohort, partition, last.offset)):
            raise WorkerError(f"{self.topic}[{partition}]@{last.offset}, the snapshot of cohort {cohort!r}, "
                              "is refused; restart the worker to re-fold the partition")
        if self.settings.verify_rebuilds:  # (blocking, in the fold: a diagnosis)
            lin = self.referee.engines[cohort]
            verify.check(self.settings, self.codec, f"cohort {cohort!r} back from its snapshot at "
                         f"{self.topic}[{partition}]@{last.offset} (covers {last.covers})", partition, last.covers,
                         lambda: {cohort: verify.heads_of(lin)}, only={cohort})
        del self.out_of_memory[cohort]
        self.resting.drop(cohort)
        metrics.BROUGHT_BACK.inc()
        return True

    def _read_at(self, cohort: str, partition: int, offset: int) -> dict:
        """The ``CohortSnapshot`` of ``cohort`` at ``offset`` of the snapshot topic."""
        if self._reader is None:
            self._reader = RecordReader(self.settings.kafka, self.topic)
        msg = self._reader.read(partition, offset, timeout=TAKEOVER_PATIENCE_S)
        if msg is None:
            raise WorkerError(f"the snapshot of cohort {cohort!r} at {self.topic}[{partition}]@{offset} "
                              "is gone; restart the worker to re-fold the partition")
        name, value = self.codec.decode_record(msg.value())
        if name != "CohortSnapshot" or value["cohort_id"] != cohort:
            raise WorkerError(f"{self.topic}[{partition}]@{offset} is not the snapshot of cohort {cohort!r}")
        return value

    def resting_rows(self, cohort: str) -> Rows | None:
        """What the views show of ``cohort``, out of memory: the rows kept when it left, or made
        from its snapshot (one read of that record; blocking: call it off the event loop) and
        kept. None when it is not out of memory (any more) or its snapshot cannot be had."""
        rows = self.resting.get(cohort)
        if rows is not None:
            return rows
        partition, last = self.out_of_memory.get(cohort), self.latest.get(cohort)
        if partition is None or last is None:
            return None
        try:
            value = self._read_at(cohort, partition, last.offset)
            reason = self._refusal(value)
            if reason is not None:
                raise images.SnapshotRejected(f"its snapshot is refused ({reason})")
            lin = images.engine_of(self.referee.config, cohort, bytes(value["state"]))
        except (WorkerError, images.SnapshotRejected, KeyError) as exc:
            log.warning("the views cannot show cohort %r out of memory: %s", cohort, exc)
            return None
        rows = rows_of(cohort, lin)
        if self.out_of_memory.get(cohort) == partition:  # still out of memory: keep them
            self.resting.keep_rows(cohort, rows, counts_of(lin))
        return rows

    def partition_heads(self, partition: int) -> "verify.Heads":
        """Every cohort of ``partition`` this worker holds, in memory or out of it (read from its
        snapshot): job -> chain head (--verify-rebuilds). Blocking."""
        referee = self.referee
        out = {c: verify.heads_of(referee.engines[c]) for c, p in referee.partition_of.items()
               if p == partition and c in referee.engines}
        for cohort, p in self.out_of_memory.items():
            last = self.latest.get(cohort)
            if p == partition and last is not None and cohort not in out:
                value = self._read_at(cohort, partition, last.offset)
                out[cohort] = verify.heads_of(images.engine_of(referee.config, cohort, bytes(value["state"])))
        return out

    def drop_partition(self, partition: int) -> None:
        """Forget what is known of a revoked partition's snapshots (and what the referee keeps of
        its cohorts out of memory: their unacknowledged commands; the next owner knows them)."""
        resting = [c for c, p in self.out_of_memory.items() if p == partition]
        for cohort in resting:
            del self.out_of_memory[cohort]
            self.latest.pop(cohort, None)
            self.resting.drop(cohort)
        if resting:
            self.referee.forget_cohorts(resting)
        for cohort in [c for c in self.latest if self.referee.partition_of.get(c) == partition]:
            del self.latest[cohort]
            self.quiet_since.pop(cohort, None)
        self.last_round.pop(partition, None)
        self.folded_total.pop(partition, None)
        self.round_covers.pop(partition, None)
        self.round_everywhere.pop(partition, None)
        self.input_seen.pop(partition, None)
        self._idle_looked.pop(partition, None)
        self._idle_looked_at.pop(partition, None)
