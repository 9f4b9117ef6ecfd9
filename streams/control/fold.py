"""The fold of ``lineage.control``: per job the plan and the halt in force, what is superseded
and the command ids already there (pure).

The rules, in one place:

- Plans: the last of a job's ``RollbackCommand`` / ``QuarantineNotice`` / ``PlanCleared`` is in
  force; every earlier one is superseded by it; a ``PlanCleared`` means no plan. A
  ``QuarantineNotice`` is the plan ``QUARANTINE`` (no target). A plan record whose command id an
  earlier record already superseded is a copy published again by a worker that re-folded from
  before its successor (at least once: a takeover while the old owner's outputs were still in
  flight): it changes nothing, since a superseded command never comes back into force (SPEC §10:
  a changed plan is a new command that names the one it supersedes).
- Halts: the last ``HaltCommand`` of a job is in force; reason ``RELEASE`` means not halted.
- Command ids: every one folded, and every one a folded record names in ``supersedes``, is
  taken (a worker never publishes it again).

:class:`JobControl` folds one job's commands; :class:`ControlState` a whole topic's decoded
records, job by job. The topic is keyed by ``job_id``, so partition order is a job's order;
records of different jobs may interleave in any way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from streams.control.commands import PLAN_RECORDS, RETENTION_RECORD, ControlCommand, command_from_record

__all__ = ["PLAN_RECORDS", "ControlState", "JobControl", "fold_control"]


@dataclass
class JobControl:
    """One job's control commands folded in topic order (the rules of the module doc).

    It may start from what a job already knows: ``halted``, and ``applied``, the command ids it
    already acted on — a halt or release among them is not counted again (a halt redelivered
    after its release does not halt again). Plan records always count, applied or not: the
    last one is in force. Positions (``plan_at``, ``halt_changed_at``) count the commands
    folded, from 0.
    """

    halted: bool = False
    applied: frozenset[str] | set[str] = frozenset()
    #: the job's last plan record (a PlanCleared too) and its position
    last_plan: ControlCommand | None = None
    plan_at: int | None = None
    #: the HaltCommand in force (None: not halted, or halted before the fold began)
    halt: ControlCommand | None = None
    #: the position of the halt or release that last changed ``halted``
    halt_changed_at: int | None = None
    #: every command id folded and every one they supersede
    command_ids: set[str] = field(default_factory=set)
    #: the command ids a folded record supersedes
    superseded_ids: set[str] = field(default_factory=set)
    folded: int = 0

    @property
    def plan(self) -> ControlCommand | None:
        """The plan in force: the last plan record, unless it is a ``PlanCleared``."""
        if self.last_plan is None or self.last_plan.kind == "PlanCleared":
            return None
        return self.last_plan

    def add(self, cmd: ControlCommand) -> None:
        at = self.folded
        self.folded += 1
        self.command_ids.add(cmd.command_id)
        if cmd.is_plan and cmd.command_id not in self.superseded_ids:  # (else a copy: see the module doc)
            self.last_plan, self.plan_at = cmd, at
        if cmd.supersedes:
            # superseded on the topic already: a replay that starts before the record that
            # superseded it must not publish it after its successor
            self.command_ids.add(cmd.supersedes)
            self.superseded_ids.add(cmd.supersedes)
        if cmd.is_halt and cmd.command_id not in self.applied:
            halted = not cmd.is_release
            if halted != self.halted:
                self.halted, self.halt_changed_at = halted, at
            self.halt = cmd if halted else None

    def superseded(self, at: int) -> bool:
        """The plan record folded at ``at`` is superseded by a later one."""
        return at != self.plan_at

    def plan_row(self) -> dict[str, Any] | None:
        """The plan in force in the shape of SPEC §11, with its ``command_id``."""
        cmd = self.plan
        if cmd is None:
            return None
        row: dict[str, Any] = {
            "job_id": cmd.job_id,
            "incarnation": cmd.incarnation,
            "action": cmd.action,
            "target_checkpoint_id": cmd.target_checkpoint_id,
            "target_step": cmd.target_step,
            "incident_ids": sorted(cmd.incident_ids),
            "command_id": cmd.command_id,
        }
        if cmd.kind == "QuarantineNotice":
            row["quarantined_checkpoint_ids"] = sorted(cmd.quarantined_checkpoint_ids)
        return row

    def halt_row(self) -> dict[str, Any] | None:
        cmd = self.halt
        if cmd is None:
            return None
        return {"job_id": cmd.job_id, "reason": cmd.reason, "detail": cmd.detail or ""}


@dataclass
class ControlState:
    """The fold of ``lineage.control``: a :class:`JobControl` per job.

    Feed it the decoded records in topic order (:meth:`add`). Records that do not decode (or
    decode to something malformed) are counted in ``undecodable``; decoded records of other
    types in ``ignored``.
    """

    jobs: dict[str, JobControl] = field(default_factory=dict)
    records: int = 0
    undecodable: int = 0
    ignored: int = 0
    undecodable_reasons: Counter[str] = field(default_factory=Counter)
    #: whether records were verified before the fold (a reader given a trusted keyring), and
    #: those left out because they did not verify (each a dict: record, job_id, command_id,
    #: reason, detail, partition, offset)
    signatures_checked: bool = False
    unverified: list[dict[str, Any]] = field(default_factory=list)
    #: the ids of the RetentionNotices on the topic (no command, but published: a recovering
    #: worker must not publish them again)
    notice_ids: set[str] = field(default_factory=set)

    def add(self, name: str, record: Mapping[str, Any]) -> None:
        try:
            cmd = command_from_record(name, record)
        except (KeyError, TypeError, AttributeError):
            self.add_undecodable("MALFORMED")
            return
        self.records += 1
        if cmd is None:
            self.ignored += 1
            if name == RETENTION_RECORD and isinstance(record.get("command_id"), str):
                self.notice_ids.add(record["command_id"])
            return
        self.jobs.setdefault(cmd.job_id, JobControl()).add(cmd)

    def add_unverified(self, row: dict[str, Any]) -> None:
        """A record left out of the fold: its signature did not verify."""
        self.records += 1
        self.unverified.append(row)

    def add_undecodable(self, reason: str = "UNDECODABLE") -> None:
        self.records += 1
        self.undecodable += 1
        self.undecodable_reasons[reason] += 1

    @property
    def plans(self) -> dict[str, dict[str, Any]]:
        """job_id -> the plan in force (:meth:`JobControl.plan_row`), for the jobs with one."""
        rows = {job_id: job.plan_row() for job_id, job in self.jobs.items()}
        return {job_id: row for job_id, row in rows.items() if row is not None}

    @property
    def halts(self) -> dict[str, dict[str, Any]]:
        """job_id -> the halt in force (``job_id``, ``reason``, ``detail``), for halted jobs."""
        rows = {job_id: job.halt_row() for job_id, job in self.jobs.items()}
        return {job_id: row for job_id, row in rows.items() if row is not None}

    @property
    def command_ids(self) -> set[str]:
        """Every command id on the topic (a RetentionNotice's too), or superseded by one there."""
        return set(self.notice_ids).union(*(job.command_ids for job in self.jobs.values()))

    @property
    def last_plans(self) -> dict[str, tuple[str, str]]:
        """job_id -> (record name, command_id) of the job's last plan record."""
        return {job_id: (cmd.kind, cmd.command_id) for job_id, cmd in self.in_force.items()}

    @property
    def in_force(self) -> dict[str, ControlCommand]:
        """job_id -> the job's last plan record (its ``record`` as decoded)."""
        return {job_id: job.last_plan for job_id, job in self.jobs.items() if job.last_plan is not None}

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        """``{"plans": [...], "halts": [...]}``, each sorted by ``job_id`` (SPEC §11 shapes,
        plans with their ``command_id``)."""
        plans, halts = self.plans, self.halts
        return {"plans": [plans[j] for j in sorted(plans)], "halts": [halts[j] for j in sorted(halts)]}


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
