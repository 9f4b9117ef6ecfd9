"""The records of ``lineage.control`` as commands: one mapping from a decoded record to a
:class:`ControlCommand`, for the job client, ``traintrace plans`` and the worker alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from streams.records import CONTROL_TYPES, HaltCommand, PlanCleared, QuarantineNotice, RollbackCommand

#: The control records that carry a job's plan; the last one of a job is its plan in force.
PLAN_RECORDS = ("RollbackCommand", "QuarantineNotice", "PlanCleared")
HALT_RECORD = "HaltCommand"
CONTROL_RECORDS = (*PLAN_RECORDS, HALT_RECORD)
#: the referee's retention view of a job (SPEC §13, schemas v9): on lineage.control and signed
#: like a command, but no command (the job client keeps the last one: streams.client.retention)
RETENTION_RECORD = "RetentionNotice"
#: every record of lineage.control a signature must cover
SIGNED_RECORDS = (*CONTROL_RECORDS, RETENTION_RECORD)
#: the reason of the HaltCommand that lifts a halt (``traintrace release``)
RELEASE_REASON = "RELEASE"
#: the action of the plan records that carry none of their own
PLAN_ACTION = {"QuarantineNotice": "QUARANTINE", "PlanCleared": "CLEAR"}


#: the fields of a plan record that are not its content: when and from what it was issued,
#: what it supersedes, its signature (and the record's name a decoder adds)
_NOT_CONTENT = frozenset(("issued_ts", "commitment_root", "supersedes", "signature", "key_id", "type"))


def plan_content(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a plan record says (every field but when and from what it was issued, what it
    supersedes and its signature), comparable between a record as built and as decoded from the
    topic. A plan whose content changes under its command id is published again (SPEC §10 does
    not hash a ``QUARANTINE``'s list: :mod:`streams.referee.referee`)."""
    return tuple(sorted((k, tuple(v) if isinstance(v, (list, tuple)) else v)
                        for k, v in record.items() if k not in _NOT_CONTENT))


def action_of(name: str, rec: Mapping[str, Any]) -> str:
    """What a control record does, in one word, as every reader shows it: a RollbackCommand's
    ``action`` (ROLLBACK, RESTART_FROM_BASE, RESTART_FROM_SCRATCH), QUARANTINE, CLEAR, HALT, or
    RELEASE (a HaltCommand lifting a halt); another record's name."""
    if name == "RollbackCommand":
        return str(rec.get("action"))
    if name == HALT_RECORD:
        return RELEASE_REASON if rec.get("reason") == RELEASE_REASON else "HALT"
    return PLAN_ACTION.get(name, name)


@dataclass(frozen=True)
class ControlCommand:
    """One record of ``lineage.control``, flattened.

    ``kind``: the record name. ``action``: ``ROLLBACK`` / ``RESTART_FROM_BASE`` /
    ``RESTART_FROM_SCRATCH`` (RollbackCommand), ``QUARANTINE``, ``CLEAR`` (PlanCleared), or the
    halt reason (``UNREGISTERED``, ..., ``RELEASE``) of a HaltCommand. ``record`` is the decoded
    record as it was on the topic; ``outcome`` what the job client did with it
    (:func:`streams.control.obey.decide`).
    """

    kind: str
    command_id: str
    job_id: str
    action: str
    incarnation: int | None = None
    target_checkpoint_id: str | None = None
    target_step: int | None = None
    incident_ids: tuple[str, ...] = ()
    quarantined_checkpoint_ids: tuple[str, ...] = ()
    supersedes: str | None = None
    reason: str | None = None
    detail: str | None = None
    issued_ts: int | None = None
    partition: int | None = None
    offset: int | None = None
    record: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    outcome: str | None = None

    @property
    def is_plan(self) -> bool:
        return self.kind in PLAN_RECORDS

    @property
    def is_halt(self) -> bool:
        """A ``HaltCommand``: a halt, or (:attr:`is_release`) the release of one."""
        return self.kind == HALT_RECORD

    @property
    def is_release(self) -> bool:
        return self.kind == HALT_RECORD and self.action == RELEASE_REASON


def command_from_record(name: str, rec: Mapping[str, Any], partition: int | None = None,
                        offset: int | None = None) -> ControlCommand | None:
    """The :class:`ControlCommand` of a decoded control record, None for other records. The
    record is read through its type (:mod:`streams.records`): the one declaration of its shape.

    Raises KeyError / TypeError for a record that lacks what its kind needs (a record that
    decoded from Avro never does)."""
    kind = CONTROL_TYPES.get(name)
    if kind is None:
        return None
    for key in ("command_id", "job_id"):
        if not isinstance(rec[key], str):
            raise TypeError(f"{name}.{key} is not a string")
    r = kind.from_value(rec)
    common = dict(kind=name, command_id=rec["command_id"], job_id=rec["job_id"], issued_ts=rec.get("issued_ts"),
                  partition=partition, offset=offset, record=dict(rec))
    if isinstance(r, RollbackCommand):
        return ControlCommand(action=r.action, incarnation=r.incarnation, target_checkpoint_id=r.target_checkpoint_id,
                              target_step=r.target_step, incident_ids=tuple(r.incident_ids or ()), supersedes=r.supersedes,
                              **common)
    if isinstance(r, QuarantineNotice):
        return ControlCommand(action=PLAN_ACTION[name], incarnation=r.incarnation,
                              incident_ids=tuple(r.incident_ids or ()),
                              quarantined_checkpoint_ids=tuple(r.quarantined_checkpoint_ids or ()),
                              supersedes=r.supersedes,
                              **common)
    if isinstance(r, PlanCleared):
        return ControlCommand(action=PLAN_ACTION[name], incarnation=r.incarnation, supersedes=r.supersedes,
                              reason=r.reason, **common)
    assert isinstance(r, HaltCommand)
    return ControlCommand(action=r.reason, reason=r.reason, detail=r.detail, **common)
