"""What the divergence agent publishes for each core decision (SPEC §3, §10).

Pure mapping: a decision of :mod:`streams.core.decide` (plus the cohort, the processor's clock
and the commitment root it was computed from) becomes records for the output topics, each built
as its typed record (:mod:`streams.records`) and carried as the plain value the codec encodes
(:meth:`Emission.of`; :attr:`Emission.typed` gives the record back). The live referee and the
audit use the same mapping, so an audit can recompute every command and manifest (all fields
but the processor's timestamps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.decide import (
    AlertRaised,
    CheckpointTainted,
    Decision,
    HaltIssued,
    IncidentChanged,
    PlanChanged,
)
from streams.core.ids import hash_parts
from streams.core.state import Checkpoint
from streams.core.retention import RetentionChanged
from streams.records import (RECORD_TYPES, Alert, CheckpointStatus, DivergenceManifest, HaltCommand, PlanCleared,
                             QuarantineNotice, Record, RetentionNotice, RollbackCommand)


@dataclass(frozen=True, slots=True)
class Emission:
    """One record for one output topic. ``topic`` names a field of ``TopicNames``."""

    topic: str
    key: str
    record: str
    value: dict[str, Any]

    @classmethod
    def of(cls, topic: str, key: str, record: Record) -> "Emission":
        """The emission of a typed record: its name, and its value as the codec encodes it."""
        return cls(topic, key, record.NAME, record.to_value())

    @property
    def typed(self) -> Record:
        """The typed record of this emission (:mod:`streams.records`)."""
        return RECORD_TYPES[self.record].from_value(self.value)

    @property
    def command_id(self) -> str | None:
        return self.value.get("command_id") if self.topic == "control" else None


def clear_command_id(job_id: str, incarnation: int, supersedes: str) -> str:
    return hash_parts(("CLEAR", job_id, incarnation, supersedes))


def alert_id(kind: str, *parts: object) -> str:
    return hash_parts(("ALERT", kind, *parts))


def plan_emission(d: PlanChanged, cohort_id: str | None, incarnation: int, ts: int,
                  commitment_root: str | None) -> Emission | None:
    plan = d.plan
    if plan is None:
        if d.supersedes is None:
            return None
        return Emission.of("control", d.job_id, PlanCleared(
            command_id=clear_command_id(d.job_id, incarnation, d.supersedes), job_id=d.job_id, cohort_id=cohort_id,
            incarnation=incarnation, supersedes=d.supersedes, reason="the job's current ancestry is clean",
            issued_ts=ts))
    if plan["action"] == "QUARANTINE":
        return Emission.of("control", d.job_id, QuarantineNotice(
            command_id=plan["command_id"], job_id=d.job_id, cohort_id=cohort_id, incarnation=plan["incarnation"],
            incident_ids=tuple(plan["incident_ids"]),
            quarantined_checkpoint_ids=tuple(plan.get("quarantined_checkpoint_ids", ())),
            supersedes=d.supersedes, issued_ts=ts, commitment_root=commitment_root))
    return Emission.of("control", d.job_id, RollbackCommand(
        command_id=plan["command_id"], job_id=d.job_id, cohort_id=cohort_id, incarnation=plan["incarnation"],
        action=plan["action"], target_checkpoint_id=plan["target_checkpoint_id"], target_step=plan["target_step"],
        incident_ids=tuple(plan["incident_ids"]), supersedes=d.supersedes, issued_ts=ts,
        commitment_root=commitment_root))


def halt_emission(d: HaltIssued, ts: int, seq: int | None = None) -> Emission:
    return Emission.of("control", d.job_id, HaltCommand(
        command_id=d.command_id, job_id=d.job_id, cohort_id=d.cohort_id, reason=d.reason, detail=d.detail, seq=seq,
        issued_ts=ts))


def alert_emission(d: AlertRaised, cohort_key: str, ts: int) -> Emission:
    return Emission.of("alerts", cohort_key, Alert(
        alert_id=alert_id(d.kind, d.cohort_id, d.job_id, d.checkpoint_id, d.incident_id, d.message), kind=d.kind,
        cohort_id=d.cohort_id, job_id=d.job_id, checkpoint_id=d.checkpoint_id, incident_id=d.incident_id,
        message=d.message, details={str(k): str(v) for k, v in d.details.items()}, ts=ts))


def manifest_plan(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "job_id": p["job_id"],
        "incarnation": p["incarnation"],
        "action": p["action"],
        "target_checkpoint_id": p["target_checkpoint_id"],
        "target_step": p["target_step"],
        "incident_ids": list(p["incident_ids"]),
        "quarantined_checkpoint_ids": list(p.get("quarantined_checkpoint_ids", [])),
        "command_id": p["command_id"],
    }


def manifest_emission(d: IncidentChanged, version: int, snapshot: list[dict[str, Any]], ts: int,
                      commitment_root: str | None) -> Emission:
    v = d.view
    closed = d.change in ("REATTRIBUTED", "SUPERSEDED")
    manifest = DivergenceManifest(
        incident_id=d.incident_id, version=version, cohort_id=v.get("cohort_id"), root=dict(v["root"]),
        verdict=v["verdict"], attributed_to=tuple(d.merged_into),
        contaminated=() if closed else tuple(
            {"job_id": c["job_id"], "incarnation": c["incarnation"],
             "via_checkpoint_id": c["via_checkpoint_id"] or "", "path": list(c.get("path") or [])}
            for c in v["contaminated"]),
        secondary_divergences=() if closed else tuple(dict(s) for s in v["secondary_divergences"]),
        tainted_checkpoints=() if closed else tuple(v["tainted_checkpoints"]),
        plans=() if closed else tuple(manifest_plan(p) for p in v.get("plans", [])),
        concurrency_snapshot=tuple(snapshot), commitment_root=commitment_root, ts=ts)
    return Emission.of("manifests", d.incident_id, manifest)


_ALERT_OF_CHANGE = {
    "OPENED": ("INCIDENT_OPENED", "incident opened: {job} inc {inc} diverged at step {onset} ({verdict})"),
    "WIDENED": ("INCIDENT_WIDENED", "incident widened: {n} contaminated incarnation(s)"),
    "REATTRIBUTED": ("REATTRIBUTED", "divergence of {job} inc {inc} is a symptom of {into}"),
}


def incident_alert(d: IncidentChanged, cohort_key: str, ts: int) -> Emission | None:
    spec = _ALERT_OF_CHANGE.get(d.change)
    if spec is None:
        return None
    kind, text = spec
    root = d.view["root"]
    msg = text.format(job=root["job_id"], inc=root["incarnation"], onset=root["onset_step"],
                      verdict=d.view["verdict"], n=len(d.view.get("contaminated", [])),
                      into=", ".join(x[:12] for x in d.merged_into))
    return alert_emission(AlertRaised(kind, root["job_id"], d.view.get("cohort_id"), msg,
                                      incident_id=d.incident_id,
                                      details={"change": d.change}), cohort_key, ts)


def retention_command_id(job_id: str, version: int) -> str:
    return hash_parts(("RETENTION", job_id, version))


def retention_emission(d: RetentionChanged, ts: int) -> Emission:
    """The RetentionNotice of a job's changed retention view (SPEC §13), on lineage.control."""
    def rows(xs: tuple[tuple[str, str, str | None], ...]) -> tuple[dict[str, Any], ...]:
        return tuple({"checkpoint_id": c, "reason": why, "by": by} for c, why, by in xs)

    return Emission.of("control", d.job_id, RetentionNotice(
        command_id=retention_command_id(d.job_id, d.version), job_id=d.job_id, cohort_id=d.cohort_id,
        version=d.version, deletable=rows(d.deletable), kept=rows(d.kept), watermark_ms=d.watermark_ms,
        settle_horizon_ms=d.horizon_ms, issued_ts=ts))


