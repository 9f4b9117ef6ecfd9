"""What the report says, as plain data: per cohort its lanes (one per job, one row per
incarnation), checkpoints, consumption edges, divergence onsets, rollbacks and commands, read
off the folded state by :mod:`streams.report.build`. No drawing here: the model is what the tests
check against the final state, and what the renderers draw."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from streams.core.cohorts import UNREGISTERED_COHORT


@dataclass
class CheckpointMark:
    checkpoint_id: str
    job_id: str
    incarnation: int
    step: int
    seq: int
    tainted: bool
    incident_ids: list[str]          # root incidents whose taint reaches it
    abandoned: bool                  # written in a stretch the job's current weights do not descend from
    target_of: list[str] = field(default_factory=list)       # jobs whose final plan targets it
    quarantined_by: list[str] = field(default_factory=list)  # jobs whose QUARANTINE plan lists it
    aliases: str | None = None       # T3: the first tainted checkpoint of another job it copies
    aliased: list[str] = field(default_factory=list)  # T3: every one it copies (ts, then id; SPEC §5)
    restored_by: list[str] = field(default_factory=list)     # jobs that rolled back to it (executed)

    @property
    def is_target(self) -> bool:
        return bool(self.target_of)

    @property
    def marked_target(self) -> bool:
        """Drawn as a rollback target: a final plan's, or one a rollback already restored."""
        return bool(self.target_of or self.restored_by)


@dataclass
class IncarnationSpan:
    job_id: str
    number: int
    row: int                         # the figure row (0 = top)
    start_step: int
    end_step: int
    start_kind: str                  # start | restore | scratch (from the pretrained model) | orphan
    abandoned_from: int | None       # step after which the stretch is abandoned (None: all live)
    in_ancestry: bool                # the current weights descend from (part of) it
    progress: list[tuple[int, float]] = field(default_factory=list)  # (step, loss)
    onset_step: int | None = None
    finished: str | None = None      # JobFinished status

    @property
    def fully_abandoned(self) -> bool:
        return not self.in_ancestry


@dataclass
class Edge:
    """A consumption (or, ``kind == "alias"``, an unrecorded copy found by content, SPEC §5 T3)."""

    source_checkpoint_id: str
    source_job_id: str | None        # None: the source was never recorded (untraceable)
    source_incarnation: int | None
    source_step: int | None
    consumer_job_id: str
    consumer_incarnation: int
    consumer_step: int
    seq: int
    mode: str
    kind: str                        # base | restore | consume | alias
    tainting: bool                   # any mode but EVAL_ONLY
    carries_taint: bool              # tainting and the source checkpoint is tainted

    @property
    def resolved(self) -> bool:
        return self.source_job_id is not None


@dataclass
class DivergenceMark:
    job_id: str
    incarnation: int
    onset_step: int
    verdict: str                     # INTERNAL | EXTERNAL | INDETERMINATE
    incident_ids: list[str]          # its own incident (root) or the ones it is attributed to
    root: bool
    detected_onset: int | None
    reported_onset: int | None
    detectors: list[str] = field(default_factory=list)


@dataclass
class RollbackMark:
    job_id: str
    from_incarnation: int | None
    to_incarnation: int
    from_step: int | None            # where the abandoned incarnation stood
    restored_checkpoint_id: str | None   # None: back to the base (or, from_scratch, the pretrained model)
    restored_job_id: str | None
    resumed_step: int
    command_id: str | None
    from_scratch: bool = False       # restarted from the pretrained base_model alone (SPEC §4)

    @property
    def restored_label(self) -> str:
        """What it went back to: the checkpoint, ``base`` (a null restore: the job's base,
        re-consumed), or the pretrained model (a restart from scratch)."""
        if self.restored_checkpoint_id:
            return self.restored_checkpoint_id
        return "pretrained model (from scratch)" if self.from_scratch else "base"


