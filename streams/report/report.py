"""``traintrace report``: the lineage of a cohort as a picture (PNG, SVG) and a self-contained HTML page.

Two layers:

* the **model** (:func:`build`): the log is folded through the core exactly as ``analyze``
  does (:class:`~streams.core.cohorts.CohortLineage`, events in the processor's order from
  :func:`~streams.audit.log.fold_order`), then per cohort the lanes (one per job, one row
  per incarnation), checkpoints (tainted or not, rollback targets, quarantined), consumption
  edges, divergence onsets, rollbacks, plans, halts, alerts and the commands the control topic
  actually carried are read off the folded state. No drawing here: the model is plain data and
  is what the tests check against the final state.
* the **renderers**: :func:`render_figure` draws one cohort with matplotlib (Agg), which
  :func:`render_png` and :func:`render_svg` serialise; :func:`render_html` writes one page with
  an inline SVG per cohort across the page, the incident summary below it, the log's dead
  letters and, when given, an audit verdict.
  The page loads nothing: no external CSS, scripts, fonts or images (the SVG's text is drawn as
  paths).
"""

from __future__ import annotations

import html
import io
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

from streams.codec import Codec
from streams.core.cohorts import UNREGISTERED_COHORT, CohortLineage
from streams.core.events import (
    CheckpointConsumed,
    DivergenceReported,
    JobFinished,
    Progress,
    RolledBack,
)
from streams.core.project import EXTERNAL, aliased_checkpoints, ancestry
from streams.core.state import INF, Config
from streams.audit.audit import finding_line
from streams.audit.log import AuditLog, fold_order

# ---------------------------------------------------------------------------------------- model


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
    #: the dead letters of the log (``lineage.dlq``), in log order: see :func:`dead_letters`
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


class _Side:
    """What the core state does not keep but the picture needs, per cohort, from accepted events."""

    def __init__(self) -> None:
        self.events = 0
        self.progress: dict[tuple[str, int], list[tuple[int, float]]] = {}
        self.consumed_step: dict[tuple[str, int], int] = {}      # (job, seq) -> consumer step
        self.rolled: dict[tuple[str, int], RolledBack] = {}      # (job, new incarnation)
        self.reported: dict[tuple[str, int], list[str]] = {}     # detectors
        self.finished: dict[tuple[str, int], str] = {}


def build(log: AuditLog, config: Config | None = None, codec: Codec | None = None,
          progress: Callable[[int], None] | None = None) -> ReportModel:
    """Fold ``log`` and gather, per cohort, what the lineage picture shows."""
    codec = codec or Codec()
    lineage = CohortLineage(config)
    side: dict[str, _Side] = {}
    events = undecodable = 0
    for item in fold_order(log, codec):
        ev = item.event
        if ev is None:
            undecodable += 1
            continue
        result = lineage.fold(ev)
        events += 1
        if progress is not None and events % 20000 == 0:
            progress(events)
        cohort = lineage.router.mapping.get(ev.job_id, UNREGISTERED_COHORT)
        s = side.setdefault(cohort, _Side())
        s.events += 1
        if not result.accepted:
            continue
        key = (ev.job_id, ev.incarnation)
        if isinstance(ev, Progress):
            s.progress.setdefault(key, []).append((ev.step, ev.loss))
        elif isinstance(ev, CheckpointConsumed):
            s.consumed_step[(ev.job_id, ev.seq)] = ev.step
        elif isinstance(ev, RolledBack):
            s.rolled[key] = ev
        elif isinstance(ev, DivergenceReported):
            s.reported.setdefault(key, []).append(ev.detector)
        elif isinstance(ev, JobFinished):
            s.finished[key] = ev.status
    lineage.finish_input()
    final = lineage.final_state()

    commands, ctl_total, ctl_bad = _control_commands(log, codec, lineage)
    cohorts: dict[str, CohortModel] = {}
    for cohort_id in sorted(lineage.cohorts):
        cm = _cohort_model(cohort_id, lineage.cohorts[cohort_id], side.get(cohort_id, _Side()))
        cm.commands = [c for c in commands if c["cohort_id"] == cohort_id]
        cohorts[cohort_id] = cm
    origin = "kafka" if log.source.startswith("kafka://") else (
        "jsonl" if log.meta.get("format") == "jsonl" else "archive")
    return ReportModel(log.source, origin, dict(log.meta), events, undecodable, cohorts, final,
                       ctl_total, ctl_bad, dead_letters(log, codec))


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


def _cohort_model(cohort_id: str, eng, side: _Side) -> CohortModel:
    st = eng.state
    final = eng.final_state()           # decides, so verdicts/plans/incidents are current
    verdicts = eng.verdicts
    plans: dict[str, dict[str, Any]] = eng.plans
    halts = {h["job_id"]: h for h in final["halts"]}

    def roots_of(sources) -> list[str]:
        out: set[str] = set()
        for s in sources or ():
            v = verdicts.get(s)
            if v is not None:
                out |= v.incident_ids
        return sorted(out)

    target_of: dict[str, list[str]] = {}
    quarantined_by: dict[str, list[str]] = {}
    for job_id, p in sorted(plans.items()):
        if p.get("target_checkpoint_id"):
            target_of.setdefault(p["target_checkpoint_id"], []).append(job_id)
        for ck_id in p.get("quarantined_checkpoint_ids", ()):
            quarantined_by.setdefault(ck_id, []).append(job_id)

    lanes: list[Lane] = []
    edges: list[Edge] = []
    rollbacks: list[RollbackMark] = []
    row = 0
    spans: dict[tuple[str, int], IncarnationSpan] = {}
    for job_id in sorted(st.jobs):
        job = st.jobs[job_id]
        # the stretches the current weights descend from (SPEC §7 ancestry), with their cuts
        live: dict[int, float] = {}
        if job.current is not None:
            for inc, cut in ancestry(st, job.current):
                live[inc.number] = cut
        incs: list[IncarnationSpan] = []
        marks: list[CheckpointMark] = []
        for n in sorted(job.incarnations):
            inc = job.incarnations[n]
            key = (job_id, n)
            prog = side.progress.get(key, [])
            steps = [p[0] for p in prog] + [ck.step for ck in inc.ckpts]
            steps += [side.consumed_step[(job_id, c.seq)] for c in inc.consumptions.values()
                      if (job_id, c.seq) in side.consumed_step]
            rb = side.rolled.get(key)
            if inc.start_kind in ("restore", "scratch") and rb is not None:
                start = rb.resumed_step
            elif inc.start_kind == "start":
                base = st.checkpoints.get(job.base_checkpoint_id) if job.base_checkpoint_id else None
                start = base.step if base is not None else 0
            else:
                start = min(steps) if steps else 0
            if steps:
                start = min(start, min(steps))
            end = max(steps + [start])
            cut = live.get(n)
            if cut is None:
                abandoned_from: int | None = start
            elif cut == INF:
                abandoned_from = None
            else:
                at = next((ck for ck in inc.ckpts if ck.seq == cut), None)
                abandoned_from = at.step if at is not None else start
            span = IncarnationSpan(job_id, n, row, start, end, inc.start_kind, abandoned_from, cut is not None,
                                   list(prog),
                                   inc.onset, side.finished.get(key))
            row += 1
            incs.append(span)
            spans[key] = span
            for ck in inc.ckpts:
                aliased = [a.id for a in aliased_checkpoints(st, ck)] if ck in inc.alias_ckpts else []
                marks.append(CheckpointMark(
                    ck.id, job_id, n, ck.step, ck.seq, bool(ck.sources), roots_of(ck.sources),
                    abandoned=(cut is None) or (cut != INF and ck.seq > cut),
                    target_of=list(target_of.get(ck.id, [])),
                    quarantined_by=list(quarantined_by.get(ck.id, [])),
                    aliases=aliased[0] if aliased else None,
                    aliased=aliased,
                ))
            if inc.start_kind in ("restore", "scratch"):
                restored = inc.restored_checkpoint_id
                rck = st.checkpoints.get(restored) if restored else None
                prev = spans.get((job_id, n - 1))
                rollbacks.append(RollbackMark(
                    job_id, prev.number if prev else None, n, prev.end_step if prev else None,
                    restored, rck.job_id if rck is not None else None,
                    rb.resumed_step if rb is not None else start,
                    rb.command_id if rb is not None else None,
                    inc.start_kind == "scratch",
                ))
        cur = job.current
        lanes.append(Lane(job_id, job.base_model, job.base_checkpoint_id, incs, marks, plans.get(job_id),
                          halts.get(job_id),
                          side.finished.get((job_id, cur.number)) if cur is not None else None))

    # consumption edges (base, restore, consume) in the consumer's seq order
    for ln in lanes:
        job = st.jobs[ln.job_id]
        for span in ln.incarnations:
            inc = job.incarnations[span.number]
            for seq in sorted(inc.consumptions):
                c = inc.consumptions[seq]
                src = st.checkpoints.get(c.checkpoint_id)
                if c.kind == "consume":
                    at = side.consumed_step.get((ln.job_id, seq), span.start_step)
                else:
                    at = span.start_step
                edges.append(Edge(
                    c.checkpoint_id,
                    src.job_id if src is not None else None,
                    src.incarnation if src is not None else None,
                    src.step if src is not None else None,
                    ln.job_id, span.number, at, seq, c.mode, c.kind, c.taints,
                    bool(c.taints and src is not None and src.sources),
                ))
    # unrecorded copies (T3 aliases behind an UNRECORDED_SHARING alert): an edge from every
    # checkpoint the copy aliases, as it counts as a consumption of each (SPEC §5)
    for a in final["alerts"]:
        if a.get("kind") != "UNRECORDED_SHARING" or not a.get("aliased_checkpoint_id"):
            continue
        ck = st.checkpoints.get(a["checkpoint_id"])
        if ck is None:
            continue
        for src in aliased_checkpoints(st, ck):
            edges.append(Edge(src.id, src.job_id, src.incarnation, src.step, ck.job_id, ck.incarnation,
                              ck.step, ck.seq, "CONTENT_ALIAS", "alias", True, bool(src.sources)))

    divergences: list[DivergenceMark] = []
    for key in sorted(st.diverged):
        inc = st.diverged[key]
        if inc.onset is None:
            continue
        v = verdicts.get(key)
        verdict = v.verdict if v is not None else "INTERNAL"
        divergences.append(DivergenceMark(
            key[0], key[1], inc.onset, verdict, sorted(v.incident_ids) if v is not None else [],
            verdict != EXTERNAL, inc.detected_onset, inc.reported_onset,
            sorted(set(side.reported.get(key, []))) + (["loss detector"] if inc.detected_onset is not None else []),
        ))

    # the checkpoints rollbacks restored (a finished run has no plan left: these are its targets)
    marks_by_id = {ck.checkpoint_id: ck for ln in lanes for ck in ln.checkpoints}
    for rb in rollbacks:
        mark = marks_by_id.get(rb.restored_checkpoint_id or "")
        if mark is not None and rb.job_id not in mark.restored_by:
            mark.restored_by.append(rb.job_id)

    incidents = [eng.incidents[x] for x in sorted(eng.incidents)]
    return CohortModel(cohort_id, side.events, lanes, edges, divergences, rollbacks, final, incidents)


