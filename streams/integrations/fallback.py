"""When a rollback's target is gone: what a job restores instead (SPEC §13), the same rule in
every integration.

A framework's rotation (``save_total_limit``, ``save_top_k``, ``num_to_keep``) may have deleted
the checkpoint a plan targets, or a file may have changed since it was recorded. The job then
restores **the newest surviving checkpoint of its own ancestry older than the target** — every
checkpoint of the ancestry before the target is before the taint point too, so it is clean
(SPEC §7) — or, when none survives, restarts from its base; and it acknowledges with
``RolledBack`` naming what it really restored, which the referee folds like any restore.

:class:`Ancestry` keeps, per job, its own checkpoints its current weights descend from, oldest
first: a checkpoint written is appended, a restore cuts the list just after the restored
checkpoint (a restart from the base empties it), a consumption of another job's checkpoint
keeps it (the job's earlier checkpoints are still in its ancestry).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from streams.client.restored import Restored

__all__ = ["Ancestry", "Substitution", "substitute"]

log = logging.getLogger("traintrace.integrations")


@dataclass
class Ancestry:
    """A job's own checkpoints of its current ancestry, oldest first, with their steps."""

    ids: list[str] = field(default_factory=list)
    steps: dict[str, int] = field(default_factory=dict)

    def wrote(self, checkpoint_id: str, step: int) -> None:
        if checkpoint_id not in self.steps:
            self.ids.append(checkpoint_id)
        self.steps[checkpoint_id] = step

    def restored(self, checkpoint_id: str | None) -> None:
        """The job restored ``checkpoint_id`` (None: its base): its ancestry ends there."""
        if checkpoint_id in self.ids:
            del self.ids[self.ids.index(checkpoint_id) + 1:]
        else:  # the base, or another job's checkpoint: nothing of the job's own before it
            self.ids.clear()

    def older_than(self, checkpoint_id: str, step: int) -> list[str]:
        """The ancestry's checkpoints before ``checkpoint_id`` (or, when it is not in the
        ancestry, those of a smaller step), newest first."""
        if checkpoint_id in self.ids:
            before = self.ids[: self.ids.index(checkpoint_id)]
        else:
            before = [c for c in self.ids if self.steps.get(c, step) < step]
        return before[::-1]


@dataclass(frozen=True)
class Substitution:
    """What a job restores for a command: ``restored``, and why it differs from the command's
    target (None when it is the target itself)."""

    restored: Restored
    reason: str | None = None


def substitute(wanted: Restored, ancestry: Ancestry, usable: Callable[[str], str | None]) -> Substitution:
    """What to restore for ``wanted`` (the command's target): the target itself when
    ``usable(id)`` returns None for it (it is there, with its recorded content), else the newest
    usable checkpoint of ``ancestry`` older than it, else the base (step 0). ``usable`` returns
    why a checkpoint cannot be restored (deleted, changed), or None."""
    if wanted.checkpoint_id is None:
        return Substitution(wanted)
    why = usable(wanted.checkpoint_id)
    if why is None:
        return Substitution(wanted)
    skipped = [f"{wanted.checkpoint_id}: {why}"]
    for c in ancestry.older_than(wanted.checkpoint_id, wanted.step):
        w = usable(c)
        if w is None:
            return Substitution(Restored(c, ancestry.steps[c]),
                                f"target {'; '.join(skipped)}; restored {c}, the newest older one that survives")
        skipped.append(f"{c}: {w}")
    return Substitution(Restored(None, 0), f"target {'; '.join(skipped)}; no older checkpoint of the job's "
                                           "ancestry survives: restarted from its base")
