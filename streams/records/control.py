"""The records of ``lineage.control``: the referee's plans (``RollbackCommand``,
``QuarantineNotice``, ``PlanCleared``) and halts (``HaltCommand``, a release included)."""

from __future__ import annotations

from dataclasses import dataclass

from streams.records.base import Record


@dataclass(frozen=True, slots=True, kw_only=True)
class RollbackCommand(Record):
    NAME = "RollbackCommand"

    command_id: str
    job_id: str
    cohort_id: str | None = None
    incarnation: int
    #: ROLLBACK, RESTART_FROM_BASE or RESTART_FROM_SCRATCH
    action: str
    target_checkpoint_id: str | None = None
    target_step: int | None = None
    incident_ids: tuple[str, ...]
    supersedes: str | None = None
    issued_ts: int
    commitment_root: str | None = None
    signature: bytes | None = None
    key_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantineNotice(Record):
    NAME = "QuarantineNotice"

    command_id: str
    job_id: str
    cohort_id: str | None = None
    incarnation: int
    incident_ids: tuple[str, ...]
    quarantined_checkpoint_ids: tuple[str, ...]
    supersedes: str | None = None
    issued_ts: int
    commitment_root: str | None = None
    signature: bytes | None = None
    key_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanCleared(Record):
    NAME = "PlanCleared"

    command_id: str
    job_id: str
    cohort_id: str | None = None
    incarnation: int
    supersedes: str
    reason: str
    issued_ts: int
    signature: bytes | None = None
    key_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HaltCommand(Record):
    NAME = "HaltCommand"

    command_id: str
    job_id: str
    cohort_id: str | None = None
    #: the halt reason (SPEC §8), or RELEASE for an operator's release
    reason: str
    detail: str
    seq: int | None = None
    issued_ts: int
    signature: bytes | None = None
    key_id: str | None = None