def _control_commands(log: AuditLog, codec: Codec, lineage: CohortLineage) -> tuple[list[dict[str, Any]], int, int]:
    """The commands the control topic carried, in log order, each marked as still in force
    (the last plan-type record of its job; halts are kept apart) and whether the final plan
    of the fold names the same command."""
    recs = log.topic("control")
    out: list[dict[str, Any]] = []
    bad = 0
    for rec in recs:
        try:
            name, value = codec.decode_record(rec.value or b"")
        except Exception:  # noqa: BLE001 - DecodeError or worse: an undecodable record is counted, not fatal
            bad += 1
            continue
        job_id = value.get("job_id")
        cohort = value.get("cohort_id")
        if cohort is None:
            cohort = lineage.router.mapping.get(job_id or "", UNREGISTERED_COHORT)
        action = {"RollbackCommand": value.get("action"), "QuarantineNotice": "QUARANTINE",
                  "PlanCleared": "CLEAR", "HaltCommand": "HALT"}.get(name, name)
        out.append({
            "record": name,
            "command_id": value.get("command_id"),
            "job_id": job_id,
            "cohort_id": cohort,
            "incarnation": value.get("incarnation"),
            "action": action,
            "target_checkpoint_id": value.get("target_checkpoint_id"),
            "target_step": value.get("target_step"),
            "reason": value.get("reason"),
            "incident_ids": list(value.get("incident_ids") or []),
            "supersedes": value.get("supersedes"),
            "issued_ts": value.get("issued_ts"),
            "position": rec.where,
            "in_force": False,
            "matches_plan": False,
        })
    last: dict[str, dict[str, Any]] = {}
    for c in out:
        if c["record"] != "HaltCommand":
            last[c["job_id"]] = c
    for c in last.values():
        c["in_force"] = c["record"] != "PlanCleared"
    for c in out:
        eng = lineage.cohorts.get(c["cohort_id"])
        plan = eng.plans.get(c["job_id"]) if eng is not None else None
        c["matches_plan"] = plan is not None and plan.get("command_id") == c["command_id"]
        if eng is not None and c["command_id"] in eng.state.acknowledged:
            c["applied"] = True
    return out, len(recs), bad


def model_dict(model: ReportModel) -> dict[str, Any]:
    """The model as JSON-able data (for ``--json`` and debugging)."""
    return {
        **model.counts(),
        "lanes": {c: [asdict(ln) for ln in model.cohorts[c].lanes] for c in model.order()},
    }


# ---------------------------------------------------------------------------------- rendering

# colours (colour-blind-safe-ish: red/blue/green are never the only cue: shape and style differ)
C_LIVE = "#3b4f66"
C_ABANDONED = "#c4c8cc"
C_DIVERGED = "#e8a3a3"
C_TAINT = "#d62728"
C_TAINT_EDGE = "#8b0000"
C_CLEAN_EDGE = "#2f6fb0"
C_EVAL = "#8c8c8c"
C_TARGET = "#1a9641"
C_ROLLBACK = "#7b3294"
C_ALIAS = "#e66101"
C_QUARANTINE = "#5e3c99"
C_LANE = ("#f7f8fa", "#eef1f5")

_MODE_ABBR = {"INIT": "INIT", "MERGE": "MERGE", "DISTILL": "DISTILL", "PBT_EXPLOIT": "PBT",
              "REFERENCE": "REF", "REPLAY": "REPLAY", "EVAL_ONLY": "EVAL", "OTHER": "OTHER",
              "CONTENT_ALIAS": "same content"}


def _short(ck_id: str, job_id: str) -> str:
    """A checkpoint label without its writer's job prefix (the lane names the job)."""
    for sep in ("-", "_", "/", ":", "."):
        if ck_id.startswith(job_id + sep) and len(ck_id) > len(job_id) + 1:
            return ck_id[len(job_id) + 1:]
    return ck_id


