"""What the report shows of the log besides the events: the commands the control topic carried
(each marked in force, superseded or cleared, applied, and whether it is the final plan's) and the
dead letters (``lineage.dlq``)."""

from __future__ import annotations

from typing import Any

from streams.control.commands import action_of
from streams.codec import Codec
from streams.core.cohorts import UNREGISTERED_COHORT, CohortLineage
from streams.audit.log import AuditLog

#: the plan action a control record stands for (a RollbackCommand names its own)


def control_commands(log: AuditLog, codec: Codec,
                     lineage: CohortLineage) -> tuple[list[dict[str, Any]], int, int]:
    """The commands the control topic carried, in log order, each marked as still in force
    (the last plan-type record of its job; halts are kept apart) and whether the final plan
    of the fold names the same command. Returns ``(commands, records, undecodable)``."""
    recs = log.topic("control")
    out: list[dict[str, Any]] = []
    bad = 0
    for rec in recs:
        try:
            name, value = codec.decode_record(rec.value or b"")
        except Exception:  # noqa: BLE001 - DecodeError or worse: an undecodable record is counted, not fatal
            bad += 1
            continue
        cohort = value.get("cohort_id")
        if cohort is None:
            cohort = lineage.router.mapping.get(value.get("job_id") or "", UNREGISTERED_COHORT)
        out.append(_command_row(name, value, cohort, rec.where))
    _mark_in_force(out)
    _mark_against_the_fold(out, lineage)
    return out, len(recs), bad


def _command_row(name: str, value: dict[str, Any], cohort: str, position: str) -> dict[str, Any]:
    action = action_of(name, value)
    return {
        "record": name,
        "command_id": value.get("command_id"),
        "job_id": value.get("job_id"),
        "cohort_id": cohort,
        "incarnation": value.get("incarnation"),
        "action": action,
        "target_checkpoint_id": value.get("target_checkpoint_id"),
        "target_step": value.get("target_step"),
        "reason": value.get("reason"),
        "incident_ids": list(value.get("incident_ids") or []),
        "supersedes": value.get("supersedes"),
        "issued_ts": value.get("issued_ts"),
        "position": position,
        "in_force": False,
        "matches_plan": False,
    }


def _mark_in_force(commands: list[dict[str, Any]]) -> None:
    """The last plan-type record of each job is in force, unless it clears the plan."""
    last: dict[str, dict[str, Any]] = {}
    for c in commands:
        if c["record"] != "HaltCommand":
            last[c["job_id"]] = c
    for c in last.values():
        c["in_force"] = c["record"] != "PlanCleared"


def _mark_against_the_fold(commands: list[dict[str, Any]], lineage: CohortLineage) -> None:
    """Whether the fold's final plan is the command (same id), and whether a ``RolledBack``
    acknowledged it (``applied``)."""
    for c in commands:
        eng = lineage.cohorts.get(c["cohort_id"])
        plan = eng.plans.get(c["job_id"]) if eng is not None else None
        c["matches_plan"] = plan is not None and plan.get("command_id") == c["command_id"]
        if eng is not None and c["command_id"] in eng.state.acknowledged:
            c["applied"] = True


def dead_letters(log: AuditLog, codec: Codec | None = None) -> list[dict[str, Any]]:
    """The records of the dead-letter topic (``lineage.dlq``), in log order: where each sits
    (``position``), the record it stands for (``original_topic``, ``original_partition``,
    ``original_offset``, ``original_key``), ``error_kind``, ``reason``, ``ts`` and, when the
    original value decodes as an event, its ``job_id``, ``seq`` and ``type`` (a rejected
    event; an undecodable one has none). A dead letter that does not decode itself is listed
    with ``error_kind`` ``UNDECODABLE_DEAD_LETTER``."""
    codec = codec or Codec()
    out: list[dict[str, Any]] = []
    for rec in log.topic("dlq"):
        row: dict[str, Any] = {"position": rec.where, "original_topic": None, "original_partition": None,
                               "original_offset": None, "original_key": rec.key, "error_kind": None,
                               "reason": None, "ts": rec.timestamp, "job_id": None, "seq": None, "type": None}
        try:
            _name, d = codec.decode_record(rec.value or b"")
        except Exception as exc:  # noqa: BLE001 - listed as what it is, not fatal
            row.update(error_kind="UNDECODABLE_DEAD_LETTER", reason=f"the dead letter itself does not decode: {exc}")
            out.append(row)
            continue
        key = d.get("original_key")
        if isinstance(key, (bytes, bytearray)):
            key = bytes(key).decode("utf-8", "replace")
        row.update(original_topic=d.get("original_topic"), original_partition=d.get("original_partition"),
                   original_offset=d.get("original_offset"), original_key=key if key is not None else rec.key,
                   error_kind=d.get("error_kind"), reason=d.get("reason"), ts=d.get("ts") or rec.timestamp)
        try:
            ev = codec.decode_event(d.get("original_value") or b"")
            row.update(job_id=ev.get("job_id"), seq=ev.get("seq"), type=ev.get("type"))
        except Exception:  # noqa: BLE001 - undecodable: that is why it is here
            pass
        out.append(row)
    return out
