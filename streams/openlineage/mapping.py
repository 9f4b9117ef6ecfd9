"""traintrace's events and the referee's records -> OpenLineage RunEvents (spec 2-0-2), as dicts.

Pure and incremental: :class:`OpenLineageMapper` is fed one event (``lineage.events``) or one
record (``lineage.manifests``, ``lineage.control``, ``lineage.checkpoints``) at a time and answers
the RunEvents it makes, in the order to emit them. No I/O; the emitter sends them.

The model:

- a job **incarnation** (SPEC §2) is an OpenLineage **run** of the job named ``job_id`` in the
  configured namespace. Its ``runId`` is a UUID (v5) of (namespace, job_id, incarnation), so a
  replay of the same topics gives the same ids and a backend merges the duplicates;
- ``JobStarted`` -> START; ``JobFinished`` -> COMPLETE / FAIL / ABORT (SUCCEEDED / FAILED /
  CANCELLED); ``CheckpointWritten`` -> RUNNING with the checkpoint as an **output** dataset;
  ``CheckpointConsumed`` -> RUNNING with the source checkpoint as an **input** carrying its mode
  (``traintrace_consumption``); ``DivergenceReported`` -> RUNNING with ``traintrace_divergence``;
  ``CheckpointDeleted`` (SPEC §13) -> RUNNING with the checkpoint as an **output** carrying the
  standard ``lifecycleStateChange`` facet ``DROP``.
  ``Progress`` emits nothing by itself (one per step would flood a backend): the last progress
  rides along on the next event as ``traintrace_progress``;
- a ``RolledBack`` (its incarnation is the new one) ends the previous incarnation's run with
  **ABORT** — the run was stopped from outside before it finished and the weights it made after
  the restore point are thrown away; COMPLETE would claim it succeeded — and STARTs the new
  incarnation's run, with the restored checkpoint as an input (mode RESTORE) and the standard
  ``parent`` facet naming the previous incarnation's run (``root``: incarnation 0's). The parent
  facet says "spawned from"; a rollback's next incarnation is spawned by the previous one's
  rollback, the nearest reading, and Marquez shows the chain. The exact meaning (previous run,
  restored checkpoint, command) is in ``traintrace_incarnation`` for readers that need it;
- the referee's records come as OTHER events (metadata about a run, also after it ended):
  ``DivergenceManifest`` -> ``traintrace_divergence`` on the root incarnation and
  ``traintrace_incidents`` on each incarnation it touches (root, contaminated, secondary);
  ``RollbackCommand`` / ``QuarantineNotice`` / ``PlanCleared`` -> ``traintrace_plan``;
  ``HaltCommand`` -> ``traintrace_halt``; ``CheckpointStatus`` TAINTED (and CLEAN again after a
  taint) -> the checkpoint as an output with ``traintrace_taint``. The manifests carry all an
  incident alert on ``lineage.alerts`` says and more (incarnations, contamination), so alerts are
  not read.

Checkpoints are datasets named from their URI after the OpenLineage naming conventions
(:func:`dataset_of_uri`); the content hash is the standard ``version`` facet and sits in
``traintrace_checkpoint``. A checkpoint consumed before its ``CheckpointWritten`` was seen is named
``checkpoint/<id>`` in the ``traintrace`` namespace.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping
from urllib.parse import urlsplit

from streams.core.events import (
    CheckpointConsumed,
    CheckpointDeleted,
    CheckpointWritten,
    DivergenceReported,
    Event,
    JobFinished,
    JobStarted,
    Progress,
    RolledBack,
    parse_event,
)
from streams.control.commands import action_of, plan_content
from streams.openlineage import facets as F
from streams.records import (CheckpointStatus, DivergenceManifest, HaltCommand, PlanCleared, QuarantineNotice, Record,
                            RollbackCommand)

RUN_EVENT_SCHEMA = f"https://openlineage.io/spec/{F.SPEC_VERSION}/OpenLineage.json#/$defs/RunEvent"
#: the UUID namespace of traintrace's run ids (fixed forever: ids must not change across releases)
RUN_ID_NAMESPACE = uuid.UUID("6f1d3c2e-8a4b-5c1e-9d7f-2b3a4c5d6e7f")
#: dataset namespace of a checkpoint whose URI is not known (yet)
UNKNOWN_CHECKPOINT_NAMESPACE = "traintrace"
_END_OF_STATUS = {"SUCCEEDED": "COMPLETE", "FAILED": "FAIL", "CANCELLED": "ABORT"}
#: object stores: the name is the key, without the leading slash (OpenLineage naming)
_OBJECT_STORES = {"s3", "s3a", "s3n", "gs", "gcs", "wasbs", "abfss", "r2", "oss"}


def run_id(namespace: str, job_id: str, incarnation: int) -> str:
    """The deterministic runId of ``job_id``'s incarnation ``incarnation``."""
    return str(uuid.uuid5(RUN_ID_NAMESPACE, f"{namespace}\x00{job_id}\x00{incarnation}"))


