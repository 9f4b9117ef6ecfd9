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
