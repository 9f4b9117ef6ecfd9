"""The ``snapshots`` check: every ``CohortSnapshot`` on ``lineage.snapshots`` is the state the
log gives at the input it covers.

A worker taking a partition over trusts the latest snapshot of each cohort instead of re-folding
its input (:mod:`streams.worker.snapshots`), so a forged or corrupt snapshot would silently
change what it decides from then on. The replay (:mod:`streams.audit.replay`) folds the same log
through the same referee; at the input record a snapshot names (``input_offset`` of its
``partition``) it encodes the cohort (:mod:`streams.referee.snapshots`) and compares digests.
The record's own digest must also be its state's, and with trusted keys its signature must
verify. Compaction keeps only each cohort's latest snapshot, so that is what is checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.audit.items import FoldItem, where
from streams.audit.report import Finding
from streams.files.archive import LogRecord
from streams.referee import snapshots as images
from streams.referee.referee import Referee

if TYPE_CHECKING:
    from streams.audit.context import AuditContext

#: cohort -> ("o", partition, input offset) -> the snapshots that cover exactly that input
Targets = dict[str, dict[tuple, list[tuple[LogRecord, dict[str, Any]]]]]


def snapshot_targets(a: AuditContext) -> Targets:
    """The snapshots of the log, filed by cohort and the input record they cover; a record whose
    state is not its digest's, or whose signature does not verify, fails here."""
    chk = a.checks["snapshots"]
    out: Targets = {}
    if not a.log.topic("snapshots"):
        chk.skipped = True
        chk.notes.append("the log has no snapshots")
        return out
    for rec, name, value in a.decoded("snapshots", chk, "snapshot"):
        if name != "CohortSnapshot":
            continue
        chk.checked += 1
        if not _intact(a, rec, value):
            continue
        if value.get("input_offset") is None:
            chk.fail(Finding(f"snapshot of cohort {value['cohort_id']!r} covers no input", where=where(rec)))
            continue
        key = ("o", value["partition"], value["input_offset"])
        out.setdefault(value["cohort_id"], {}).setdefault(key, []).append((rec, value))
    return out


def _intact(a: AuditContext, rec: LogRecord, value: dict[str, Any]) -> bool:
    chk = a.checks["snapshots"]
    try:
        images.verify(value["state"], value["digest"])
    except images.SnapshotRejected as exc:
        chk.fail(Finding(f"snapshot of cohort {value['cohort_id']!r}: {exc}", where=where(rec), field="state"))
        return False
    signed = bool(value.get("signature"))
    chk.count("signed" if signed else "unsigned")
    if a.trusted is None:
        return True
    from streams.signing import check_snapshot

    ok, reason = check_snapshot(value, a.trusted)
    if not ok:
        chk.fail(Finding(f"snapshot of cohort {value['cohort_id']!r}: signature rejected: {reason}",
                         where=where(rec), field="signature"))
    return ok


def plain_ref(ref: Any) -> Any:
    """A held event's reference as the processor holds it: the routed event."""
    return ref.routed if isinstance(ref, FoldItem) else ref


def check_snapshots(a: AuditContext, referee: Referee, cohort: str, pending: Targets, key: tuple) -> None:
    """The snapshots of ``cohort`` due at ``key``: the referee's encoding of the cohort now must
    have their digest."""
    targets = pending.get(cohort)
    if not targets or key not in targets:
        return
    chk = a.checks["snapshots"]
    mine = images.digest(images.encode(referee, cohort, plain_ref))
    for rec, value in targets.pop(key):
        if value["digest"] == mine:
            chk.count("recompute")
        else:
            chk.fail(Finding(f"snapshot of cohort {cohort!r} is not the state the log gives at its input "
                             f"(forged, or folded by other code)", where=where(rec), field="digest",
                             expected=mine, found=value["digest"]))
    if not targets:
        pending.pop(cohort, None)


def unreached(a: AuditContext, pending: Targets) -> None:
    """Snapshots still pending after the fold cover input the log does not have."""
    chk = a.checks["snapshots"]
    for cohort, targets in pending.items():
        for key, lst in targets.items():
            for rec, _value in lst:
                chk.fail(Finding(f"snapshot of cohort {cohort!r} covers input the log does not have "
                                 f"(partition {key[1]}, offset {key[2]})", where=where(rec)))
