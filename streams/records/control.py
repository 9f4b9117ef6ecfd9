"""The records of ``lineage.control``: the referee's plans (``RollbackCommand``,
``QuarantineNotice``, ``PlanCleared``), halts (``HaltCommand``, a release included) and
retention notices (``RetentionNotice``, v9: which checkpoints a job may delete, SPEC §13)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

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


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionNotice(Record):
    """The referee's retention view of one job's checkpoints not deleted yet (SPEC §13): each of
    ``deletable`` and ``kept`` is ``{checkpoint_id, reason, by}``, oldest first."""

    NAME = "RetentionNotice"

    command_id: str
    job_id: str
    cohort_id: str | None = None
    version: int
    deletable: tuple[Mapping[str, Any], ...]
    kept: tuple[Mapping[str, Any], ...]
    watermark_ms: int
    settle_horizon_ms: int
    issued_ts: int
    signature: bytes | None = None
    key_id: str | None = None