@dataclass
class Lane:
    job_id: str
    base_model: str | None
    base_checkpoint_id: str | None
    incarnations: list[IncarnationSpan]
    checkpoints: list[CheckpointMark]
    plan: dict[str, Any] | None
    halt: dict[str, Any] | None
    finished: str | None             # status of the current incarnation's JobFinished

    @property
    def rows(self) -> int:
        return len(self.incarnations)


@dataclass
class CohortModel:
    cohort_id: str
    events: int
    lanes: list[Lane]
    edges: list[Edge]
    divergences: list[DivergenceMark]
    rollbacks: list[RollbackMark]
    final: dict[str, Any]            # SPEC §11 for this cohort
    incidents: list[dict[str, Any]]  # incident views (with tainted checkpoints and plans)
    commands: list[dict[str, Any]] = field(default_factory=list)   # from the control topic

    @property
    def label(self) -> str:
        return self.cohort_id if self.cohort_id != UNREGISTERED_COHORT else "(unregistered)"

    def lane(self, job_id: str) -> Lane | None:
        return next((ln for ln in self.lanes if ln.job_id == job_id), None)

    def checkpoint(self, checkpoint_id: str) -> CheckpointMark | None:
        for ln in self.lanes:
            for ck in ln.checkpoints:
                if ck.checkpoint_id == checkpoint_id:
                    return ck
        return None

    @property
    def tainted_checkpoints(self) -> list[str]:
        return sorted(ck.checkpoint_id for ln in self.lanes for ck in ln.checkpoints if ck.tainted)

    @property
    def targets(self) -> dict[str, str]:
        """job id -> the checkpoint its final plan goes back to (ROLLBACK, RESTART_FROM_BASE)."""
        return {ln.job_id: ln.plan["target_checkpoint_id"] for ln in self.lanes
                if ln.plan is not None and ln.plan.get("target_checkpoint_id")}

    def counts(self) -> dict[str, int]:
        return {
            "events": self.events,
            "lanes": len(self.lanes),
            "incarnations": sum(ln.rows for ln in self.lanes),
            "checkpoints": sum(len(ln.checkpoints) for ln in self.lanes),
            "tainted_checkpoints": len(self.tainted_checkpoints),
            "consumptions": sum(1 for e in self.edges if e.kind != "alias"),
            "tainting_consumptions": sum(1 for e in self.edges if e.kind != "alias" and e.carries_taint),
            "aliases": sum(1 for e in self.edges if e.kind == "alias"),
            "divergences": len(self.divergences),
            "rollbacks": len(self.rollbacks),
            "incidents": len(self.final["incidents"]),
            "plans": len(self.final["plans"]),
            "targets": len(self.targets),
            "halts": len(self.final["halts"]),
            "alerts": len(self.final["alerts"]),
            "commands": len(self.commands),
        }


@dataclass
class ReportModel:
    source: str
    origin: str                      # jsonl | archive | kafka
    meta: dict[str, Any]
    events: int                      # events folded
    undecodable: int
    cohorts: dict[str, CohortModel]
    final: dict[str, Any]            # SPEC §11, every cohort
    control_records: int = 0
    control_undecodable: int = 0
    #: the dead letters of the log (``lineage.dlq``), in log order: see :func:`~streams.report.log_topics.dead_letters`
    dead_letters: list[dict[str, Any]] = field(default_factory=list)

    def order(self) -> list[str]:
        """Cohorts largest first (events), then by id; the unregistered bucket last."""
        return sorted(self.cohorts, key=lambda c: (c == UNREGISTERED_COHORT, -self.cohorts[c].events, c))

    def counts(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "origin": self.origin,
            "events": self.events,
            "undecodable": self.undecodable,
            "control_records": self.control_records,
            "dead_letters": len(self.dead_letters),
            "cohorts": {c: self.cohorts[c].counts() for c in self.order()},
        }


def model_dict(model: ReportModel) -> dict[str, Any]:
    """The model as JSON-able data (for ``--json`` and debugging)."""
    return {
        **model.counts(),
        "lanes": {c: [asdict(ln) for ln in model.cohorts[c].lanes] for c in model.order()},
    }
