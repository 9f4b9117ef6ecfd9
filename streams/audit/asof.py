""""As of": what the referee knew at one moment — the question an incident review asks first.

:func:`as_of` folds, through the same core as ``analyze`` and the live referee
(:class:`~streams.core.cohorts.CohortLineage`), exactly the events the processor had folded by
time T: the items of :func:`~streams.audit.log.fold_order` whose ``ts`` (the processor's
clock: the input record's timestamp; for a JSON Lines file or an events-only log, the event's
own ``ts``) is ``<= T``, in fold order. It then reports the state at T *without* the end-of-input
step (``finish_input``): a consumption whose source nobody had written by T is "unresolved so
far" (``unresolved_sources``), not a halt — unless a grace period is given and had passed at T,
as the live referee's periodic check would have found.

From the log's ``control`` topic (when it has one) it lists the commands actually issued by T
(``issued_ts <= T``), so the plans the core computes at T can be checked against what was sent.

The semantics, and the readings chosen where SPEC.md is silent, are written down in
``docs/as-of.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from streams.files.archive import LogRecord
from streams.codec import Codec, DecodeError
from streams.core.cohorts import UNREGISTERED_COHORT, CohortLineage
from streams.core.commitment import HALTED_PREFIX, concurrency_snapshot
from streams.core.events import RolledBack
from streams.control.commands import CONTROL_RECORDS, command_from_record
from streams.core.state import HALT_RANK, Config
from streams.audit.log import AuditLog, fold_order, read_jsonl

__all__ = ["as_of", "iso_utc", "load_jsonl_log", "COMMAND_RECORDS"]

#: The records of ``lineage.control`` that are commands (anything else there is ignored).
COMMAND_RECORDS = CONTROL_RECORDS

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso_utc(ms: int) -> str:
    """``1760000124000`` -> ``"2025-10-09T08:55:24.000Z"`` (exact, whatever the magnitude)."""
    return (_EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def as_of(log: AuditLog, t_ms: int, config: Config | None = None, grace_ms: int | None = None,
          codec: Codec | None = None) -> dict[str, Any]:
    """What was known at ``t_ms`` (milliseconds since the epoch, inclusive).

    ``grace_ms``: when given, a consumption still unresolved at T whose event was folded at
    least ``grace_ms`` before T halts its job ``UNTRACEABLE_SOURCE`` (the live referee's
    periodic check); when None, unresolved consumptions are only listed.

    Returns a JSON-serialisable dict (every list sorted), see ``docs/as-of.md``:
    ``as_of_ms``, ``as_of``, ``source``, ``clock``, ``events_folded``, ``events_undecodable``,
    ``first_ts``/``last_ts`` (the log's range), ``jobs``, ``tainted_checkpoints``,
    ``incidents``, ``plans``, ``halts``, ``alerts``, ``unresolved_sources``,
    ``commands_issued`` (None when the log has no control topic) and ``notes``.
    """
    if not isinstance(t_ms, int) or isinstance(t_ms, bool):
        raise TypeError(f"t_ms must be an int (ms since the epoch), not {t_ms!r}")
    codec = codec or Codec()
    lineage = CohortLineage(config)
    seen = _fold_until(log, t_ms, codec, lineage)
    if grace_ms is not None:
        lineage.tick(t_ms, grace_ms)
    final = lineage.final_state()  # decides; never finish_input
    unresolved = _unresolved(lineage)
    notes = _unresolved_notes(unresolved, grace_ms)
    commands = _commands(log, t_ms, codec, notes)
    notes.extend(_range_notes(seen, t_ms))
    return {
        "as_of_ms": t_ms,
        "as_of": iso_utc(t_ms),
        "source": log.source,
        "clock": "processor" if log.has_input else "event",
        "events_folded": seen.folded,
        "events_undecodable": seen.undecodable,
        "first_ts": seen.first_ts,
        "last_ts": seen.last_ts,
        "jobs": _jobs(lineage, seen.resumed),
        "tainted_checkpoints": final["tainted_checkpoints"],
        "incidents": final["incidents"],
        "plans": final["plans"],
        "halts": final["halts"],
        "alerts": final["alerts"],
        "unresolved_sources": unresolved,
        "commands_issued": commands,
        "notes": notes,
    }


# ------------------------------------------------------------------------------- the fold


@dataclass
class _Seen:
    """What the fold up to T went through."""

    folded: int = 0
    undecodable: int = 0
    #: the log's range (every item, also those after T)
    first_ts: int | None = None
    last_ts: int | None = None
    #: job -> (incarnation, resumed_step) of its last folded RolledBack
    resumed: dict[str, tuple[int, int]] = field(default_factory=dict)


def _fold_until(log: AuditLog, t_ms: int, codec: Codec, lineage: CohortLineage) -> _Seen:
    """Fold into ``lineage`` the items of the fold order with ``ts <= t_ms``, in that order."""
    from_input = log.has_input
    seen = _Seen()
    for item in fold_order(log, codec):
        seen.first_ts = item.ts if seen.first_ts is None else min(seen.first_ts, item.ts)
        seen.last_ts = item.ts if seen.last_ts is None else max(seen.last_ts, item.ts)
        if item.ts > t_ms:
            continue
        if item.event is None:
            seen.undecodable += 1
            continue
        ev = item.event
        if from_input:
            # the processor's own routing: the cohort the by-cohort record names
            lineage.engine(item.cohort).fold(ev, item.ts)
        else:
            # route by the JobStarted events known at T (the same router analyze uses)
            lineage.fold(ev, item.ts)
        seen.folded += 1
        if isinstance(ev, RolledBack):
            seen.resumed[ev.job_id] = (ev.incarnation, ev.resumed_step)
    return seen


def _unresolved_notes(unresolved: list[dict[str, Any]], grace_ms: int | None) -> list[str]:
    if not unresolved:
        return []
    if grace_ms is None:
        return ["unresolved_sources: consumptions whose source no job had written by T; "
                "unresolved so far, not halts (no grace period given)"]
    return [f"unresolved_sources: consumptions whose source no job had written by T; those "
            f"unresolved for {grace_ms} ms or more at T halt their job UNTRACEABLE_SOURCE"]


def _range_notes(seen: _Seen, t_ms: int) -> list[str]:
    notes = []
    if seen.undecodable:
        notes.append(f"{seen.undecodable} event record(s) up to T did not decode and were not folded")
    if seen.first_ts is not None and t_ms < seen.first_ts:
        notes.append("T is before the first event of the log: nothing was known")
    elif seen.last_ts is not None and t_ms >= seen.last_ts:
        notes.append("T is at or after the last event of the log: this is the state with every event "
                     "folded, before the end-of-log step (see unresolved_sources)")
    return notes


# ------------------------------------------------------------------------------- parts


def _jobs(lineage: CohortLineage, resumed: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """One row per job. A job folded in two engines (events before its JobStarted land in the
    unregistered bucket) is one row: its registered cohort's record, the first halt reason in
    SPEC §8 order over both, and the later of the two last events."""
    rows: dict[str, dict[str, Any]] = {}
    for cohort in sorted(lineage.cohorts, key=lambda c: (c == UNREGISTERED_COHORT, c)):
        lin = lineage.cohorts[cohort]
        for snap in concurrency_snapshot(lin):
            job = lin.state.jobs[snap["job_id"]]
            row = {
                "job_id": snap["job_id"],
                "cohort_id": job.cohort_id,
                "incarnation": snap["incarnation"],
                "last_step": snap["last_step"],
                "resumed_step": None,
                "status": snap["status"],
                "last_event_ts": job.last_ts,
                "last_seq": job.next_seq - 1,
            }
            r = resumed.get(snap["job_id"])
            if r is not None and r[0] == snap["incarnation"]:
                row["resumed_step"] = r[1]
            prev = rows.get(row["job_id"])
            if prev is None:
                rows[row["job_id"]] = row
                continue
            # merge the unregistered-bucket record into the registered one
            prev["last_seq"] = max(prev["last_seq"], row["last_seq"])
            if row["last_event_ts"] is not None and (prev["last_event_ts"] is None
                                                     or row["last_event_ts"] > prev["last_event_ts"]):
                prev["last_event_ts"] = row["last_event_ts"]
            prev["status"] = _worse(prev["status"], row["status"])
    return [rows[j] for j in sorted(rows)]


def _worse(a: str, b: str) -> str:
    ra = HALT_RANK.get(a[len(HALTED_PREFIX):]) if a.startswith(HALTED_PREFIX) else None
    rb = HALT_RANK.get(b[len(HALTED_PREFIX):]) if b.startswith(HALTED_PREFIX) else None
    if rb is None:
        return a
    if ra is None or rb < ra:
        return b
    return a


def _unresolved(lineage: CohortLineage) -> list[dict[str, Any]]:
    out = set()
    for lin in lineage.cohorts.values():
        for ckpt_id, waiting in lin.state.unresolved.items():
            for inc, c, seen in waiting:
                out.add((inc.job_id, ckpt_id, inc.number, c.seq, c.mode, c.kind, seen))
    return [{"job_id": j, "checkpoint_id": ck, "incarnation": n, "seq": q, "mode": m,
             "kind": k, "since_ts": s}
            for j, ck, n, q, m, k, s in sorted(out, key=lambda x: (x[0], x[1], x[3]))]


def _commands(log: AuditLog, t_ms: int, codec: Codec, notes: list[str]) -> list[dict[str, Any]] | None:
    read = log.meta.get("topics") if isinstance(log.meta, dict) else None
    if "control" not in log.records and not (isinstance(read, dict) and "control" in read):
        notes.append("the log has no control topic: commands_issued is null (the plans are what the "
                     "referee would have issued by T)")
        return None
    rows: list[tuple[tuple[int, int, int], dict[str, Any]]] = []
    bad = ignored = 0
    for rec in log.topic("control"):
        try:
            name, r = codec.decode_record(rec.value or b"")
        except DecodeError:
            bad += 1
            continue
        if name not in COMMAND_RECORDS:
            ignored += 1
            continue
        try:
            row = _command_row(name, r, rec)
        except (KeyError, TypeError):
            bad += 1
            continue
        if row["issued_ts"] <= t_ms:
            rows.append(((row["issued_ts"], rec.partition, rec.offset), row))
    if bad:
        notes.append(f"{bad} control record(s) did not decode as commands and are not listed")
    if ignored:
        notes.append(f"{ignored} control record(s) of other types were ignored")
    rows.sort(key=lambda x: x[0])
    return [r for _k, r in rows]


def _command_row(name: str, r: dict[str, Any], rec: LogRecord) -> dict[str, Any]:
    """A command as the as-of view lists it, read by the one control-record mapping
    (:func:`streams.control.commands.command_from_record`)."""
    cmd = command_from_record(name, r, rec.partition, rec.offset)
    if cmd is None:
        raise TypeError(f"{name} is not a command")
    row: dict[str, Any] = {
        "record": cmd.kind,
        "command_id": cmd.command_id,
        "job_id": cmd.job_id,
        "incarnation": cmd.incarnation,
        "action": ("RELEASE" if cmd.is_release else "HALT") if cmd.is_halt else cmd.action,
        "reason": cmd.reason,
        "target_checkpoint_id": cmd.target_checkpoint_id,
        "target_step": cmd.target_step,
        "supersedes": cmd.supersedes,
        "issued_ts": int(cmd.issued_ts),  # type: ignore[arg-type]  (None: TypeError, not a command)
        "position": f"{rec.partition}@{rec.offset}",
    }
    if cmd.kind in ("RollbackCommand", "QuarantineNotice"):
        if cmd.kind == "QuarantineNotice":
            row["quarantined_checkpoint_ids"] = sorted(cmd.quarantined_checkpoint_ids)
        row["incident_ids"] = sorted(cmd.incident_ids)
    elif cmd.is_halt:
        row["detail"] = cmd.detail or ""
    return row


# ------------------------------------------------------------------------------- loading


def load_jsonl_log(path: str, skip_invalid: bool = False, codec: Codec | None = None):
    """An events-only :class:`AuditLog` from a JSON Lines file (``-``: stdin), like
    :func:`streams.audit.log.load_jsonl` but able to skip bad lines.

    Returns ``(log, skipped LineErrors)``; raises :class:`JsonlError` on the first bad line
    unless ``skip_invalid``.
    """
    return read_jsonl(path, skip_invalid, codec)