def checkpoint_status(ck: Checkpoint, cohort_id: str | None, incident_ids: list[str], ts: int) -> Emission:
    """The CheckpointStatus of ``ck`` on lineage.checkpoints. The referee publishes one for
    every checkpoint written (a sixth of a training cohort's events), so its value is built
    here as the plain value :meth:`Emission.of` would give of the typed record (a third of
    the cost; ``tests/unit/test_referee.py`` holds the two equal);
    :func:`checkpoint_status_typed` is that typed way."""
    return Emission("checkpoints", ck.id, "CheckpointStatus", {
        "checkpoint_id": ck.id, "job_id": ck.job_id, "cohort_id": cohort_id, "incarnation": ck.incarnation,
        "step": ck.step, "content_hash": ck.content_hash, "status": "TAINTED" if ck.sources else "CLEAN",
        "incident_ids": sorted(incident_ids), "ts": ts})


def checkpoint_status_typed(ck: Checkpoint, cohort_id: str | None, incident_ids: list[str], ts: int) -> Emission:
    """:func:`checkpoint_status` built through its typed record (:mod:`streams.records`)."""
    return Emission.of("checkpoints", ck.id, CheckpointStatus(
        checkpoint_id=ck.id, job_id=ck.job_id, cohort_id=cohort_id, incarnation=ck.incarnation, step=ck.step,
        content_hash=ck.content_hash, status="TAINTED" if ck.sources else "CLEAN",
        incident_ids=tuple(sorted(incident_ids)), ts=ts))


__all__ = [
    "Emission",
    "alert_emission",
    "alert_id",
    "checkpoint_status",
    "checkpoint_status_typed",
    "clear_command_id",
    "halt_emission",
    "incident_alert",
    "manifest_emission",
    "plan_emission",
    "retention_command_id",
    "retention_emission",
    "CheckpointTainted",
    "Decision",
]
