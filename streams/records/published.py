"""The other records the processor publishes: alerts, incident manifests, checkpoint statuses,
commitments, snapshots and their rounds, dead letters, and the routed batches of its input.
Nested structures (a manifest's root, plans, contamination; a commitment's heads) stay plain
mappings: their shapes are the schema's nested records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from streams.records.base import Record


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert(Record):
    NAME = "Alert"

    alert_id: str
    kind: str
    cohort_id: str | None = None
    job_id: str | None = None
    checkpoint_id: str | None = None
    incident_id: str | None = None
    message: str
    details: Mapping[str, str] = field(default_factory=dict)
    ts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DivergenceManifest(Record):
    NAME = "DivergenceManifest"

    incident_id: str
    version: int
    cohort_id: str | None = None
    root: Mapping[str, Any]
    #: INTERNAL, EXTERNAL or INDETERMINATE
    verdict: str
    attributed_to: tuple[str, ...]
    contaminated: tuple[Mapping[str, Any], ...]
    secondary_divergences: tuple[Mapping[str, Any], ...]
    tainted_checkpoints: tuple[str, ...]
    plans: tuple[Mapping[str, Any], ...]
    concurrency_snapshot: tuple[Mapping[str, Any], ...]
    commitment_root: str | None = None
    ts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointStatus(Record):
    NAME = "CheckpointStatus"

    checkpoint_id: str
    job_id: str
    cohort_id: str | None = None
    incarnation: int
    step: int
    content_hash: str
    #: CLEAN or TAINTED
    status: str
    incident_ids: tuple[str, ...] = ()
    ts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LineageCommitment(Record):
    NAME = "LineageCommitment"

    cohort_id: str
    root: str
    tree_size: int
    heads: tuple[Mapping[str, Any], ...]
    snapshot: tuple[Mapping[str, Any], ...]
    ts: int
    signature: bytes | None = None
    key_id: str | None = None
    log_root: str | None = None
    log_size: int | None = None
    input_partition: int | None = None
    input_offset: int | None = None
    checkpoint: str | None = None  # v10: the fold log as a signed C2SP checkpoint note


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortSnapshot(Record):
    NAME = "CohortSnapshot"

    cohort_id: str
    partition: int
    covers: int
    input_offset: int | None
    settled: bool
    format: int
    digest: str
    state: bytes
    ts: int
    signature: bytes | None = None
    key_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotRound(Record):
    NAME = "SnapshotRound"

    partition: int
    covers: int
    cohorts: int
    written: int
    ts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter(Record):
    NAME = "DeadLetter"

    original_topic: str
    original_partition: int
    original_offset: int
    original_key: bytes | None = None
    original_value: bytes
    reason: str
    error_kind: str
    ts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EventBatch(Record):
    NAME = "EventBatch"

    cohort_id: str
    events: tuple[Mapping[str, Any], ...]
    tick_ms: int | None = None
    grace_ms: int | None = None
    #: v9: with ``tick_ms``, the cohort's settle horizon (SPEC §13); None: no retention decision
    settle_horizon_ms: int | None = None
