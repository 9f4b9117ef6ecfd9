"""The ``commitments`` check: every ``LineageCommitment`` recomputes, and with trusted keys is
signed by one of them.

:func:`commitment_targets` reads the published commitments and files each under the fold
position it covers; the replay (:mod:`streams.audit.replay`) calls :func:`check_commitments`
at every position, which recomputes the commitments due there from the referee's engine and
compares them field for field (root, heads, snapshot, fold log). :func:`check_signature` counts
what is known of each one's signature (``Check.tally``): without trusted keys none is verified,
and the verdict line says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.core.commitment import build_commitment
from streams.files.archive import LogRecord
from streams.referee import records as R
from streams.referee.referee import Referee
from streams.audit.diff import values_differ
from streams.audit.items import FoldItem, where
from streams.audit.report import Finding

if TYPE_CHECKING:
    from streams.audit.context import AuditContext

#: cohort -> fold position -> the published commitments that cover it
Targets = dict[str, dict[tuple, list[tuple[LogRecord, dict[str, Any]]]]]
#: what the replay decided, by topic: (the record, the fold item it came after; None: not an event's)
Expected = dict[str, list[tuple[R.Emission, FoldItem | None]]]


def commitment_targets(a: AuditContext) -> Targets:
    """Published commitments, by cohort and by the fold position they cover: ("o", p, o) after
    the input record at ``input_partition``/``input_offset``, ("a", n) after the n-th accepted
    event (``log_size``), or ("i", k) after the k-th folded item (from the heads)."""
    chk = a.checks["commitments"]
    out: Targets = {}
    first_index: dict[tuple[str, int], int] = {}
    per_cohort: dict[str, int] = {}
    recs = a.log.topic("commitments")
    if not recs:
        chk.skipped = True
        chk.notes.append("the log has no commitments")
        return out
    need_heads = False
    decoded = []
    for rec, _name, value in a.decoded("commitments", chk, "commitment"):
        decoded.append((rec, value))
        if value.get("log_size") is None:
            need_heads = True
    if need_heads:
        for item in a.items:
            if item.event is None:
                continue
            k = per_cohort[item.cohort] = per_cohort.get(item.cohort, 0) + 1
            first_index.setdefault((item.event.job_id, item.event.seq), k)
    for rec, value in decoded:
        chk.checked += 1
        check_signature(a, rec, value)
        cohort = value["cohort_id"]
        if value.get("input_offset") is not None:
            key = ("o", value.get("input_partition"), int(value["input_offset"]))
        elif value.get("log_size") is not None:
            key = ("a", int(value["log_size"]))
        else:
            pos = 0
            for h in value.get("heads") or []:
                k = first_index.get((h["job_id"], h["seq"]))
                if k is None:
                    chk.fail(Finding("commits to a head the log does not have", job_id=h["job_id"],
                                     seq=h["seq"], where=where(rec)))
                    pos = -1
                    break
                pos = max(pos, k)
            if pos < 0:
                continue
            key = ("i", pos)
        out.setdefault(cohort, {}).setdefault(key, []).append((rec, value))
    return out


def check_commitments(a: AuditContext, referee: Referee, cohort: str, pending: Targets, key: tuple,
                      expected: Expected) -> None:
    """The commitments of ``cohort`` due at fold position ``key``, recomputed from the referee's
    engine now and compared; each recomputed one is added to ``expected``."""
    targets = pending.get(cohort)
    if not targets or key not in targets:
        return
    chk = a.checks["commitments"]
    lin = referee.engine(cohort)
    for rec, value in targets.pop(key):
        mine = build_commitment(cohort, lin, value["ts"])
        pos = referee.position.get(cohort) if value.get("input_offset") is not None else None
        mine["input_partition"], mine["input_offset"] = pos if pos is not None else (None, None)
        for k in ("signature", "key_id", "checkpoint"):  # the signer's: checked by check_signature
            mine[k] = value.get(k)
        expected["commitments"].append((R.Emission("commitments", cohort, "LineageCommitment", mine), None))
        diffs = values_differ(_plain(mine), _plain(value))
        chk.count("differ" if diffs else "recompute")
        for f, e, g in diffs[:5]:
            chk.fail(Finding(f"commitment of cohort {cohort!r} differs from the recomputed one",
                             where=where(rec), field=f, expected=e, found=g))
    if not targets:
        pending.pop(cohort, None)


def check_signature(a: AuditContext, rec: LogRecord, value: dict[str, Any]) -> None:
    """Count the commitment's signature as signed/unsigned and, with trusted keys, verify it."""
    chk = a.checks["commitments"]
    sig = value.get("signature")
    signed = sig is not None and sig != b"" and sig != ""
    chk.count("signed" if signed else "unsigned")
    if a.trusted is None:
        note = ("signatures NOT checked: no trusted keys given (--trusted-keys), so no signature "
                "was verified" if signed else
                "commitments without a signature (a worker without a signing key): nothing to verify them by")
        if note not in chk.notes:
            chk.notes.append(note)
        return
    from streams.signing import verify_commitment

    ok, reason = verify_commitment(value, a.trusted)
    chk.count("verified" if ok else "rejected")
    if not ok:
        chk.count(f"rejected:{reason}")
        chk.fail(Finding(f"signature rejected: {reason}", where=where(rec), field="signature",
                         expected="a valid signature by a trusted key", found=value.get("key_id")))
    if ok and value.get("checkpoint"):  # v10: the fold log as a signed C2SP checkpoint (issue 28)
        from streams.signing import checkpoint_problem

        problem = checkpoint_problem(value, a.trusted)
        chk.count("checkpoint rejected" if problem else "checkpoint verified")
        if problem:
            chk.fail(Finding(f"checkpoint rejected: {problem}", where=where(rec), field="checkpoint",
                             expected="a C2SP checkpoint of the commitment's fold log signed by its key",
                             found=str(value.get("checkpoint")).split("\n", 1)[0]))


def _plain(v: dict[str, Any]) -> dict[str, Any]:
    """A commitment as a comparable dict (lists of records as dicts keyed by position)."""
    out: dict[str, Any] = {}
    for k, x in v.items():
        if isinstance(x, list):
            out[k] = {str(i): (dict(y) if isinstance(y, dict) else y) for i, y in enumerate(x)}
        else:
            out[k] = x
    return out