def event_time(ts_ms: int) -> str:
    """ISO 8601 UTC with milliseconds, e.g. ``2025-10-09T08:53:21.000Z``."""
    when = datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dataset_of_uri(uri: str) -> tuple[str, str] | None:
    """(namespace, name) of a checkpoint URI: ``file:///a/X.pt`` -> (``file``, ``/a/X.pt``),
    ``s3://bucket/k/X.pt`` -> (``s3://bucket``, ``k/X.pt``), ``hdfs://h:9000/p`` -> (``hdfs://h:9000``,
    ``/p``), a bare absolute path -> (``file``, path); None when the URI names no location."""
    if uri.startswith("/"):
        return "file", uri
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if not scheme:
        return None
    if scheme == "file":
        if parts.netloc in ("", "localhost"):
            return ("file", parts.path) if parts.path else None
        return f"file://{parts.netloc}", parts.path or "/"
    if not parts.netloc:
        return (scheme, parts.path) if parts.path else None
    name = parts.path.lstrip("/") if scheme in _OBJECT_STORES else parts.path
    return f"{scheme}://{parts.netloc}", name or "/"


@dataclass
class _Run:
    """What the mapper knows of one incarnation."""

    started: bool = False
    ended: bool = False
    incarnation: dict[str, Any] = field(default_factory=dict)  # traintrace_incarnation fields
    progress: dict[str, Any] | None = None
    reports: int = 0
    incidents: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Checkpoint:
    namespace: str
    name: str
    fields: dict[str, Any]  # traintrace_checkpoint fields

    def dataset(self, **extra_facets: dict[str, Any]) -> dict[str, Any]:
        facets = {"traintrace_checkpoint": F.facet("traintrace_checkpoint", **self.fields)}
        if self.fields.get("contentHash"):
            facets["version"] = F.dataset_version(self.fields["contentHash"])
        return {"namespace": self.namespace, "name": self.name, "facets": {**facets, **extra_facets}}


