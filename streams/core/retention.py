"""Retention (SPEC §13, revision 3): which checkpoints may be deleted, and why the rest are kept.

Given the fold state, the processor's input watermark ``W`` (the event time up to which every
partition is read: what the grace period runs on) and a cohort's settle horizon ``H`` (ms of
event time; ``None``: no promise, so nothing is settled and every checkpoint is pinned):

- a checkpoint is **settled** once ``W`` has passed its ``ts + H`` (``W > ts + H``); its status,
  clean or tainted, is then final as long as the horizon is kept;
- a settled checkpoint ``c`` of job J is **deletable** when it is tainted, or when ``c`` and a
  later settled clean checkpoint ``c'`` of J both lie in the ancestry (§7) of J's current
  incarnation — unless it is **pinned**: J's latest checkpoint (its resume point), or the base of
  an incarnation (its job's ``base_checkpoint_id``, or the checkpoint its ``RolledBack``
  restored) that has no settled clean checkpoint of its own yet.

Every other checkpoint is kept, with the reason (:data:`NOT_SETTLED`, :data:`LATEST`,
:data:`BASE`, :data:`NEEDED`). The readings taken where the text leaves room: "the latest
checkpoint J wrote" is the one with J's highest ``seq``; the base pin holds for every
incarnation, current or not (the safe side); a clean checkpoint outside J's current ancestry (a
branch a rollback abandoned) is never deletable by the second rule, so it is kept (:data:`NEEDED`)
unless it is tainted.

Pure and deterministic: the same state, ``W`` and ``H`` give the same answer, so the audit
re-derives it from the log. :func:`retention` computes it for every checkpoint of the state,
:func:`job_retention` for one job's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from streams.core.project import ancestry
from streams.core.state import Checkpoint, Incarnation, LineageState

#: deletable: tainted (never again a rollback or restore target)
TAINTED = "tainted"
#: deletable: a later settled clean checkpoint of the same current ancestry is a better target
SUPERSEDED = "superseded"
#: kept: not settled yet (or no settle horizon)
NOT_SETTLED = "not-settled"
#: kept: the job's latest checkpoint, its resume point
LATEST = "latest"
#: kept: the base of an incarnation with no settled clean checkpoint of its own yet
BASE = "base"
#: kept: settled and clean, and no later settled clean checkpoint of the job's current ancestry
NEEDED = "needed"

DELETABLE_REASONS = (TAINTED, SUPERSEDED)


@dataclass(frozen=True, slots=True)
class Retention:
    """The retention status of one checkpoint: ``deletable`` with why (:data:`TAINTED`,
    :data:`SUPERSEDED`), or kept with why (:data:`NOT_SETTLED`, :data:`LATEST`, :data:`BASE`,
    :data:`NEEDED`). ``by``: the later clean checkpoint that supersedes it, or the incarnation
    (``job_id/number``) whose base it is."""

    checkpoint_id: str
    job_id: str
    settled: bool
    tainted: bool
    deletable: bool
    reason: str
    by: str | None = None


def is_settled(ck: Checkpoint, watermark_ms: int | None, horizon_ms: int | None) -> bool:
    """Whether the watermark has passed ``ck.ts + H`` (never without a horizon or a watermark)."""
    return horizon_ms is not None and watermark_ms is not None and watermark_ms > ck.ts + horizon_ms


def _base_of(state: LineageState, inc: Incarnation) -> str | None:
    if inc.start_kind == "restore":
        return inc.restored_checkpoint_id
    if inc.start_kind == "start":
        return state.jobs[inc.job_id].base_checkpoint_id
    return None  # from scratch (the pretrained model alone), or an orphan


def _pinned_bases(state: LineageState, watermark_ms: int | None, horizon_ms: int | None) -> dict[str, str]:
    """checkpoint id -> the first incarnation (``job/number``) it is the unsettled base of."""
    out: dict[str, str] = {}
    for job_id in sorted(state.jobs):
        job = state.jobs[job_id]
        for number in sorted(job.incarnations):
            inc = job.incarnations[number]
            base = _base_of(state, inc)
            if base is None or base in out:
                continue
            if not any(not c.tainted and is_settled(c, watermark_ms, horizon_ms) for c in inc.ckpts):
                out[base] = f"{job_id}/{number}"
    return out


def _in_ancestry(state: LineageState, inc: Incarnation) -> list[Checkpoint]:
    """The checkpoints of the ancestry of ``inc``, oldest first."""
    out: list[Checkpoint] = []
    for seg, cut in ancestry(state, inc):
        out.extend(c for c in seg.ckpts if c.seq <= cut)
    return out


def _job_statuses(state: LineageState, job_id: str, watermark_ms: int | None, horizon_ms: int | None,
                  bases: dict[str, str]) -> list[Retention]:
    job = state.jobs[job_id]
    mine = [c for inc in job.incarnations.values() for c in inc.ckpts if c.job_id == job_id]
    if not mine:
        return []
    latest = max(mine, key=lambda c: c.seq)
    superseded: dict[str, str] = {}
    if job.current is not None:
        later: str | None = None  # the newest settled clean checkpoint met so far, walking back
        for c in reversed(_in_ancestry(state, job.current)):
            settled = is_settled(c, watermark_ms, horizon_ms)
            if later is not None and settled:
                superseded[c.id] = later
            if settled and not c.tainted and later is None:
                later = c.id
    out = []
    for c in sorted(mine, key=lambda c: c.seq):
        settled = is_settled(c, watermark_ms, horizon_ms)
        tainted = c.tainted
        if not settled:
            out.append(Retention(c.id, job_id, False, tainted, False, NOT_SETTLED))
        elif c is latest:
            out.append(Retention(c.id, job_id, True, tainted, False, LATEST))
        elif c.id in bases:
            out.append(Retention(c.id, job_id, True, tainted, False, BASE, bases[c.id]))
        elif tainted:
            out.append(Retention(c.id, job_id, True, True, True, TAINTED))
        elif c.id in superseded:
            out.append(Retention(c.id, job_id, True, False, True, SUPERSEDED, superseded[c.id]))
        else:
            out.append(Retention(c.id, job_id, True, False, False, NEEDED))
    return out


def retention(state: LineageState, watermark_ms: int | None, horizon_ms: int | None,
              jobs: Iterable[str] | None = None) -> dict[str, Retention]:
    """The retention status of every checkpoint the jobs of ``state`` wrote (only ``jobs``'
    when given), by checkpoint id, under the input watermark and the settle horizon (ms)."""
    bases = _pinned_bases(state, watermark_ms, horizon_ms)
    out: dict[str, Retention] = {}
    for job_id in sorted(state.jobs if jobs is None else jobs):
        if job_id in state.jobs:
            for r in _job_statuses(state, job_id, watermark_ms, horizon_ms, bases):
                out[r.checkpoint_id] = r
    return out


def job_retention(state: LineageState, job_id: str, watermark_ms: int | None,
                  horizon_ms: int | None) -> list[Retention]:
    """One job's checkpoints, oldest first, with their retention status."""
    return list(retention(state, watermark_ms, horizon_ms, [job_id]).values())


