"""What a job makes of its control records: the outcome of each (pure).

:func:`decide` folds the job's batch with :class:`~streams.control.fold.JobControl`, started
from what the job already knows (:class:`JobView`), and adds the job's own rules:

- Plans: only the job's effective plan record is acted on (every earlier one is superseded);
  a ``RollbackCommand`` only for the job's current incarnation (an older one is stale: the job
  already rolled back; a newer one is from the future: its journal was lost?) and not once the
  job has finished; each ``command_id`` at most once — but a ``QuarantineNotice`` published again
  under the id last applied, naming a checkpoint not quarantined yet, is applied again (nothing to
  roll back: its list is what not to ship).
- Halts: the last ``HaltCommand`` decides (reason ``RELEASE`` lifts the halt); only the one
  that changed the halted state is acted on, and only if the batch as a whole changes it; a
  halt or release already applied (same ``command_id``) is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from streams.control.commands import ControlCommand
from streams.control.fold import JobControl

ROLLBACK = "rollback"          # apply: on_rollback, then RolledBack
QUARANTINE = "quarantine"      # apply: on_quarantine
HALT = "halt"                  # apply: on_halt, halted
RELEASE = "release"            # apply: on_release, not halted
SUPERSEDED = "superseded"      # a later plan record of the job replaces it
STALE = "stale"                # for an older incarnation: the job already moved on
FUTURE = "future"              # for an incarnation the job has not reached (journal lost?)
DUPLICATE = "duplicate"        # this command_id was already applied
FINISHED = "finished"          # a rollback for a job that has finished: nothing to roll back
CLEARED = "cleared"            # PlanCleared: recorded, nothing to do
NO_CHANGE = "no-change"        # a halt while halted / a release while running / folded away
ACTIONS = (ROLLBACK, QUARANTINE, HALT, RELEASE)


@dataclass
class JobView:
    """What :func:`decide` needs to know about the job."""

    incarnation: int
    applied: set[str]
    halted: bool
    finished: bool = False
    #: the last QuarantineNotice applied: (command_id, its checkpoint ids sorted)
    quarantine: tuple[str, tuple[str, ...]] | None = None


def decide(view: JobView, batch: Iterable[ControlCommand]) -> list[ControlCommand]:
    """Each command of ``batch`` (the job's records in topic order) with its ``outcome``.

    The commands whose outcome is in :data:`ACTIONS` are to be applied, in the order returned
    (topic order). See the module doc for the rules.
    """
    cmds = list(batch)
    job = JobControl(halted=view.halted, applied=view.applied)
    for c in cmds:
        job.add(c)
    out = []
    for at, c in enumerate(cmds):
        if c.is_plan:
            c = replace(c, outcome=_plan_outcome(view, job, at, c))
        elif c.is_halt:
            c = replace(c, outcome=_halt_outcome(view, job, at, c))
        out.append(c)
    return out


def _plan_outcome(view: JobView, job: JobControl, at: int, c: ControlCommand) -> str:
    if c.command_id in view.applied and not _quarantine_grew(view, c):
        return DUPLICATE
    if job.superseded(at):
        return SUPERSEDED
    if c.kind == "PlanCleared":
        return CLEARED
    if c.kind == "QuarantineNotice":
        return QUARANTINE
    if c.incarnation is not None and c.incarnation < view.incarnation:
        return STALE
    if c.incarnation is not None and c.incarnation > view.incarnation:
        return FUTURE
    if view.finished:
        return FINISHED
    return ROLLBACK


def _quarantine_grew(view: JobView, c: ControlCommand) -> bool:
    """``c`` is the QuarantineNotice last applied, published again under its id naming a
    checkpoint the job has not quarantined yet (one of the finished job's checkpoints found
    tainted later: :mod:`streams.referee.referee`). A copy of an earlier, shorter version adds
    nothing and stays a duplicate."""
    return (c.kind == "QuarantineNotice" and view.quarantine is not None and view.quarantine[0] == c.command_id
            and not set(c.quarantined_checkpoint_ids) <= set(view.quarantine[1]))


def _halt_outcome(view: JobView, job: JobControl, at: int, c: ControlCommand) -> str:
    if c.command_id in view.applied:
        return DUPLICATE
    if at == job.halt_changed_at and job.halted != view.halted:
        return HALT if job.halted else RELEASE
    return NO_CHANGE
