"""The replay: the log re-folded, in the processor's order, through the same referee code.

What it decides — commands, manifest versions, commitments — is what the compare step
(:mod:`streams.audit.compare`) holds the topics to; each published commitment is checked at
the fold position it covers, as the fold passes it (:mod:`streams.audit.commitments`). The
processor's timestamps are the input records' (``FoldItem.ts``), so a replay reproduces them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streams.core.decide import HaltIssued
from streams.core.events import CheckpointDeleted
from streams.referee import records as R
from streams.referee.referee import Referee
from streams.audit.commitments import Expected, Targets, check_commitments, commitment_targets
from streams.audit.items import FoldItem, where
from streams.audit.snapshots import Targets as SnapTargets
from streams.audit.snapshots import check_snapshots, snapshot_targets
from streams.audit.snapshots import unreached as unreached_snapshots
from streams.audit.report import Finding

if TYPE_CHECKING:
    from streams.audit.context import AuditContext


def replay(a: AuditContext) -> tuple[Expected, list[R.Emission], Referee]:
    """Fold ``a.items``: what the referee decided on the way (by topic, each with the item it
    came after), the halts it would issue at the end of the input, and the referee."""
    referee = Referee(a.config)
    expected: Expected = {"control": [], "manifests": [], "commitments": []}
    pending = commitment_targets(a)
    snaps = snapshot_targets(a)
    for cohort in list(pending):
        check_commitments(a, referee, cohort, pending, ("i", 0), expected)
        check_commitments(a, referee, cohort, pending, ("a", 0), expected)
    _fold(a, referee, pending, expected, snaps)
    _unreached(a, pending)
    unreached_snapshots(a, snaps)
    return expected, _halts_at_end(referee), referee


def _fold(a: AuditContext, referee: Referee, pending: Targets, expected: Expected, snaps: SnapTargets) -> None:
    # cohort -> (items folded, events accepted)
    counts: dict[str, list[int]] = {}
    total = len(a.items)
    items = a.items
    for n, item in enumerate(items):
        if n % 5000 == 0:
            a.tick("replay", n, total)
        if item.event is None:  # a clock tick of the processor, in its input
            emissions = referee.clock_tick(item.cohort, item.tick[0], item.tick[1], partition=item.partition,
                                           horizon_ms=item.tick[2])
            accepted = False
        else:
            handled = referee.handle(item.cohort, item.event, item.ts, partition=item.partition, publish=True,
                                     canonical=a.canonical.get(id(item.event)), ref=item)
            r = handled.result
            emissions, accepted = handled.emissions, r.accepted + len(r.released)
            for ref, ev, kind, reason in r.refused:
                a.refused.append((ref, ev, kind, reason))
        for em in emissions:
            if em.topic in expected:
                expected[em.topic].append((em, item))
            elif em.topic == "alerts" and em.value.get("kind") == "DELETED_PINNED":
                _pinned_deletion(a, em, item)
        if isinstance(item.event, CheckpointDeleted):
            a.checks["deletions"].checked += 1
        c = counts.setdefault(item.cohort, [0, 0])
        if item.event is not None:
            c[0] += 1
            c[1] += accepted
        if item.cohort in pending:
            if item.event is not None:
                check_commitments(a, referee, item.cohort, pending, ("i", c[0]), expected)
                if accepted:
                    check_commitments(a, referee, item.cohort, pending, ("a", c[1]), expected)
            if n + 1 == total or items[n + 1].via is not item.via:  # the input record is folded
                referee.note_input(item.cohort, item.via.partition, item.via.offset)
                check_commitments(a, referee, item.cohort, pending,
                                  ("o", item.via.partition, item.via.offset), expected)
        if item.cohort in snaps and (n + 1 == total or items[n + 1].via is not item.via):
            check_snapshots(a, referee, item.cohort, snaps, ("o", item.via.partition, item.via.offset))
    a.tick("replay", total, total)


def _pinned_deletion(a: AuditContext, em: R.Emission, item: FoldItem) -> None:
    """A job deleted a checkpoint the referee had never marked deletable (the referee's own
    DELETED_PINNED alert, decided again by the replay): a failure naming it."""
    v = em.value
    details = v.get("details") or {}
    a.checks["deletions"].fail(Finding(
        f"deleted checkpoint {v.get('checkpoint_id')}, which the referee had not marked deletable "
        f"({details.get('why') or 'pinned'}): a rollback may lack its target",
        job_id=v.get("job_id"), seq=item.event.seq if item.event is not None else None, where=item.where,
        field="checkpoint_id", expected="a checkpoint of a RetentionNotice's deletable list",
        found=v.get("checkpoint_id")))


def _unreached(a: AuditContext, pending: Targets) -> None:
    """Commitments still pending after the fold cover a position the log does not reach."""
    chk = a.checks["commitments"]
    for cohort, targets in pending.items():
        for _key, lst in targets.items():
            for rec, value in lst:
                chk.fail(Finding("commits to a fold position the log does not reach "
                                 f"(log_size {value.get('log_size')}, {len(value.get('heads') or [])} heads)",
                                 where=where(rec)))


def _halts_at_end(referee: Referee) -> list[R.Emission]:
    """The halts the end of the input would issue (sources nobody wrote): the processor issues
    them on its own clock after a grace period, so the compare step only expects them loosely."""
    at_end: list[R.Emission] = []
    for cohort in sorted(referee.engines):
        for d in referee.engines[cohort].finish_input():
            if isinstance(d, HaltIssued):
                at_end.append(R.halt_emission(d, 0))
    return at_end