def deletable(state: LineageState, watermark_ms: int | None, horizon_ms: int | None) -> set[str]:
    """The ids of every checkpoint that may be deleted now."""
    return {k for k, r in retention(state, watermark_ms, horizon_ms).items() if r.deletable}


__all__ = ["BASE", "DELETABLE_REASONS", "LATEST", "NEEDED", "NOT_SETTLED", "Retention", "SUPERSEDED", "TAINTED",
           "deletable", "is_settled", "job_retention", "retention"]


# ---------------------------------------------------------------------------- the live book


@dataclass(frozen=True, slots=True)
class RetentionChanged:
    """A decision: job ``job_id``'s retention view changed (version ``version``, from 1).
    ``deletable`` and ``kept``: ``(checkpoint id, reason, by)`` of each checkpoint of the job not
    deleted yet, oldest first; decided at input watermark ``watermark_ms`` with horizon
    ``horizon_ms``."""

    job_id: str
    cohort_id: str | None
    version: int
    deletable: tuple[tuple[str, str, str | None], ...]
    kept: tuple[tuple[str, str, str | None], ...]
    watermark_ms: int
    horizon_ms: int


@dataclass(frozen=True, slots=True)
class DeletionJudged:
    """A recorded deletion (``CheckpointDeleted``) of a checkpoint the referee had not marked
    deletable (``why``: ``pinned``, ``unknown`` checkpoint, ``not its own``)."""

    job_id: str
    checkpoint_id: str
    seq: int
    why: str