class OpenLineageMapper:
    """Events and records in, RunEvent dicts out (see the module's docstring); keeps what it
    needs across calls (runs started/ended, checkpoint URIs, incidents per run, what was seen)."""

    def __init__(self, namespace: str = "traintrace") -> None:
        self.namespace = namespace
        self._runs: dict[tuple[str, int], _Run] = {}
        self._current: dict[str, int] = {}
        self._checkpoints: dict[str, _Checkpoint] = {}
        self._seen_events: set[tuple[str, int]] = set()
        self._seen_records: set[tuple[Any, ...]] = set()

    # ------------------------------------------------------------------ events

    def on_event(self, event: Event | Mapping[str, Any]) -> list[dict[str, Any]]:
        """The RunEvents of one traintrace event (a parsed event or its dict form); a duplicate
        (same job and seq) gives none."""
        if not isinstance(event, (JobStarted, Progress, CheckpointWritten, CheckpointConsumed,
                                  DivergenceReported, RolledBack, JobFinished, CheckpointDeleted)):
            event = parse_event(dict(event))
        key = (event.job_id, event.seq)
        if key in self._seen_events:
            return []
        self._seen_events.add(key)
        if event.incarnation >= self._current.get(event.job_id, 0):
            self._current[event.job_id] = event.incarnation
        handler = _EVENT_HANDLERS[type(event)]
        return handler(self, event)

    def _job_started(self, e: JobStarted) -> list[dict[str, Any]]:
        run = self._run(e.job_id, e.incarnation)
        run.incarnation.update(cohortId=e.cohort_id, baseModel=e.base_model, baseCheckpointId=e.base_checkpoint_id,
                               configHash=e.config_hash)
        inputs = self._inputs(e.base_checkpoint_id, "BASE", 0)
        if run.started:  # a START was synthesized for an earlier event: this one is metadata
            return [self._event("OTHER", e.job_id, e.incarnation, e.ts, inputs=inputs)]
        return self._start(e.job_id, e.incarnation, e.ts, inputs)

    def _progress(self, e: Progress) -> list[dict[str, Any]]:
        run = self._run(e.job_id, e.incarnation)
        run.reports += 1
        finite = e.loss is None or math.isfinite(e.loss)  # None: progress without a loss (v8)
        run.progress = {"step": e.step, "epoch": e.epoch, "loss": e.loss if finite else None,
                        "lossNonFinite": None if finite else ("NaN" if math.isnan(e.loss) else
                                                              ("Infinity" if e.loss > 0 else "-Infinity")),
                        "gradNorm": _finite(e.grad_norm), "lr": _finite(e.lr), "reports": run.reports}
        return []

    def _checkpoint_written(self, e: CheckpointWritten) -> list[dict[str, Any]]:
        where = dataset_of_uri(e.uri) or (UNKNOWN_CHECKPOINT_NAMESPACE, f"checkpoint/{e.checkpoint_id}")
        ck = _Checkpoint(where[0], where[1], {
            "checkpointId": e.checkpoint_id, "contentHash": e.content_hash, "uri": e.uri, "step": e.step,
            "epoch": e.epoch, "jobId": e.job_id, "incarnation": e.incarnation})
        self._checkpoints[e.checkpoint_id] = ck
        out = self._ensure_started(e.job_id, e.incarnation, e.ts)
        return out + [self._event(self._live(e), e.job_id, e.incarnation, e.ts, outputs=[ck.dataset()])]

    def _checkpoint_deleted(self, e: CheckpointDeleted) -> list[dict[str, Any]]:
        """A RUNNING event whose output is the checkpoint's dataset, DROPped (SPEC §13)."""
        ck = self._checkpoints.get(e.checkpoint_id) or _Checkpoint(
            UNKNOWN_CHECKPOINT_NAMESPACE, f"checkpoint/{e.checkpoint_id}",
            {"checkpointId": e.checkpoint_id, "jobId": e.job_id})
        drop = F.facet("lifecycleStateChange", lifecycleStateChange="DROP")
        out = self._ensure_started(e.job_id, e.incarnation, e.ts)
        return out + [self._event(self._live(e), e.job_id, e.incarnation, e.ts,
                                  outputs=[ck.dataset(lifecycleStateChange=drop)])]

    def _checkpoint_consumed(self, e: CheckpointConsumed) -> list[dict[str, Any]]:
        out = self._ensure_started(e.job_id, e.incarnation, e.ts)
        inputs = self._inputs(e.source_checkpoint_id, e.mode, e.step)
        return out + [self._event(self._live(e), e.job_id, e.incarnation, e.ts, inputs=inputs)]

    def _divergence_reported(self, e: DivergenceReported) -> list[dict[str, Any]]:
        out = self._ensure_started(e.job_id, e.incarnation, e.ts)
        divergence = F.facet("traintrace_divergence", onsetStep=e.onset_step, source="REPORTED",
                             detector=e.detector, reason=e.reason)
        return out + [self._event(self._live(e), e.job_id, e.incarnation, e.ts,
                                  facets={"traintrace_divergence": divergence})]

    def _rolled_back(self, e: RolledBack) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        prev = self._runs.get((e.job_id, e.incarnation - 1))
        if prev is not None and prev.started and not prev.ended:
            prev.ended = True
            prev.incarnation.update(endedBy="ROLLBACK")
            out.append(self._event("ABORT", e.job_id, e.incarnation - 1, e.ts))
        run = self._run(e.job_id, e.incarnation)
        base = self._run(e.job_id, 0).incarnation
        run.incarnation.update(cohortId=base.get("cohortId"), baseModel=base.get("baseModel"),
                               restoredCheckpointId=e.restored_checkpoint_id, resumedStep=e.resumed_step,
                               fromScratch=e.from_scratch, commandId=e.command_id,
                               previousRunId=run_id(self.namespace, e.job_id, e.incarnation - 1))
        if e.from_scratch:
            inputs: list[dict[str, Any]] = []
        elif e.restored_checkpoint_id is not None:
            inputs = self._inputs(e.restored_checkpoint_id, "RESTORE", e.resumed_step)
        else:
            inputs = self._inputs(base.get("baseCheckpointId"), "BASE", e.resumed_step)
        if run.started:
            return out + [self._event("OTHER", e.job_id, e.incarnation, e.ts, inputs=inputs)]
        return out + self._start(e.job_id, e.incarnation, e.ts, inputs)

    def _job_finished(self, e: JobFinished) -> list[dict[str, Any]]:
        out = self._ensure_started(e.job_id, e.incarnation, e.ts)
        run = self._run(e.job_id, e.incarnation)
        run.incarnation.update(endedBy="FINISHED", finishStatus=e.status)
        kind = _END_OF_STATUS[e.status] if not run.ended else "OTHER"
        run.ended = True
        ck = self._checkpoints.get(e.final_checkpoint_id or "")
        outputs = [ck.dataset()] if ck is not None else []
        return out + [self._event(kind, e.job_id, e.incarnation, e.ts, outputs=outputs)]

    # ------------------------------------------------------------------ the referee's records

    def on_record(self, record: Record) -> list[dict[str, Any]]:
        """The RunEvents of one referee record (typed: the follower decodes it at the codec
        boundary); records of other kinds, and one seen before, give none."""
        if isinstance(record, DivergenceManifest):
            return self._manifest(record)
        if isinstance(record, (RollbackCommand, QuarantineNotice, PlanCleared)):
            return self._plan(record)
        if isinstance(record, HaltCommand):
            return self._halt(record)
        if isinstance(record, CheckpointStatus):
            return self._checkpoint_status(record)
        return []

    def _manifest(self, v: DivergenceManifest) -> list[dict[str, Any]]:
        if not self._first(("manifest", v.incident_id, v.version)):
            return []
        root = v.root
        common = {"incidentId": v.incident_id, "verdict": v.verdict, "rootJobId": root["job_id"],
                  "rootIncarnation": root["incarnation"], "onsetStep": root["onset_step"],
                  "version": v.version, "attributedTo": list(v.attributed_to) or None,
                  "taintedCheckpoints": list(v.tainted_checkpoints) or None}
        touched: dict[tuple[str, int], dict[str, Any]] = {(root["job_id"], root["incarnation"]): {"role": "ROOT"}}
        for s in v.secondary_divergences:
            touched.setdefault((s["job_id"], s["incarnation"]), {"role": "SECONDARY"})
        for c in v.contaminated:
            touched.setdefault((c["job_id"], c["incarnation"]), {
                "role": "CONTAMINATED", "viaCheckpointId": c.get("via_checkpoint_id") or None,
                "path": list(c.get("path") or []) or None})
        out = []
        for (job, inc), entry in touched.items():
            self._run(job, inc).incidents[v.incident_id] = _compact({**common, **entry})
            extra = {}
            if entry["role"] == "ROOT" and not v.attributed_to:
                extra["traintrace_divergence"] = F.facet(
                    "traintrace_divergence", onsetStep=root["onset_step"], source="REFEREE",
                    incidentId=v.incident_id, verdict=v.verdict)
            out.append(self._event("OTHER", job, inc, v.ts, facets=extra, progress=False))
        return out

    def _plan(self, v: RollbackCommand | QuarantineNotice | PlanCleared) -> list[dict[str, Any]]:
        value = v.to_value()
        # a plan published again with new content under its id (a quarantine list that grew) is news
        if not self._first(("control", v.command_id, plan_content(value))):
            return []
        plan = F.facet("traintrace_plan", commandId=v.command_id, record=v.NAME, action=action_of(v.NAME, value),
                       targetCheckpointId=value.get("target_checkpoint_id"), targetStep=value.get("target_step"),
                       incidentIds=_list(value.get("incident_ids")),
                       quarantinedCheckpointIds=_list(value.get("quarantined_checkpoint_ids")),
                       supersedes=v.supersedes, reason=value.get("reason"),
                       issuedTime=event_time(v.issued_ts))
        return [self._event("OTHER", v.job_id, v.incarnation, v.issued_ts,
                            facets={"traintrace_plan": plan}, progress=False)]

    def _halt(self, v: HaltCommand) -> list[dict[str, Any]]:
        if not self._first(("control", v.command_id)):
            return []
        halt = F.facet("traintrace_halt", commandId=v.command_id, reason=v.reason,
                       detail=v.detail, issuedTime=event_time(v.issued_ts))
        inc = self._current.get(v.job_id, 0)
        return [self._event("OTHER", v.job_id, inc, v.issued_ts, facets={"traintrace_halt": halt},
                            progress=False)]

    def _checkpoint_status(self, v: CheckpointStatus) -> list[dict[str, Any]]:
        ids = tuple(sorted(v.incident_ids))
        ck_id, status = v.checkpoint_id, v.status
        tainted_before = ("taint", ck_id) in self._seen_records
        if status == "TAINTED":
            self._seen_records.add(("taint", ck_id))
        elif not tainted_before:
            return []  # a first CLEAN says nothing a backend needs
        if not self._first(("status", ck_id, status, ids)):
            return []
        ck = self._checkpoints.get(ck_id) or _Checkpoint(
            UNKNOWN_CHECKPOINT_NAMESPACE, f"checkpoint/{ck_id}",
            _compact({"checkpointId": ck_id, "contentHash": v.content_hash, "step": v.step,
                      "jobId": v.job_id, "incarnation": v.incarnation}))
        taint = F.facet("traintrace_taint", status=status, incidentIds=list(ids))
        return [self._event("OTHER", v.job_id, v.incarnation, v.ts,
                            outputs=[ck.dataset(traintrace_taint=taint)], progress=False)]

    # ------------------------------------------------------------------ building events

    def _run(self, job_id: str, incarnation: int) -> _Run:
        run = self._runs.get((job_id, incarnation))
        if run is None:
            run = self._runs[(job_id, incarnation)] = _Run()
            run.incarnation.update(jobId=job_id, incarnation=incarnation)
        return run

    def _first(self, key: tuple[Any, ...]) -> bool:
        if key in self._seen_records:
            return False
        self._seen_records.add(key)
        return True

    def _live(self, e: Event) -> str:
        return "OTHER" if self._run(e.job_id, e.incarnation).ended else "RUNNING"

    def _ensure_started(self, job_id: str, incarnation: int, ts: int) -> list[dict[str, Any]]:
        """A START for a run whose first event has not been seen (events out of order)."""
        return [] if self._run(job_id, incarnation).started else self._start(job_id, incarnation, ts, [])

    def _start(self, job_id: str, incarnation: int, ts: int, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self._run(job_id, incarnation).started = True
        facets = {}
        if incarnation > 0:
            facets["parent"] = F.parent_run(self.namespace, job_id, run_id(self.namespace, job_id, incarnation - 1),
                                            run_id(self.namespace, job_id, 0))
        return [self._event("START", job_id, incarnation, ts, facets=facets, inputs=inputs)]

    def _inputs(self, checkpoint_id: str | None, mode: str, step: int) -> list[dict[str, Any]]:
        if checkpoint_id is None:
            return []
        ck = self._checkpoints.get(checkpoint_id) or _Checkpoint(
            UNKNOWN_CHECKPOINT_NAMESPACE, f"checkpoint/{checkpoint_id}", {"checkpointId": checkpoint_id})
        dataset = ck.dataset()
        dataset["inputFacets"] = {"traintrace_consumption": F.facet("traintrace_consumption", mode=mode, step=step)}
        return [dataset]

    def _event(self, kind: str, job_id: str, incarnation: int, ts: int, *, facets: dict[str, Any] | None = None,
               inputs: list[dict[str, Any]] | None = None, outputs: list[dict[str, Any]] | None = None,
               progress: bool = True) -> dict[str, Any]:
        run = self._run(job_id, incarnation)
        run_facets: dict[str, Any] = {
            "traintrace_incarnation": F.facet("traintrace_incarnation", **run.incarnation)}
        if progress and run.progress is not None:
            run_facets["traintrace_progress"] = F.facet("traintrace_progress", **run.progress)
        if run.incidents:
            run_facets["traintrace_incidents"] = F.facet(
                "traintrace_incidents", incidents=[run.incidents[k] for k in sorted(run.incidents)])
        run_facets.update(facets or {})
        return {
            "eventType": kind,
            "eventTime": event_time(ts),
            "producer": F.PRODUCER,
            "schemaURL": RUN_EVENT_SCHEMA,
            "run": {"runId": run_id(self.namespace, job_id, incarnation), "facets": run_facets},
            "job": {"namespace": self.namespace, "name": job_id, "facets": {"jobType": F.job_type()}},
            # the client writes empty input/output facets: so do we, the dict is what goes out
            "inputs": [{"inputFacets": {}, **d} for d in inputs or []],
            "outputs": [{"outputFacets": {}, **d} for d in outputs or []],
        }


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _list(x: Any) -> list[Any] | None:
    return list(x) if x else None


def _compact(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


_EVENT_HANDLERS = {
    JobStarted: OpenLineageMapper._job_started,
    Progress: OpenLineageMapper._progress,
    CheckpointWritten: OpenLineageMapper._checkpoint_written,
    CheckpointConsumed: OpenLineageMapper._checkpoint_consumed,
    DivergenceReported: OpenLineageMapper._divergence_reported,
    RolledBack: OpenLineageMapper._rolled_back,
    JobFinished: OpenLineageMapper._job_finished,
    CheckpointDeleted: OpenLineageMapper._checkpoint_deleted,
}


__all__ = ["OpenLineageMapper", "RUN_EVENT_SCHEMA", "dataset_of_uri", "event_time", "run_id"]
