"""Which input partitions the worker processes, through rebalances, and the commit of how far it
has processed them (Faust's acks are off for both inputs: :mod:`streams.worker.positions`).

The order of operations and the locks are what keeps a rebalance from losing or repeating
records (tests/integration/test_churn.py): a revoke waits for the batches in flight and commits
exactly what they processed while the partitions are still ours; an assignment loads the
router's map and rebuilds the referee's state of each by-cohort partition before any record of
it is processed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Iterable

from faust.types import TP

from streams.worker import metrics, verify
from streams.worker.gctune import rss_mb
from streams.worker.jobmap import read_map_partitions
from streams.worker.recovery import Takeover, group_starts
from streams.worker.settings import WorkerSettings
from streams.worker.snapshots import Round, SnapshotStore
from streams.worker.stages import FoldStage, RouteStage, die

log = logging.getLogger("traintrace.worker")

#: commits offsets; returns those committed (none when the commit failed; only those of partitions in
#: the consumer's assignment: Faust's ``_commit`` leaves the others out and still says True)
CommitOffsets = Callable[[dict[TP, int]], Awaitable[dict[TP, int]]]


class Assignment:
    """The partitions of both inputs the worker owns, and their commits. Hooks for Faust's
    ``on_partitions_revoked`` / ``on_partitions_assigned`` and shutdown, and the commit timer."""

    def __init__(self, settings: WorkerSettings, route: RouteStage, fold: FoldStage, takeover: Takeover,
                 commit_offsets: CommitOffsets, snapshots: SnapshotStore | None = None) -> None:
        self.settings = settings
        self.route = route
        self.fold = fold
        self.takeover = takeover
        self.commit_offsets = commit_offsets
        self.snapshots = snapshots
        #: by-cohort partition revoked -> position its kept state is at
        self.suspended: dict[int, int] = {}

    async def commit(self, partitions: set[TP] | None = None) -> dict[TP, int]:
        """Commit the positions of owned partitions (all, or those of ``partitions``) that
        moved; returns what was committed. Call with both locks held: each stage's last batch is
        settled first (its records delivered: a position counts only then), and a delivery
        that failed ends the worker before anything is committed."""
        for stage in (self.route, self.fold):
            try:
                await stage.settle()
            except Exception as exc:  # as in the agents: never commit a batch whose outputs are not out
                die(stage.name, exc)
        inputs = (self.route.input, self.fold.input)
        offsets: dict[TP, int] = {}
        for inp in inputs:
            parts = None if partitions is None else {tp.partition for tp in partitions if tp.topic == inp.topic}
            for p, o in inp.to_commit(parts).items():
                offsets[TP(inp.topic, p)] = o
        if not offsets:
            return {}
        done = await self.commit_offsets(offsets)
        if done:
            for inp in inputs:
                inp.committed_at({tp.partition: o for tp, o in done.items() if tp.topic == inp.topic})
            metrics.COMMITS.inc()
        return done

    async def commit_processed(self) -> None:
        """The commit timer: both locks, then :meth:`commit`; then the snapshot rounds due, at
        the offsets committed (where any later owner resumes, or before)."""
        route, fold = self.route.lock, self.fold.lock
        async with route:
            await fold.acquire()
            try:
                await self.commit()
            except BaseException:
                fold.release()
                raise
        try:  # the fold's lock only: routing goes on while the rounds encode
            rounds = await self._begin_rounds() if self.snapshots is not None else []
        finally:
            fold.release()
        for rnd in rounds:
            await self._finish_round(rnd)

    async def _begin_rounds(self) -> list[Round]:
        """Encode the rounds due: partitions whose position is committed (now, or earlier: the
        time-based round of a partition gone quiet). Call under the fold's lock."""
        loop = asyncio.get_running_loop()
        inp, folded, rounds = self.fold.input, self.fold.folded, []
        for p in sorted(inp.owned):
            at = inp.committed.get(p)
            if at is None or at != inp.position.get(p):
                continue
            if not self.snapshots.due(p, folded.get(p, 0), at):  # no round now: its idle cohorts may rest
                try:
                    self.snapshots.rest_idle(p, folded.get(p, 0))
                except Exception:  # an optimisation: never stop the fold for it
                    log.exception("resting the idle cohorts of %s[%d] failed: the next pass retries", self.fold.topic, p)
                continue
            try:
                rounds.append(await loop.run_in_executor(None, self.snapshots.begin_round, p, at, folded.get(p, 0)))
            except Exception:  # a snapshot is an optimisation: never stop the fold for one
                log.exception("snapshot round of %s[%d] failed: the next one retries", self.fold.topic, p)
            folded[p] = 0
        return rounds

    async def _finish_round(self, rnd: Round) -> None:
        """Wait for a round's records (no lock), then note it under the fold's lock if the
        partition is still ours; a failed delivery leaves its cohorts for the next round."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.snapshots.finish_round, rnd)
        except Exception as exc:
            log.warning("snapshot round of %s[%d] not delivered (%s): the next one retries", self.fold.topic,
                        rnd.partition, exc)
            return
        async with self.fold.lock:
            if rnd.partition in self.fold.input.owned:
                self.snapshots.settle_round(rnd)

    async def revoked(self, revoked: set[TP]) -> None:
        # wait for the batches in flight, commit exactly what they processed while the
        # partitions are still ours, and stop processing them: the next owner starts there
        topics, fold = self.settings.topics, self.fold.input
        async with self.route.lock, self.fold.lock:
            await self.commit(set(revoked))
            if self.snapshots is not None and any(tp.topic == topics.by_cohort for tp in revoked):
                # a round's cohort snapshots are handed to the producer under the fold's lock: they are
                # written before the next owner starts (streams.worker.snapshots.deliver_pending)
                await asyncio.get_running_loop().run_in_executor(None, self.snapshots.deliver_pending)
            for tp in revoked:
                if tp.topic == topics.by_cohort and tp.partition in fold.owned:
                    fold.revoke(tp.partition)
                    self.suspended[tp.partition] = fold.position[tp.partition]  # kept, in case it comes back
                elif tp.topic == topics.events:
                    self.route.input.revoke(tp.partition)

    async def assigned(self, assigned: set[TP]) -> None:
        topics = self.settings.topics
        ev_parts = sorted(tp.partition for tp in assigned if tp.topic == topics.events)
        mine = sorted(tp.partition for tp in assigned if tp.topic == topics.by_cohort)
        async with self.route.lock:
            if ev_parts:
                await self._route_from_group(ev_parts)
        loop = asyncio.get_running_loop()
        starts = await loop.run_in_executor(None, group_starts, self.settings, topics.by_cohort, mine) if mine else {}
        log.info("assigned %s%s %s%s; by-cohort starts %s; RSS %.0f MiB", topics.events, ev_parts, topics.by_cohort,
                 mine, starts, rss_mb())
        async with self.fold.lock:
            await self._fold_from_group(mine, starts)

    async def _route_from_group(self, ev_parts: list[int]) -> None:
        """Own these events partitions from the group's offsets, with the job -> cohort entries
        of these partitions, whoever routed their JobStarted."""
        loop = asyncio.get_running_loop()
        settings, route = self.settings, self.route
        starts = await loop.run_in_executor(None, group_starts, settings, settings.topics.events, ev_parts)
        known = await loop.run_in_executor(None, read_map_partitions, settings.kafka,
                                           settings.topics.job_cohorts, ev_parts)
        for job, cohort in known.items():
            route.jobmap.map.setdefault(job, cohort)
        for p in ev_parts:
            route.map_reads.pop(p, None)  # read whole just now
            route.input.assign(p, starts[p])

    async def _fold_from_group(self, mine: list[int], starts: dict[int, int]) -> None:
        """Own these by-cohort partitions from the group's offsets, the referee's state of each
        rebuilt up to there (kept as it was when the partition comes back untouched)."""
        fold, referee = self.fold.input, self.fold.referee
        for p in sorted(self.suspended):
            kept = self.suspended.pop(p)
            if p in starts and starts[p] == kept:
                fold.assign(p, kept)  # back to this worker untouched: its state is current
                if self.settings.verify_rebuilds and self.snapshots is not None:
                    await asyncio.get_running_loop().run_in_executor(
                        None, verify.check, self.settings, self.fold.codec,
                        f"{self.fold.topic}[{p}] back untouched at {kept}", p, kept,
                        lambda p=p: self.snapshots.partition_heads(p))
                continue
            if self.snapshots is not None:
                self.snapshots.drop_partition(p)
            referee.drop_partition(p)  # another worker moved it on (or has it): rebuild
            fold.position.pop(p, None)
        for p in mine:
            if p in fold.owned:
                continue
            await self.takeover.catch_up(p, starts[p])
            fold.assign(p, starts[p])

    async def stop(self, closing: Iterable[Callable[[], None]] = ()) -> None:
        """A clean stop: commit what was processed while the partitions are still ours, then
        call ``closing``."""
        async with self.route.lock, self.fold.lock:
            try:
                await self.commit()
            finally:
                self.route.input.owned.clear()
                self.fold.input.owned.clear()
                for close in closing:
                    close()