class RetentionBook:
    """What the referee last decided about each job's checkpoints, so that only changes are
    published (:class:`RetentionChanged`), and every checkpoint it ever marked deletable, against
    which recorded deletions are judged (:class:`DeletionJudged`). Driven by the clock ticks of
    the processor's input (:meth:`tick`), so a replay decides the same at the same point."""

    def __init__(self) -> None:
        self.views: dict[str, tuple[int, tuple[tuple[str, str, str | None], ...],
                                    tuple[tuple[str, str, str | None], ...]]] = {}
        self.ever_deletable: set[str] = set()
        self.deleted: dict[str, str] = {}  # checkpoint id -> the job that recorded its deletion
        #: something that bears on retention was folded since the last tick
        self.dirty = True
        #: the earliest ``ts + H`` of a checkpoint unsettled at the last tick (None: none)
        self.next_settle: int | None = None
        self.horizon_ms: int | None = None

    def status_of(self, job_id: str, checkpoint_id: str) -> dict[str, object] | None:
        """The last decision about one checkpoint (``deletable``, ``reason``, ``by``, the
        notice's ``version``; ``deleted`` once its job recorded the deletion), or None before
        the first retention tick that saw it."""
        if checkpoint_id in self.deleted:
            return {"deleted": True, "deletable": checkpoint_id in self.ever_deletable}
        view = self.views.get(job_id)
        if view is None:
            return None
        version, dl, kept = view
        for rows, may in ((dl, True), (kept, False)):
            for ck, why, by in rows:
                if ck == checkpoint_id:
                    return {"deleted": False, "deletable": may, "reason": why, "by": by, "version": version}
        return None

    def due(self, watermark_ms: int, horizon_ms: int) -> bool:
        """Whether a tick at ``watermark_ms`` could change anything."""
        return (self.dirty or horizon_ms != self.horizon_ms
                or (self.next_settle is not None and watermark_ms > self.next_settle))

    def judge(self, state: LineageState, deletions: list[tuple[str, str, int]]) -> list[DeletionJudged]:
        out = []
        for job_id, ck_id, seq in deletions:
            self.dirty = True
            ck = state.checkpoints.get(ck_id)
            if ck is None:
                why = "unknown"
            elif ck.job_id != job_id:
                why = "not its own"
            elif ck_id not in self.ever_deletable:
                why = "pinned"
            else:
                why = ""
            self.deleted.setdefault(ck_id, job_id)
            if why:
                out.append(DeletionJudged(job_id, ck_id, seq, why))
        return out

    def tick(self, state: LineageState, watermark_ms: int, horizon_ms: int) -> list[RetentionChanged]:
        statuses = retention(state, watermark_ms, horizon_ms)
        by_job: dict[str, list[Retention]] = {}
        next_settle: int | None = None
        for r in statuses.values():
            by_job.setdefault(r.job_id, []).append(r)
            if r.deletable:
                self.ever_deletable.add(r.checkpoint_id)
            if not r.settled:
                t = state.checkpoints[r.checkpoint_id].ts + horizon_ms
                next_settle = t if next_settle is None else min(next_settle, t)
        out = []
        for job_id in sorted(by_job):
            rows = [r for r in by_job[job_id] if r.checkpoint_id not in self.deleted]
            dl = tuple((r.checkpoint_id, r.reason, r.by) for r in rows if r.deletable)
            kept = tuple((r.checkpoint_id, r.reason, r.by) for r in rows if not r.deletable)
            old = self.views.get(job_id)
            if old is not None and old[1] == dl and old[2] == kept:
                continue
            version = old[0] + 1 if old is not None else 1
            self.views[job_id] = (version, dl, kept)
            out.append(RetentionChanged(job_id, state.jobs[job_id].cohort_id, version, dl, kept,
                                        watermark_ms, horizon_ms))
        self.dirty = False
        self.next_settle = next_settle
        self.horizon_ms = horizon_ms
        return out


__all__ += ["DeletionJudged", "RetentionBook", "RetentionChanged"]
