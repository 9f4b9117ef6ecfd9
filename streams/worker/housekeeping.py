"""The worker's once-a-second duties on the fold: the referee's timers, clock ticks for grace
periods that ran out, and the LineageCommitments every ``commitment_interval_s``."""

from __future__ import annotations

import asyncio

from streams.codec import Codec
from streams.referee.referee import Referee
from streams.worker import metrics
from streams.worker.clock import InputClock, now_ms
from streams.worker.outbox import Outbox
from streams.worker.resting import RestingViews
from streams.worker.settings import WorkerSettings
from streams.worker.stages import FoldStage


class Housekeeping:
    def __init__(self, settings: WorkerSettings, codec: Codec, referee: Referee, outbox: Outbox,
                 clock: InputClock, fold: FoldStage, resting: RestingViews | None = None) -> None:
        self.settings = settings
        self.resting = resting  # the cohorts out of memory, counted in the gauges too
        self.codec = codec
        self.referee = referee
        self.outbox = outbox
        self.clock = clock
        self.fold = fold
        self.ticked: dict[str, int] = {}  # cohort -> input watermark of its last tick
        self.last_commitment = 0  # ms
        self.last_retention = 0  # ms: the wall clock of the last retention pass
        self._retention_pass = False  # the watermark read was for a retention pass too

    async def run(self) -> None:
        """One pass. The input watermark is read first, outside the fold's lock (it asks the
        broker: the fold goes on meanwhile); the rest under it."""
        referee, outbox = self.referee, self.outbox
        mark = await self._watermark(now_ms())
        async with self.fold.lock:
            now = now_ms()
            out = referee.tick(now)
            sent_tick = self._send_ticks(mark) if mark is not None else False
            if now - self.last_commitment >= self.settings.commitment_interval_s * 1000:
                out.extend(referee.commitments(now))
                self.last_commitment = now
            for em in out:
                outbox.emit(em)
            if out or sent_tick:
                await outbox.flush()
            metrics.observe_referee(referee, self.resting)

    async def _watermark(self, now: int) -> int | None:
        """The input watermark when a tick may be due (a grace period ran out; with a settle
        horizon, every ``retention_interval_s``), else None (nothing asked of the broker)."""
        settings = self.settings
        retention = settings.retention_on and now - self.last_retention >= settings.retention_interval_s * 1000
        if not self.referee.due_ticks(now, settings.grace_ms) and not retention:
            return None
        if retention:
            self.last_retention = now
            self._retention_pass = True
        mark = await asyncio.get_running_loop().run_in_executor(None, self.clock.watermark, now)
        metrics.WATERMARK_LAG.set(max(0, now - mark) / 1000)
        return mark

    def _send_ticks(self, mark: int) -> bool:
        """Append a clock tick at watermark ``mark`` to the input of each owned cohort whose
        grace period ran out (at most one a second per cohort), and, on a retention pass (SPEC
        §13), of each whose retention may have changed; whether any was sent.

        Both go through the cohort's input, so that every replay applies them at the same point;
        they run on the input watermark (streams.worker.clock), not on the wall clock: a worker
        away or behind delays halts and deletions, it does not cause them."""
        settings, referee = self.settings, self.referee
        due = set(referee.due_ticks(mark, settings.grace_ms))
        if self._retention_pass:
            self._retention_pass = False
            for cohort, lin in list(referee.engines.items()):
                horizon = settings.horizon_of(cohort)
                if horizon is not None and cohort and lin.state.checkpoints and lin.retention_due(mark, horizon):
                    due.add(cohort)
        sent = False
        for cohort in sorted(due):
            if self.fold.owns_cohort(cohort) and mark - self.ticked.get(cohort, 0) >= 1000:
                self.ticked[cohort] = mark
                self.outbox.send(settings.topics.by_cohort, cohort.encode(), self.codec.encode_record("EventBatch", {
                    "cohort_id": cohort, "events": [], "tick_ms": mark, "grace_ms": settings.grace_ms,
                    "settle_horizon_ms": settings.horizon_of(cohort)}))
                sent = True
        return sent
