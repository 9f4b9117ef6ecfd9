"""The fold of ``lineage.control``: per job the plan and the halt in force (pure)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping


# plans and halts: the fold of lineage.control

#: The control records that carry a job's plan; the last one of a job is its plan in force.
PLAN_RECORDS = ("RollbackCommand", "QuarantineNotice", "PlanCleared")


def _plan_of(name: str, rec: Mapping[str, Any]) -> dict[str, Any] | None:
    if name == "PlanCleared":
        return None
    plan: dict[str, Any] = {
        "job_id": rec["job_id"],
        "incarnation": rec["incarnation"],
        "action": None,
        "target_checkpoint_id": None,
        "target_step": None,
        "incident_ids": sorted(rec["incident_ids"]),
        "command_id": rec["command_id"],
    }
    if name == "QuarantineNotice":
        plan["action"] = "QUARANTINE"
        plan["quarantined_checkpoint_ids"] = sorted(rec["quarantined_checkpoint_ids"])
    else:
        plan["action"] = rec["action"]
        plan["target_checkpoint_id"] = rec.get("target_checkpoint_id")
        plan["target_step"] = rec.get("target_step")
    return plan


@dataclass
class ControlState:
    """The fold of ``lineage.control``: per job the plan and the halt in force.

    Feed it the decoded records of a job in their order (the topic is keyed by ``job_id``, so
    partition order is a job's order); records of different jobs may interleave in any way.

    - Plans: the last of a job's ``RollbackCommand`` / ``QuarantineNotice`` / ``PlanCleared``
      is in force; a ``PlanCleared`` means no plan; a command superseded by a later one is
      folded away. A ``QuarantineNotice`` is the plan ``QUARANTINE`` (no target).
    - Halts: the last ``HaltCommand`` of a job is in force; reason ``RELEASE`` means not halted.
    - Records that do not decode (or decode to something malformed) are counted in
      ``undecodable``; decoded records of other types in ``ignored``.
    """

    plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    halts: dict[str, dict[str, Any]] = field(default_factory=dict)
    records: int = 0
    undecodable: int = 0
    ignored: int = 0
    undecodable_reasons: Counter[str] = field(default_factory=Counter)

    def add(self, name: str, record: Mapping[str, Any]) -> None:
        self.records += 1
        if name not in PLAN_RECORDS and name != "HaltCommand":
            self.ignored += 1
            return
        try:
            job_id = record["job_id"]
            if not isinstance(job_id, str):
                raise TypeError("job_id")
            if name in PLAN_RECORDS:
                plan = _plan_of(name, record)
                if plan is None:
                    self.plans.pop(job_id, None)
                else:
                    self.plans[job_id] = plan
            elif name == "HaltCommand":
                reason = record["reason"]
                if reason == "RELEASE":
                    self.halts.pop(job_id, None)
                else:
                    self.halts[job_id] = {"job_id": job_id, "reason": reason,
                                          "detail": record.get("detail") or ""}
        except (KeyError, TypeError, AttributeError):
            self.records -= 1
            self.add_undecodable("MALFORMED")

    def add_undecodable(self, reason: str = "UNDECODABLE") -> None:
        self.records += 1
        self.undecodable += 1
        self.undecodable_reasons[reason] += 1

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        """``{"plans": [...], "halts": [...]}``, each sorted by ``job_id`` (SPEC §11 shapes,
        plans with their ``command_id``)."""
        return {"plans": [dict(self.plans[j]) for j in sorted(self.plans)],
                "halts": [dict(self.halts[j]) for j in sorted(self.halts)]}


def fold_control(items: Iterable[tuple[str, Mapping[str, Any]] | BaseException | None]) -> ControlState:
    """Fold decoded control records: each item is ``(record name, record)``, or an exception
    (e.g. a :class:`DecodeError`) or ``None`` for a record that did not decode."""
    state = ControlState()
    for item in items:
        if item is None:
            state.add_undecodable()
        elif isinstance(item, BaseException):
            state.add_undecodable(getattr(item, "reason", type(item).__name__))
        else:
            name, record = item
            state.add(name, record)
    return state