class _Labeler:
    """Greedy label placement without overlaps, in display coordinates.

    Labels are placed in the order given (most important first); each tries its candidate
    offsets and takes the first whose box hits nothing placed so far (markers count as
    obstacles); an optional label that fits nowhere is dropped, a required one takes its first
    candidate anyway.
    """

    def __init__(self, ax, renderer) -> None:
        self.ax = ax
        self.renderer = renderer
        self.boxes: dict[tuple[int, int], list[tuple[float, float, float, float]]] = {}
        self.cell = 60.0
        self.dropped = 0

    def _cells(self, b):
        x0, y0, x1, y1 = b
        c = self.cell
        for i in range(int(x0 // c), int(x1 // c) + 1):
            for j in range(int(y0 // c), int(y1 // c) + 1):
                yield (i, j)

    def hits(self, b) -> bool:
        x0, y0, x1, y1 = b
        for cell in self._cells(b):
            for (a0, b0, a1, b1) in self.boxes.get(cell, ()):
                if x0 < a1 and a0 < x1 and y0 < b1 and b0 < y1:
                    return True
        return False

    def occupy(self, b) -> None:
        for cell in self._cells(b):
            self.boxes.setdefault(cell, []).append(b)

    def obstacle(self, x: float, y: float, half_w: float, half_h: float) -> None:
        px, py = self.ax.transData.transform((x, y))
        self.occupy((px - half_w, py - half_h, px + half_w, py + half_h))

    def place(self, x: float, y: float, text: str, candidates: Iterable[tuple[float, float, str, str]],
              required: bool = False, pad: float = 1.5, counted: bool = True, **kw) -> Any:
        first = None
        for dx, dy, ha, va in candidates:
            t = self.ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points",
                                 ha=ha, va=va, annotation_clip=False, **kw)
            bb = t.get_window_extent(self.renderer)
            b = (bb.x0 - pad, bb.y0 - pad, bb.x1 + pad, bb.y1 + pad)
            if not self.hits(b):
                self.occupy(b)
                if first is not None:
                    first[0].remove()
                return t
            if first is None and required:
                first = (t, b)
            else:
                t.remove()
        if first is not None:
            self.occupy(first[1])
            return first[0]
        if counted:
            self.dropped += 1
        return None


ABOVE = [(0, 6, "center", "bottom"), (0, -7, "center", "top"), (9, 6, "left", "bottom"),
         (-9, 6, "right", "bottom"), (9, -7, "left", "top"), (-9, -7, "right", "top"),
         (0, 16, "center", "bottom"), (0, -17, "center", "top")]
MAX_ALL_LABELS = 150  # above this many checkpoints, label only the tainted and the consumed ones
ONSET_DY = 0.3   # onset markers sit above their row, pointing at the step
ONSET_AT = [(0, 5, "center", "bottom"), (7, 0, "left", "center"), (-7, 0, "right", "center"),
            (0, 14, "center", "bottom")]
MODE_AT = [(-5, 5, "right", "bottom"), (-5, -6, "right", "top"), (5, -6, "left", "top")]
BELOW = [ABOVE[1], ABOVE[0], ABOVE[4], ABOVE[5], ABOVE[2], ABOVE[3], ABOVE[7], ABOVE[6]]


def _curve_obstacles(lab: "_Labeler", p0: tuple[float, float], p1: tuple[float, float], rad: float) -> None:
    """Mark the path of an ``arc3`` arrow from ``p0`` to ``p1`` (data coordinates) as taken,
    so that no label is placed on top of it."""
    t = lab.ax.transData
    (x1, y1), (x2, y2) = t.transform(p0), t.transform(p1)
    cx, cy = (x1 + x2) / 2 + rad * (y2 - y1), (y1 + y2) / 2 - rad * (x2 - x1)  # matplotlib's arc3
    n = max(2, int(math.hypot(x2 - x1, y2 - y1) / 6))
    for i in range(n + 1):
        u = i / n
        x = (1 - u) ** 2 * x1 + 2 * (1 - u) * u * cx + u ** 2 * x2
        y = (1 - u) ** 2 * y1 + 2 * (1 - u) * u * cy + u ** 2 * y2
        lab.occupy((x - 2.0, y - 2.0, x + 2.0, y + 2.0))


@dataclass
class FigureInfo:
    """What a rendered figure left out (for the HTML caption and ``--json``)."""

    dropped_labels: int = 0      # labels that found no room
    unlabelled: int = 0          # clean checkpoints nobody consumed, left unlabelled in a crowded cohort
    x_scale: str = "linear"


def _x_extent(cm: CohortModel) -> tuple[float, float, str, float]:
    lo, hi = INF, -INF
    extents = []
    for ln in cm.lanes:
        llo, lhi = INF, -INF
        for sp in ln.incarnations:
            llo, lhi = min(llo, sp.start_step), max(lhi, sp.end_step)
            if sp.onset_step is not None:
                lhi = max(lhi, sp.onset_step)
        if llo <= lhi:
            extents.append(lhi - llo)
            lo, hi = min(lo, llo), max(hi, lhi)
    if lo > hi:
        return 0.0, 1.0, "linear", 1.0
    pos = [e for e in extents if e > 0]
    # jobs whose step ranges differ by more than ~25x: a symmetric-log axis keeps the short
    # ones readable (linear up to the shortest job's length, logarithmic beyond)
    if lo >= 0 and pos and max(pos) / max(1.0, min(pos)) > 25:
        return lo, hi, "symlog", max(1.0, float(min(pos)))
    return lo, hi, "linear", 1.0


def audit_summary(audit: dict[str, Any]) -> tuple[str, bool]:
    """One line for an audit report (``traintrace audit --json`` / ``AuditReport.as_dict()``, or
    the older ``{passed, checks: [{name, passed, detail}]}``): the verdict and each check's, with
    counts when the report has them. Returns ``(text, passed)``."""
    passed = bool(audit.get("passed"))
    parts = []
    for c in audit.get("checks") or []:
        v = _verdict(c)
        n = f" {c['checked']}" if isinstance(c.get("checked"), int) and v != "SKIPPED" else ""
        f = f", {c['failed']} failed" if c.get("failed") else ""
        s = ""
        sig = c.get("signatures")
        if isinstance(sig, dict) and v != "SKIPPED":  # never let a PASS read as "signed and verified"
            s = (f" ({sig.get('verified', 0)} signatures verified)" if sig.get("trusted_keys")
                 else " (signatures NOT checked)")
        parts.append(f"{c.get('name')} {v}{n}{f}{s}")
    return f"audit {'PASSED' if passed else 'FAILED'}" + (f": {' · '.join(parts)}" if parts else ""), passed


def _verdict(c: dict[str, Any]) -> str:
    v = c.get("verdict")
    if v in ("PASS", "FAIL", "SKIPPED"):
        return v
    return "PASS" if c.get("passed") else "FAIL"


def render_figure(cm: CohortModel, *, source: str = "", events: int | None = None,
                  width: float = 14.0, summary: bool = True, audit: dict[str, Any] | None = None):
    """A matplotlib figure of one cohort's lineage. Returns ``(figure, FigureInfo)``.

    ``audit``: an audit report (see :func:`audit_summary`), shown as one header line (with
    ``summary``)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    info = FigureInfo()
    n_rows = sum(ln.rows for ln in cm.lanes) or 1
    lane_gap = 0.35
    # y of each row: rows top to bottom, a gap between lanes
    ys: dict[tuple[str, int], float] = {}
    y = 0.0
    lane_band: list[tuple[Lane, float, float]] = []
    for ln in cm.lanes:
        top = y
        for sp in ln.incarnations:
            ys[(ln.job_id, sp.number)] = y
            y += 1.0
        lane_band.append((ln, top - 0.5, y - 0.5))
        y += lane_gap
    y_max = max(y - lane_gap - 1.0, 0.0)

    # header lines: title, then one line per incident (up to 4)
    header: list[tuple[str, dict[str, Any]]] = []
    n_inc = len(cm.final["incidents"])
    facts = [f"{len(cm.lanes)} job(s)"]
    if events is not None:
        facts.insert(0, f"{events} events")
    facts += [f"{n_inc} incident(s)", f"{len(cm.tainted_checkpoints)} tainted checkpoint(s)",
              f"{len(cm.final['plans'])} plan(s)"]
    if cm.rollbacks:
        facts.append(f"{len(cm.rollbacks)} rollback(s) done")
    if cm.final["halts"]:
        facts.append(f"{len(cm.final['halts'])} halt(s)")
    if summary:
        header.append(((f"source: {source}  ·  " if source else "") + "  ·  ".join(facts),
                       {"fontsize": 9.5, "color": "#333333"}))
        for inc in cm.final["incidents"][:4]:
            r = inc["root"]
            header.append((f"incident {inc['incident_id'][:12]}  {inc['verdict']}  root {r['job_id']} inc "
                           f"{r['incarnation']} onset step {r['onset_step']}  ·  {len(inc['contaminated'])} "
                           f"contaminated, {len(inc['secondary_divergences'])} secondary divergence(s)",
                           {"fontsize": 9.5, "color": C_TAINT_EDGE}))
        if n_inc > 4:
            header.append((f"… and {n_inc - 4} more incident(s) (see the HTML report)",
                           {"fontsize": 9.5, "color": C_TAINT_EDGE}))
        if not n_inc:
            header.append(("no divergence incident", {"fontsize": 9.5, "color": C_TARGET}))
        if audit is not None:
            text, ok = audit_summary(audit)
            header.append((text, {"fontsize": 9.5, "color": C_TARGET if ok else C_TAINT_EDGE,
                                  "fontweight": "bold"}))

    handles = _legend_handles(cm)
    ncol = 4
    legend_rows = math.ceil(len(handles) / ncol)
    notes_in = 0.22
    legend_in = 0.55 + legend_rows * 0.21 + 0.08 + notes_in
    row_h = 0.62 if n_rows > 8 else 0.75
    head_in = 0.55 + 0.22 * len(header)
    plot_in = max(1.6, n_rows * row_h + (len(cm.lanes) - 1) * lane_gap * row_h + 0.6)
    height = head_in + plot_in + legend_in
    statuses = {ln.job_id: _lane_status(ln, cm.rollbacks) for ln in cm.lanes}
    multi = any(ln.rows > 1 for ln in cm.lanes)
    longest_job = max((len(ln.job_id) for ln in cm.lanes), default=1)
    left_in = 0.3 + 0.092 * longest_job + (0.42 if multi else 0.0)
    longest_status = max((len(text) for lines in statuses.values() for text, _c in lines), default=10)
    right_in = 0.35 + 0.078 * longest_status
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=left_in / width, right=1 - right_in / width,
                        top=1 - head_in / height, bottom=legend_in / height)
    ax = fig.add_subplot(1, 1, 1)

    fig.text(left_in / width, 1 - 0.18 / height, f"traintrace lineage · cohort {cm.label}",
             fontsize=14, fontweight="bold", va="top", ha="left")
    for i, (text, kw) in enumerate(header):
        fig.text(left_in / width, 1 - (0.5 + 0.22 * i) / height, text, va="top", ha="left", **kw)

    lo, hi, scale, linthresh = _x_extent(cm)
    span = max(hi - lo, 1.0)
    if scale == "symlog":
        ax.set_xscale("symlog", linthresh=linthresh, linscale=1.0)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.set_xlim(lo - 0.02 * linthresh, hi * 1.15 + 1)
        info.x_scale = f"symlog (linear up to step {linthresh:g})"
    else:
        if hi - lo < 10:
            mid_x = (lo + hi) / 2
            lo, hi, span = mid_x - 5, mid_x + 5, 10.0
        ax.set_xlim(lo - 0.035 * span, hi + 0.035 * span)
        ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10], integer=True))
    ax.set_ylim(y_max + 0.75, -0.75)
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("training step", fontsize=10)
    ax.tick_params(axis="x", labelsize=9)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)

    # lane bands and labels (job, then one "inc N" per row when it has several); the job's
    # final plan / halt / state in a column on the right
    ytrans = ax.get_yaxis_transform()
    for i, (ln, top, bottom) in enumerate(lane_band):
        ax.axhspan(top - 0.1, bottom + 0.1, color=C_LANE[i % 2], zorder=0, linewidth=0)
        mid = (top + bottom) / 2
        ax.annotate(ln.job_id, (0, mid), xycoords=ytrans, xytext=(-(36 if multi else 8), 0),
                    textcoords="offset points", ha="right", va="center", fontsize=10.5, fontweight="bold",
                    color="#222222", annotation_clip=False)
        if ln.rows > 1:
            for sp in ln.incarnations:
                ax.annotate(f"inc {sp.number}", (0, ys[(ln.job_id, sp.number)]), xycoords=ytrans,
                            xytext=(-6, 0), textcoords="offset points", ha="right", va="center",
                            fontsize=7.5, color="#666666", annotation_clip=False)
        lines = statuses[ln.job_id]
        for k, (text, colour) in enumerate(lines):
            ax.annotate(text, (1, mid), xycoords=ytrans, xytext=(8, 11 * ((len(lines) - 1) / 2 - k)),
                        textcoords="offset points", ha="left", va="center", fontsize=8.5, color=colour,
                        annotation_clip=False)

    fig.canvas.draw()  # fixes the layout: data -> display transforms are final from here
    renderer = fig.canvas.get_renderer()
    lab = _Labeler(ax, renderer)
    x0_lim, x1_lim = ax.get_xlim()
    px_per_step = ax.get_window_extent(renderer).width / max(x1_lim - x0_lim, 1e-9)

    # incarnation lines: live, abandoned (grey), diverged stretch (light red)
    for ln in cm.lanes:
        for sp in ln.incarnations:
            yy = ys[(ln.job_id, sp.number)]
            a, b = sp.start_step, sp.end_step
            cut = sp.abandoned_from
            if cut is None:
                ax.plot([a, b], [yy, yy], color=C_LIVE, lw=2.4, solid_capstyle="butt", zorder=2)
            elif not sp.in_ancestry:
                ax.plot([a, b], [yy, yy], color=C_ABANDONED, lw=2.4, solid_capstyle="butt", zorder=2)
            else:
                ax.plot([a, cut], [yy, yy], color=C_LIVE, lw=2.4, solid_capstyle="butt", zorder=2)
                ax.plot([cut, b], [yy, yy], color=C_ABANDONED, lw=2.4, solid_capstyle="butt", zorder=2)
            if sp.onset_step is not None and sp.onset_step <= b:
                ax.plot([sp.onset_step, b], [yy, yy], color=C_DIVERGED, lw=5.5, solid_capstyle="butt",
                        zorder=1.5)
            # progress ticks (skipped where they would merge into a texture: < 5 px apart)
            if sp.progress and scale == "linear" and \
                    (b - a) / len(sp.progress) * px_per_step >= 5:
                ax.plot([p[0] for p in sp.progress], [yy] * len(sp.progress), linestyle="none", marker="|",
                        markersize=4, color="#9aa5b1", zorder=2.1)
            # start marker
            # a restart from scratch starts like the job itself: from the pretrained model
            ax.plot([a], [yy], marker="o" if sp.start_kind in ("start", "scratch") else ">", markersize=5,
                     color=C_LIVE if sp.in_ancestry else C_ABANDONED, zorder=3)
            if sp.finished:
                ax.plot([b], [yy], marker="|", markersize=13, markeredgewidth=2.5, color="#222222", zorder=3)
                lab.obstacle(b, yy, 3, 8)

    # checkpoints
    ck_pos: dict[str, tuple[float, float]] = {}
    for ln in cm.lanes:
        for ck in ln.checkpoints:
            yy = ys[(ln.job_id, ck.incarnation)]
            ck_pos[ck.checkpoint_id] = (ck.step, yy)
            if ck.tainted:
                fc, ec = C_TAINT, C_TAINT_EDGE
            else:
                fc, ec = "white", (C_ABANDONED if ck.abandoned else C_LIVE)
            ax.plot([ck.step], [yy], marker="s", markersize=7.5, markerfacecolor=fc, markeredgecolor=ec,
                    markeredgewidth=1.4, linestyle="none", zorder=5)
            if ck.marked_target:
                ax.plot([ck.step], [yy], marker="o", markersize=15, markerfacecolor="none",
                        markeredgecolor=C_TARGET, markeredgewidth=2.2, linestyle="none", zorder=5.5)
            if ck.quarantined_by:
                ax.plot([ck.step], [yy], marker="D", markersize=12, markerfacecolor="none",
                        markeredgecolor=C_QUARANTINE, markeredgewidth=1.3, linestyle="none", zorder=5.4)
            lab.obstacle(ck.step, yy, 9 if ck.marked_target else 5, 9 if ck.marked_target else 5)

    # divergence onsets
    for d in cm.divergences:
        yy = ys.get((d.job_id, d.incarnation))
        if yy is None:
            continue
        ax.plot([d.onset_step], [yy - ONSET_DY], marker="v", markersize=9,
                markerfacecolor=C_TAINT if d.root else "white", markeredgecolor=C_TAINT_EDGE,
                markeredgewidth=1.4, linestyle="none", zorder=6)
        lab.obstacle(d.onset_step, yy - ONSET_DY, 6, 6)

    # rollbacks: from where the old incarnation stood to where the new one resumed
    for rb in cm.rollbacks:
        y1 = ys.get((rb.job_id, rb.to_incarnation))
        y0 = ys.get((rb.job_id, rb.from_incarnation)) if rb.from_incarnation is not None else None
        if y1 is None or y0 is None or rb.from_step is None:
            continue
        ax.add_patch(FancyArrowPatch((rb.from_step, y0), (rb.resumed_step, y1),
                                     connectionstyle="arc3,rad=-0.35", arrowstyle="-|>", mutation_scale=11,
                                     color=C_ROLLBACK, lw=1.5, linestyle=(0, (4, 2)), shrinkA=4, shrinkB=5,
                                     zorder=4))
        _curve_obstacles(lab, (rb.from_step, y0), (rb.resumed_step, y1), -0.35)

    # consumption edges (clean ones fainter when there are many)
    busy = sum(1 for e in cm.edges if e.resolved) > 30
    for e in cm.edges:
        if e.consumer_incarnation is None:
            continue
        y1 = ys.get((e.consumer_job_id, e.consumer_incarnation))
        if y1 is None:
            continue
        if not e.resolved:
            ax.plot([e.consumer_step], [y1], marker="$?$", markersize=10, color=C_ALIAS, zorder=6)
            lab.place(e.consumer_step, y1, f"untraceable: {e.source_checkpoint_id}", ABOVE, required=True,
                      fontsize=7.5, color=C_ALIAS, zorder=7)
            continue
        p0 = (e.source_step, ys[(e.source_job_id, e.source_incarnation)]) \
            if (e.source_job_id, e.source_incarnation) in ys else None
        if p0 is None:
            continue
        p1 = (e.consumer_step, y1)
        if e.kind == "alias":
            style = dict(color=C_ALIAS, lw=1.4, linestyle=(0, (1, 1.5)), alpha=0.95)
        elif not e.tainting:
            style = dict(color=C_EVAL, lw=1.0, linestyle=(0, (4, 3)), alpha=0.8)
        elif e.carries_taint:
            style = dict(color=C_TAINT, lw=1.6, alpha=0.9)
        else:
            style = dict(color=C_CLEAN_EDGE, lw=1.1 if busy else 1.2, alpha=0.38 if busy else 0.65)
        dy = p1[1] - p0[1]
        if e.kind == "restore" and e.source_job_id == e.consumer_job_id:
            rad = 0.0
        elif abs(dy) < 1e-9:
            rad = -0.45  # same row: an arch over the line
        else:
            # a gentle bow, flatter for long edges so they stay inside the plot
            rad = math.copysign(min(0.18, 0.9 / abs(dy)), dy)
        ax.add_patch(FancyArrowPatch(p0, p1, connectionstyle=f"arc3,rad={rad}", arrowstyle="-|>",
                                     mutation_scale=9, shrinkA=4, shrinkB=3,
                                     zorder=4.5 if e.carries_taint else 3.5, **style))
        if e.carries_taint or e.kind == "alias":  # what spreads the taint: no label on top of it
            _curve_obstacles(lab, p0, p1, rad)

    # labels, most important first: onsets, targets, rollbacks, tainted / consumed checkpoints,
    # the other checkpoints, then the consumption modes (dropped first when crowded)
    for d in cm.divergences:
        yy = ys.get((d.job_id, d.incarnation))
        if yy is None:
            continue
        text = f"onset {d.onset_step}" + ("" if d.root else " (ext.)")
        lab.place(d.onset_step, yy - ONSET_DY, text, ONSET_AT, required=True, fontsize=8, color=C_TAINT_EDGE,
                  fontweight="bold", zorder=7)
    for ln in cm.lanes:
        for ck in ln.checkpoints:
            if ck.marked_target:
                x, yy = ck_pos[ck.checkpoint_id]
                name = _short(ck.checkpoint_id, ck.job_id)
                jobs = ck.target_of or ck.restored_by
                text = f"↺ target {name}" + ("" if jobs == [ck.job_id] else f" (of {', '.join(jobs)})")
                if not ck.is_target:
                    text += " · restored"
                lab.place(x, yy, text, BELOW, required=True, fontsize=8, color=C_TARGET, fontweight="bold",
                          zorder=7)
    for rb in cm.rollbacks:
        y1 = ys.get((rb.job_id, rb.to_incarnation))
        if y1 is None:
            continue
        if rb.from_scratch:  # a restart from the pretrained model, not a restore of the base
            lane = cm.lane(rb.job_id)
            text = f"↺ from scratch ({(lane.base_model if lane else None) or 'pretrained'})"
        else:
            text = f"↺ rolled back to {_short(rb.restored_checkpoint_id or 'base', rb.job_id)}"
        lab.place(rb.resumed_step, y1, text,
                  [(8, -7, "left", "top"), (8, 6, "left", "bottom"), (-8, -7, "right", "top")],
                  fontsize=7.5, color=C_ROLLBACK, zorder=7)
    # the mode of the consumptions that spread a taint, before the checkpoint labels take the room
    n_edges = sum(1 for e in cm.edges if e.resolved)

    def mode_label(e: Edge, candidates: list[tuple[float, float, str, str]]) -> None:
        y1 = ys.get((e.consumer_job_id, e.consumer_incarnation))
        if y1 is None or not e.resolved or e.kind == "restore":
            return
        colour = C_ALIAS if e.kind == "alias" else (
            C_TAINT_EDGE if e.carries_taint else (C_EVAL if not e.tainting else C_CLEAN_EDGE))
        lab.place(e.consumer_step, y1, _MODE_ABBR.get(e.mode, e.mode), candidates,
                  fontsize=6.5, color=colour, fontstyle="italic", zorder=7, counted=False)

    spreading = [e for e in cm.edges if e.carries_taint or e.kind == "alias"] if n_edges <= 40 else []
    for e in spreading:
        mode_label(e, MODE_AT + [(-12, 0, "right", "center"), (12, 0, "left", "center"), (5, 5, "left", "bottom"),
                                 (-5, 14, "right", "bottom"), (-5, -15, "right", "top")])
    consumed = {e.source_checkpoint_id for e in cm.edges}
    order = sorted((ck for ln in cm.lanes for ck in ln.checkpoints),
                   key=lambda c: (not c.tainted, c.checkpoint_id not in consumed, c.step))
    label_all = len(order) <= MAX_ALL_LABELS
    for ck in order:
        if ck.marked_target:
            continue  # its target label names it
        if not label_all and not ck.tainted and ck.checkpoint_id not in consumed:
            info.unlabelled += 1
            continue
        x, yy = ck_pos[ck.checkpoint_id]
        colour = C_TAINT_EDGE if ck.tainted else ("#8a9099" if ck.abandoned else "#333333")
        lab.place(x, yy, _short(ck.checkpoint_id, ck.job_id), ABOVE, fontsize=7.5, color=colour, zorder=7)
    if n_edges <= 40:
        for e in cm.edges:
            if e not in spreading:
                mode_label(e, MODE_AT)
    info.dropped_labels = lab.dropped

    fig.legend(handles=handles, loc="upper left",
               bbox_to_anchor=(left_in / width - 0.01, (legend_in - 0.52) / height),
               ncol=ncol, fontsize=8.5, frameon=False, handlelength=2.6, columnspacing=1.6)
    notes = []
    if any(len(_short(ck.checkpoint_id, ck.job_id)) < len(ck.checkpoint_id)
           for ln in cm.lanes for ck in ln.checkpoints):
        notes.append("checkpoint labels omit their job's prefix")
    if info.unlabelled:
        notes.append(f"{info.unlabelled} clean checkpoint(s) that nobody consumed are not labelled")
    if info.dropped_labels:
        notes.append(f"{info.dropped_labels} label(s) left out for lack of room (all in the HTML tables)")
    if scale == "symlog":
        notes.append(f"x axis: {info.x_scale}")
    if notes:
        fig.text(left_in / width, 0.08 / height, "Note: " + " · ".join(notes), ha="left", va="bottom",
                 fontsize=7.5, color="#666666")
    return fig, info


def _legend_handles(cm: CohortModel) -> list[Any]:
    """Legend entries for what this cohort's picture actually shows."""
    from matplotlib.lines import Line2D

    spans = [sp for ln in cm.lanes for sp in ln.incarnations]
    cks = [ck for ln in cm.lanes for ck in ln.checkpoints]
    edges = [e for e in cm.edges if e.resolved]
    arrow = dict(marker=">", markersize=5)
    entries = [
        (True, Line2D([], [], color=C_LIVE, lw=2.4, label="live training (current ancestry)")),
        (any(sp.abandoned_from is not None for sp in spans),
         Line2D([], [], color=C_ABANDONED, lw=2.4, label="abandoned by a rollback")),
        (any(sp.onset_step is not None and sp.onset_step < sp.end_step for sp in spans),
         Line2D([], [], color=C_DIVERGED, lw=5.5, label="past a divergence onset")),
        (any(not c.tainted for c in cks),
         Line2D([], [], marker="s", markersize=7.5, markerfacecolor="white", markeredgecolor=C_LIVE,
                linestyle="none", label="checkpoint (clean)")),
        (any(c.tainted for c in cks),
         Line2D([], [], marker="s", markersize=7.5, markerfacecolor=C_TAINT, markeredgecolor=C_TAINT_EDGE,
                linestyle="none", label="checkpoint (tainted)")),
        (any(c.marked_target for c in cks),
         Line2D([], [], marker="o", markersize=13, markerfacecolor="none", markeredgecolor=C_TARGET,
                markeredgewidth=2.2, linestyle="none",
                label="↺ rollback target (" + " / ".join(
                    w for w, used in (("final plan", any(c.is_target for c in cks)),
                                      ("restored", any(c.restored_by and not c.is_target for c in cks))) if used)
                + ")")),
        (any(c.quarantined_by for c in cks),
         Line2D([], [], marker="D", markersize=10, markerfacecolor="none", markeredgecolor=C_QUARANTINE,
                linestyle="none", label="quarantined checkpoint")),
        (any(d.root for d in cm.divergences),
         Line2D([], [], marker="v", markersize=9, markerfacecolor=C_TAINT, markeredgecolor=C_TAINT_EDGE,
                linestyle="none", label="divergence onset (root incident)")),
        (any(not d.root for d in cm.divergences),
         Line2D([], [], marker="v", markersize=9, markerfacecolor="white", markeredgecolor=C_TAINT_EDGE,
                markeredgewidth=1.4, linestyle="none", label="onset caused by a consumption (ext.)")),
        (any(e.kind != "alias" and e.carries_taint for e in edges),
         Line2D([], [], color=C_TAINT, lw=1.6, label="consumption of a tainted ckpt", **arrow)),
        (any(e.kind != "alias" and e.tainting and not e.carries_taint for e in edges),
         Line2D([], [], color=C_CLEAN_EDGE, lw=1.1, alpha=0.7, label="consumption of a clean ckpt", **arrow)),
        (any(not e.tainting for e in edges),
         Line2D([], [], color=C_EVAL, lw=1.0, linestyle=(0, (4, 3)), label="EVAL_ONLY read (never taints)",
                **arrow)),
        (any(e.kind == "alias" for e in edges),
         Line2D([], [], color=C_ALIAS, lw=1.4, linestyle=(0, (1, 1.5)), label="same content, unrecorded (T3)")),
        (any(not e.resolved for e in cm.edges),
         Line2D([], [], marker="$?$", markersize=9, color=C_ALIAS, linestyle="none",
                label="source never recorded")),
        (bool(cm.rollbacks),
         Line2D([], [], color=C_ROLLBACK, lw=1.5, linestyle=(0, (4, 2)), label="rollback: restart from ckpt",
                **arrow)),
        (any(sp.finished for sp in spans),
         Line2D([], [], marker="|", markersize=11, markeredgewidth=2.5, color="#222222", linestyle="none",
                label="job finished")),
    ]
    return [h for used, h in entries if used]


def _lane_status(ln: Lane, rollbacks: Iterable[RollbackMark] = ()) -> list[tuple[str, str]]:
    """The right-hand column: the job's rollbacks done, final plan, halt and finish, one
    (text, colour) a line."""
    lines: list[tuple[str, str]] = []
    for rb in rollbacks:
        if rb.job_id == ln.job_id:
            if rb.from_scratch:
                lines.append((f"restarted from scratch → pretrained {ln.base_model or 'model'} "
                              f"(inc {rb.to_incarnation})", C_ROLLBACK))
            else:
                lines.append((f"rolled back → {rb.restored_checkpoint_id or 'base'} (inc {rb.to_incarnation})",
                              C_ROLLBACK))
    p = ln.plan
    if p is not None:
        a = p["action"]
        if a == "ROLLBACK":
            lines.append((f"ROLLBACK → {p['target_checkpoint_id']}", C_TARGET))
        elif a == "RESTART_FROM_BASE":
            lines.append(("RESTART_FROM_BASE" + (f" → {p['target_checkpoint_id']}"
                                                 if p.get("target_checkpoint_id") else " (pretrained)"), C_TARGET))
        elif a == "RESTART_FROM_SCRATCH":
            lines.append(("RESTART_FROM_SCRATCH", C_TAINT_EDGE))
        elif a == "QUARANTINE":
            lines.append((f"QUARANTINE ({len(p.get('quarantined_checkpoint_ids', []))} ckpt)", C_QUARANTINE))
        else:
            lines.append((str(a), C_TAINT_EDGE))
    if ln.halt is not None:
        lines.append((f"HALTED: {ln.halt['reason']}", C_TAINT_EDGE))
    if ln.finished:
        lines.append((f"finished {ln.finished}", "#333333"))
    if not lines:
        lines.append(("clean · no plan", "#5a6b7b"))
    return lines


def _fix_svg(svg: str) -> str:
    """Inline-able SVG: no XML prolog or DOCTYPE, no RDF metadata, scales to its container."""
    svg = re.sub(r"<\?xml[^>]*\?>\s*", "", svg)
    svg = re.sub(r"<!DOCTYPE[^>]*>\s*", "", svg)
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    svg = re.sub(r'(<svg[^>]*?)\swidth="[^"]*"\s+height="[^"]*"', r'\1 width="100%"', svg, count=1)
    return svg.strip()


def render_png(cm: CohortModel, **kw) -> bytes:
    fig, _ = render_figure(cm, **kw)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def render_svg(cm: CohortModel, **kw) -> tuple[str, FigureInfo]:
    import matplotlib

    matplotlib.use("Agg")
    fig, info = render_figure(cm, **kw)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": f"traintrace-{cm.cohort_id}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return _fix_svg(buf.getvalue()), info


# ---------------------------------------------------------------------------------------- HTML

_CSS = """
:root { --taint:#b71c1c; --ok:#1a7f37; --muted:#5f6b77; --line:#d9dee4; --bg:#ffffff; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color:#1f2328; background:var(--bg); margin:0; padding:20px 28px 40px; }
h1 { font-size:22px; margin:0 0 4px; } h2 { font-size:18px; margin:28px 0 8px; border-bottom:1px solid var(--line);
     padding-bottom:4px; } h3 { font-size:15px; margin:18px 0 6px; }
.meta { color:var(--muted); margin:0 0 4px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:12.5px; }
code, .nw { white-space:nowrap; }
/* the picture takes the page's whole width; the tables come below it, side by side when there
   is room (two columns from ~1150 px), each scrolling sideways rather than being cut */
.layout { display:block; }
.layout figure { margin:0 0 16px; min-width:0; border:1px solid var(--line); border-radius:6px; padding:6px; }
.layout figure svg { display:block; width:100%; height:auto; }
.layout figcaption { color:var(--muted); font-size:12.5px; padding:4px 6px 0; }
.panels { display:grid; grid-template-columns:repeat(auto-fit, minmax(min(100%, 540px), 1fr)); gap:8px 28px;
          align-items:start; }
.panel { min-width:0; }
.panel > h3:first-child { margin-top:4px; }
/* a very wide window: the picture beside the tables */
@media (min-width: 2100px) {
  .layout { display:grid; grid-template-columns:minmax(0, 3fr) minmax(560px, 2fr); gap:24px; align-items:start; }
  .layout figure { margin:0; }
  .layout .panels { grid-template-columns:minmax(0, 1fr); }
}
.tscroll { overflow-x:auto; max-width:100%; margin:4px 0 10px; }
table { border-collapse:collapse; width:100%; margin:0; font-size:13px; }
th, td { text-align:left; padding:3px 8px; border-bottom:1px solid var(--line); vertical-align:top; white-space:nowrap; }
td.wrap { white-space:normal; min-width:14em; }
th { background:#f3f5f7; font-weight:600; }
.ids { line-height:1.7; }
.tag { display:inline-block; padding:0 6px; border-radius:10px; font-size:12px; font-weight:600; }
.INTERNAL, .fail, .tainted { color:#fff; background:var(--taint); }
.EXTERNAL { color:#fff; background:#8e44ad; } .INDETERMINATE { color:#fff; background:#e66101; }
.pass, .clean { color:#fff; background:var(--ok); }
.skip { color:#fff; background:#9a6700; }
.finding { display:block; font-size:12.5px; } .fail-text { color:var(--taint); }
.incident { border:1px solid var(--line); border-left:4px solid var(--taint); border-radius:6px; padding:8px 12px;
            margin:0 0 12px; overflow-x:auto; }
.warn { color:#fff; background:#9a6700; }
.sig-warn { color:#7a4f00; font-weight:600; } .sig-ok { color:var(--ok); font-weight:600; }
.audit { border:1px solid var(--line); border-radius:6px; padding:10px 14px; margin:14px 0; }
.audit.passed { border-left:6px solid var(--ok); } .audit.failed { border-left:6px solid var(--taint); }
.muted { color:var(--muted); }
details { margin:8px 0; } summary { cursor:pointer; font-weight:600; }
.nav a { margin-right:12px; }
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


_ID_TOKEN = re.compile(r"[^\s<>]*-[^\s<>]*")


def _nw(escaped: str) -> str:
    """Escaped text (no tags) with every whitespace-delimited token holding a hyphen (an id such
    as ``j31-000-210c-i1``, ``events[0]@13``-style positions, ``--trusted-keys``) in a nowrap span:
    a line may break between ids, never inside one (browsers break after hyphens)."""
    return _ID_TOKEN.sub(lambda m: f'<span class="nw">{m.group(0)}</span>', escaped)


def _table(headers: list[str], rows: list[list[str]], raw: bool = False, wrap: Iterable[int] = ()) -> str:
    """A table in a horizontally scrolling box: cells do not wrap (ids stay whole, a wide table
    scrolls instead of being cut), except the columns ``wrap`` (free text), which wrap between
    words and never inside an id."""
    wrap = set(wrap)
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        (f'<td class="wrap">{c if raw else _nw(_e(c))}</td>' if i in wrap else f"<td>{c if raw else _e(c)}</td>")
        for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f'<div class="tscroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _signature_line(sig: dict[str, Any]) -> str:
    """The commitments' signatures (``signatures`` of an audit check) in words, for a report
    without a ``summary``."""
    if not sig.get("trusted_keys"):
        return (f"signatures NOT checked (no --trusted-keys): {sig.get('signed', 0)} signed, "
                f"{sig.get('unsigned', 0)} unsigned")
    return f"{sig.get('verified', 0)} signatures verified, {sig.get('rejected', 0)} rejected"


def _anchor(cohort: str) -> str:
    return "cohort-" + (re.sub(r"[^A-Za-z0-9_-]+", "_", cohort) or "unregistered")


_VERDICT_TAG = {"PASS": ("pass", "PASS"), "FAIL": ("fail", "FAIL"), "SKIPPED": ("skip", "SKIPPED")}
_FINDINGS_SHOWN = 5


def _audit_html(audit: dict[str, Any], audit_path: str | None, audit_href: str | None) -> str:
    """The verdict block: the report's verdict, then per check its verdict (PASS / FAIL /
    SKIPPED), what it checks, how many items it checked and how many failed, and its first
    failures, warnings and notes. Takes ``AuditReport.as_dict()`` (``traintrace audit --json``)
    and the simpler ``{passed, checks: [{name, passed, detail}]}``."""
    passed = bool(audit.get("passed"))
    checks = audit.get("checks") or []
    counted = any("checked" in c for c in checks)
    rows = []
    for c in checks:
        cls, label = _VERDICT_TAG[_verdict(c)]
        what = [f"<b>{_e(c.get('title'))}</b>"] if c.get("title") else []
        if c.get("detail"):
            what.append(_e(c.get("detail")))
        sig = c.get("signatures")
        tags = ""
        if isinstance(sig, dict) and _verdict(c) != "SKIPPED":
            # what was established about the signatures, never more (the verdict line of the audit)
            checked = bool(sig.get("trusted_keys"))
            what.append(f'<span class="{"sig-ok" if checked and not sig.get("rejected") else "sig-warn"}">'
                        f'{_nw(_e(c.get("summary") or _signature_line(sig)))}</span>')
            tags = (' <span class="tag warn">signatures NOT checked</span>' if not checked else
                    f' <span class="tag pass">{_e(sig.get("verified", 0))} verified</span>' if not sig.get("rejected")
                    else f' <span class="tag fail">{_e(sig.get("rejected"))} rejected</span>')
        failures = c.get("failures") or []
        for f in failures[:_FINDINGS_SHOWN]:
            what.append(f'<span class="finding fail-text">✗ {_e(finding_line(f))}</span>')
        n_failed = c.get("failed", len(failures)) or 0
        if n_failed > min(len(failures), _FINDINGS_SHOWN):
            what.append(f'<span class="muted">… {n_failed - min(len(failures), _FINDINGS_SHOWN)} more '
                        f'failure(s) in the report</span>')
        for f in (c.get("warnings") or [])[:_FINDINGS_SHOWN]:
            what.append(f'<span class="finding">! {_e(finding_line(f))}</span>')
        for n in (c.get("notes") or [])[:_FINDINGS_SHOWN]:
            what.append(f'<span class="muted">{_e(n)}</span>')
        row = [f'<span class="tag {cls}">{label}</span>{tags}', f"<code>{_e(c.get('name'))}</code>"]
        if counted:
            row += [_e(c.get("checked", "")), _e(c.get("failed", "")) if c.get("failed") else "0"]
        row.append("<br>".join(what))
        rows.append(row)
    where = ""
    if audit_path:
        where = (f' · report: <a href="{_e(audit_href)}"><code>{_e(audit_path)}</code></a>' if audit_href
                 else f" · report: <code>{_e(audit_path)}</code>")
    verdicts = [_verdict(c) for c in checks]
    tally = [f"{len(checks)} check(s)", f"{verdicts.count('PASS')} passed", f"{verdicts.count('FAIL')} failed"]
    if verdicts.count("SKIPPED"):
        tally.append(f"{verdicts.count('SKIPPED')} skipped")
    facts = ", ".join(tally)
    if isinstance(audit.get("events"), int):
        facts += f" · {audit['events']} events re-folded"
        if isinstance(audit.get("seconds"), (int, float)):
            facts += f" in {audit['seconds']:.2f}s"
    if audit.get("source"):
        facts += f" · log <code>{_e(audit['source'])}</code>"
    headers = ["", "check"] + (["checked", "failed"] if counted else []) + ["what" if counted else "detail"]
    return (f'<section class="audit {"passed" if passed else "failed"}"><h2 style="margin-top:0;border:0">Audit: '
            f'<span class="tag {"pass" if passed else "fail"}">{"PASSED" if passed else "FAILED"}</span></h2>'
            f'<p class="meta">{facts}{where}</p>'
            + (_table(headers, rows, raw=True, wrap={len(headers) - 1}) if rows else "") + "</section>")


def _cohort_html(cm: CohortModel, svg: str, info: FigureInfo) -> str:
    parts: list[str] = [f'<section id="{_anchor(cm.cohort_id)}"><h2>Cohort {_e(cm.label)}</h2>']
    c = cm.counts()
    parts.append(f'<p class="meta">{c["events"]} events · {c["lanes"]} job(s), {c["incarnations"]} '
                 f'incarnation(s) · {c["checkpoints"]} checkpoint(s), {c["tainted_checkpoints"]} tainted · '
                 f'{c["consumptions"]} consumption(s), {c["tainting_consumptions"]} of a tainted checkpoint</p>')
    caption = "One lane per job (one row per incarnation); steps on the x axis."
    if info.x_scale != "linear":
        caption += f" x axis: {info.x_scale}."
    if info.unlabelled:
        caption += f" {info.unlabelled} clean checkpoint(s) that nobody consumed are drawn without a label."
    if info.dropped_labels:
        caption += f" {info.dropped_labels} label(s) left out of the picture for lack of room."
    if info.unlabelled or info.dropped_labels:
        caption += " The tables below list everything."
    parts.append(f'<div class="layout"><figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>'
                 '<div class="panels"><div class="panel">')

    # incidents
    parts.append(f"<h3>Incidents ({len(cm.incidents)})</h3>")
    if not cm.incidents:
        parts.append('<p><span class="tag clean">none</span> no divergence incident in this cohort.</p>')
    for inc in cm.incidents:
        r = inc["root"]
        parts.append(f'<div class="incident"><div><span class="tag {_e(inc["verdict"])}">{_e(inc["verdict"])}</span> '
                     f'incident <code title="{_e(inc["incident_id"])}">{_e(inc["incident_id"])}</code></div>'
                     f'<div>root <b>{_e(r["job_id"])}</b> inc {_e(r["incarnation"])}, onset step '
                     f'<b>{_e(r["onset_step"])}</b> · {len(inc.get("tainted_checkpoints", []))} tainted checkpoint(s)</div>')
        if inc["contaminated"]:
            parts.append(_table(["contaminated", "inc", "via checkpoint", "path"],
                                [[x["job_id"], x["incarnation"], x["via_checkpoint_id"] or "",
                                  " → ".join(x.get("path") or [])] for x in inc["contaminated"]], wrap={3}))
        else:
            parts.append('<p class="muted">no other incarnation contaminated</p>')
        if inc["secondary_divergences"]:
            parts.append(_table(["secondary divergence", "inc", "onset step"],
                                [[s["job_id"], s["incarnation"], s["onset_step"]]
                                 for s in inc["secondary_divergences"]]))
        parts.append("</div>")
    parts.append('</div><div class="panel">')

    # plans
    parts.append(f"<h3>Plans ({len(cm.final['plans'])})</h3>")
    if cm.final["plans"]:
        rows = []
        for p in cm.final["plans"]:
            target = p["target_checkpoint_id"] or ""
            if p["action"] == "QUARANTINE":
                target = ", ".join(p.get("quarantined_checkpoint_ids", []))
            rows.append([_e(p["job_id"]), _e(p["incarnation"]), f"<b>{_e(p['action'])}</b>", _e(target),
                         _e("" if p["target_step"] is None else p["target_step"]),
                         " ".join(f'<code title="{_e(x)}">{_e(x[:12])}</code>' for x in p["incident_ids"]),
                         f'<code title="{_e(p.get("command_id"))}">{_e((p.get("command_id") or "")[:12])}</code>'])
        parts.append(_table(["job", "inc", "action", "target", "step", "incidents", "command"], rows, raw=True))
    else:
        parts.append('<p class="muted">no job needs a rollback</p>')

    commands = ""  # the full width of the page, below the panels: it is the widest table
    if cm.commands:
        commands = f"<h3>Commands issued on the control topic ({len(cm.commands)})</h3>"
        rows = []
        for cmd in cm.commands:
            state = ("in force" if cmd["in_force"] else
                     ("cleared" if cmd["record"] == "PlanCleared" else ("" if cmd["record"] == "HaltCommand"
                                                                        else "superseded")))
            if cmd.get("applied"):
                state += (", " if state else "") + "applied"
            rows.append([cmd["position"], cmd["job_id"], cmd["action"],
                         cmd["target_checkpoint_id"] or cmd.get("reason") or "",
                         (cmd["command_id"] or "")[:12], state,
                         "yes" if cmd["matches_plan"] else ("—" if cmd["record"] == "HaltCommand" else "no")])
        commands += _table(["record", "job", "action", "target / reason", "command", "state", "= final plan"], rows)

    if cm.final["halts"]:
        parts.append(f"<h3>Halts ({len(cm.final['halts'])})</h3>")
        parts.append(_table(["job", "reason", "detail"],
                            [[h["job_id"], h["reason"], h.get("detail", "")] for h in cm.final["halts"]], wrap={2}))
    if cm.final["alerts"]:
        parts.append(f"<h3>Alerts ({len(cm.final['alerts'])})</h3>")
        parts.append(_table(["kind", "job", "checkpoint", "copies"],
                            [[a["kind"], a.get("job_id") or "", a.get("checkpoint_id") or "",
                              a.get("aliased_checkpoint_id") or ""] for a in cm.final["alerts"]]))
    tainted = cm.tainted_checkpoints
    parts.append(f"<h3>Tainted checkpoints ({len(tainted)})</h3>")
    parts.append('<p class="ids">' + (", ".join(f'<code>{_e(t)}</code>' for t in tainted)
                                      or '<span class="muted">none</span>') + "</p>")
    parts.append("</div></div></div>")
    parts.append(commands)

    # detail tables, folded
    rows = []
    for e in cm.edges:
        rows.append([e.source_checkpoint_id, e.source_job_id or "(never recorded)",
                     f"{e.consumer_job_id} inc {e.consumer_incarnation}", e.consumer_step, e.mode, e.kind,
                     "yes" if e.carries_taint else ("never (EVAL_ONLY)" if not e.tainting else "no")])
    parts.append(f"<details><summary>Consumptions ({len(cm.edges)})</summary>"
                 + _table(["source checkpoint", "writer", "consumer", "at step", "mode", "kind", "carries taint"], rows)
                 + "</details>")
    rows = []
    for ln in cm.lanes:
        for ck in ln.checkpoints:
            notes = []
            if ck.target_of:
                notes.append("rollback target of " + ", ".join(ck.target_of))
            if ck.quarantined_by:
                notes.append("quarantined")
            if ck.aliased:
                notes.append(f"same content as {', '.join(ck.aliased)}")
            if ck.abandoned:
                notes.append("abandoned")
            rows.append([ck.checkpoint_id, f"{ck.job_id} inc {ck.incarnation}", ck.step,
                         "tainted" if ck.tainted else "clean", " ".join(x[:12] for x in ck.incident_ids),
                         "; ".join(notes)])
    parts.append(f"<details><summary>Checkpoints ({len(rows)})</summary>"
                 + _table(["checkpoint", "job", "step", "status", "incidents", "notes"], rows) + "</details>")
    if cm.divergences or cm.rollbacks:
        rows = [[f"{d.job_id} inc {d.incarnation}", d.onset_step, d.verdict, ", ".join(d.detectors),
                 " ".join(x[:12] for x in d.incident_ids)] for d in cm.divergences]
        parts.append(f"<details><summary>Divergences ({len(rows)}) and rollbacks ({len(cm.rollbacks)})</summary>"
                     + _table(["divergence", "onset step", "verdict", "found by", "incidents"], rows)
                     + _table(["rollback", "from step", "restored checkpoint", "resumed step", "command"],
                              [[f"{r.job_id} inc {r.from_incarnation} → inc {r.to_incarnation}",
                                "" if r.from_step is None else r.from_step,
                                r.restored_checkpoint_id or ("(pretrained, from scratch)" if r.from_scratch
                                                             else "(base)"),
                                r.resumed_step, (r.command_id or "")[:12]] for r in cm.rollbacks])
                     + "</details>")
    parts.append("</section>")
    return "".join(parts)


def render_html(model: ReportModel, *, cohorts: list[str] | None = None, audit: dict[str, Any] | None = None,
                audit_path: str | None = None, audit_href: str | None = None,
                svgs: dict[str, tuple[str, FigureInfo]] | None = None) -> str:
    """One self-contained page: header, optional audit verdict, a section per cohort."""
    from streams import __version__

    order = cohorts if cohorts is not None else model.order()
    svgs = dict(svgs or {})
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>traintrace lineage · {_e(model.source)}</title><style>{_CSS}</style></head><body>",
           "<header><h1>traintrace lineage report</h1>"]
    fmt = {"jsonl": "JSON Lines events file", "archive": "traintrace archive", "kafka": "the Kafka topics"}[model.origin]
    meta = [f"source <code>{_e(model.source)}</code> ({fmt})", f"{model.events} events folded"]
    if model.undecodable:
        meta.append(f"{model.undecodable} undecodable record(s) skipped")
    if model.control_records:
        meta.append(f"{model.control_records} control record(s)")
    if model.dead_letters:
        meta.append(f'<a href="#dead-letters">{len(model.dead_letters)} dead letter(s)</a>')
    out.append(f'<p class="meta">{" · ".join(meta)}</p>')
    when = model.meta.get("exported_at_ms") or model.meta.get("read_at_ms")
    gen = [f"generated by traintrace {_e(__version__)} from "
           + ("the processor's input order (lineage.by-cohort)" if model.meta.get("topics", {}).get("input")
              and model.origin != "jsonl" else "the events' own order")]
    if when:
        from datetime import datetime, timezone

        gen.append("log read at " + datetime.fromtimestamp(when / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"))
    if model.meta.get("until"):
        gen.append(f"cut at {_e(model.meta['until'])}")
    out.append(f'<p class="meta">{" · ".join(gen)}</p>')
    if len(order) > 1:
        out.append('<p class="nav">cohorts: ' + "".join(
            f'<a href="#{_anchor(c)}">{_e(model.cohorts[c].label)}</a>' for c in order) + "</p>")
    out.append("</header>")
    if audit is not None:
        out.append(_audit_html(audit, audit_path, audit_href))
    if not order:
        out.append('<p class="muted">The log holds no event.</p>')
    for c in order:
        cm = model.cohorts[c]
        if c not in svgs:
            svgs[c] = render_svg(cm, source=model.source, events=cm.events, summary=False)
        svg, info = svgs[c]
        out.append(_cohort_html(cm, svg, info))
    if model.dead_letters:
        out.append(_dead_letters_html(model.dead_letters))
    out.append("</body></html>\n")
    return "".join(out)


_DEAD_LETTERS_SHOWN = 1000


def _dead_letters_html(rows: list[dict[str, Any]]) -> str:
    """The dead letters of the log (every cohort's: an undecodable record has none), in log
    order, the first :data:`_DEAD_LETTERS_SHOWN`."""
    from datetime import datetime, timezone

    def when(ts: Any) -> str:
        return (datetime.fromtimestamp(ts / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
                if isinstance(ts, int) and ts > 0 else "")

    kinds: dict[str, int] = {}
    for d in rows:
        kinds[str(d["error_kind"])] = kinds.get(str(d["error_kind"]), 0) + 1
    table = []
    for d in rows[:_DEAD_LETTERS_SHOWN]:
        original = (f"{d['original_topic']}[{d['original_partition']}]@{d['original_offset']}"
                    if d["original_topic"] is not None else "")
        event = (f"{d['job_id']} seq {d['seq']} {d['type'] or ''}".strip() if d["job_id"] is not None else "—")
        table.append([d["position"], original, d["original_key"] or "", event, d["error_kind"] or "",
                      d["reason"] or "", when(d["ts"])])
    more = len(rows) - len(table)
    return (f'<section id="dead-letters"><h2>Dead letters ({len(rows)})</h2>'
            '<p class="meta">records the processor could not decode or validate, set aside on the dead-letter '
            "topic: " + ", ".join(f"{_e(k)} {n}" for k, n in sorted(kinds.items())) + "</p>"
            + _table(["dead letter", "original record", "key", "event", "error kind", "reason", "at"], table,
                     wrap={5})
            + (f'<p class="muted">… {more} more in the log</p>' if more else "") + "</section>")


__all__ = [
    "CheckpointMark",
    "CohortModel",
    "DivergenceMark",
    "Edge",
    "FigureInfo",
    "IncarnationSpan",
    "Lane",
    "ReportModel",
    "RollbackMark",
    "audit_summary",
    "build",
    "dead_letters",
    "model_dict",
    "render_figure",
    "render_html",
    "render_png",
    "render_svg",
]
