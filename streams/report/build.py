"""The report's model read off a log: :func:`build` folds the log through the core exactly as
``analyze`` does (:class:`~streams.core.cohorts.CohortLineage`, events in the processor's order
from :func:`~streams.audit.log.fold_order`), then reads each cohort's lanes, checkpoints, edges,
divergences and rollbacks off the folded state. What the state does not keep (each
``Progress``'s step and loss, a consumption's step, a ``RolledBack``'s ``resumed_step``, a
``JobFinished``'s status) is taken from the same events, only those the fold accepted."""

from __future__ import annotations

from typing import Any, Callable

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
from streams.audit.log import AuditLog, fold_order
from streams.report.log_topics import control_commands, dead_letters
from streams.report.model import (
    CheckpointMark,
    CohortModel,
    DivergenceMark,
    Edge,
    IncarnationSpan,
    Lane,
    ReportModel,
    RollbackMark,
)


class _Side:
    """What the core state does not keep but the picture needs, per cohort, from accepted events."""

    def __init__(self) -> None:
        self.events = 0
        self.progress: dict[tuple[str, int], list[tuple[int, float]]] = {}
        self.consumed_step: dict[tuple[str, int], int] = {}      # (job, seq) -> consumer step
        self.rolled: dict[tuple[str, int], RolledBack] = {}      # (job, new incarnation)
        self.reported: dict[tuple[str, int], list[str]] = {}     # detectors
        self.finished: dict[tuple[str, int], str] = {}

    def note(self, ev) -> None:
        """Keep what the picture needs of an accepted event."""
        key = (ev.job_id, ev.incarnation)
        if isinstance(ev, Progress):
            self.progress.setdefault(key, []).append((ev.step, ev.loss))
        elif isinstance(ev, CheckpointConsumed):
            self.consumed_step[(ev.job_id, ev.seq)] = ev.step
        elif isinstance(ev, RolledBack):
            self.rolled[key] = ev
        elif isinstance(ev, DivergenceReported):
            self.reported.setdefault(key, []).append(ev.detector)
        elif isinstance(ev, JobFinished):
            self.finished[key] = ev.status


def build(log: AuditLog, config: Config | None = None, codec: Codec | None = None,
          progress: Callable[[int], None] | None = None) -> ReportModel:
    """Fold ``log`` and gather, per cohort, what the lineage picture shows."""
    codec = codec or Codec()
    lineage = CohortLineage(config)
    side, events, undecodable = _fold(log, codec, lineage, progress)
    lineage.finish_input()
    final = lineage.final_state()

    commands, ctl_total, ctl_bad = control_commands(log, codec, lineage)
    cohorts: dict[str, CohortModel] = {}
    for cohort_id in sorted(lineage.cohorts):
        cm = _CohortReader(lineage.cohorts[cohort_id], side.get(cohort_id, _Side())).model(cohort_id)
        cm.commands = [c for c in commands if c["cohort_id"] == cohort_id]
        cohorts[cohort_id] = cm
    origin = "kafka" if log.source.startswith("kafka://") else (
        "jsonl" if log.meta.get("format") == "jsonl" else "archive")
    return ReportModel(log.source, origin, dict(log.meta), events, undecodable, cohorts, final,
                       ctl_total, ctl_bad, dead_letters(log, codec))


def _fold(log: AuditLog, codec: Codec, lineage: CohortLineage,
          progress: Callable[[int], None] | None) -> tuple[dict[str, _Side], int, int]:
    """Fold the log into ``lineage``, keeping per cohort what the state does not. Returns the
    side facts by cohort, the events folded and the undecodable records skipped."""
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
        for folded in result.released:  # held for their seal, folded now (streams.core.seals)
            s.note(folded)
        if result.accepted:
            s.note(ev)
    return side, events, undecodable


class _CohortReader:
    """One cohort's model, read off its folded engine step by step: lanes (with their rows,
    checkpoints and rollbacks), consumption edges, alias edges, divergences, restored targets."""

    def __init__(self, eng, side: _Side) -> None:
        self.eng = eng
        self.st = eng.state
        self.final = eng.final_state()           # decides, so verdicts/plans/incidents are current
        self.verdicts = eng.verdicts
        self.plans: dict[str, dict[str, Any]] = eng.plans
        self.side = side
        self.target_of: dict[str, list[str]] = {}
        self.quarantined_by: dict[str, list[str]] = {}
        for job_id, p in sorted(self.plans.items()):
            if p.get("target_checkpoint_id"):
                self.target_of.setdefault(p["target_checkpoint_id"], []).append(job_id)
            for ck_id in p.get("quarantined_checkpoint_ids", ()):
                self.quarantined_by.setdefault(ck_id, []).append(job_id)
        self.row = 0                             # the next figure row
        self.rollbacks: list[RollbackMark] = []

    def model(self, cohort_id: str) -> CohortModel:
        halts = {h["job_id"]: h for h in self.final["halts"]}
        lanes = [self._lane(job_id, halts.get(job_id)) for job_id in sorted(self.st.jobs)]
        edges = self._consumption_edges(lanes) + self._alias_edges()
        _mark_restored(lanes, self.rollbacks)
        incidents = [self.eng.incidents[x] for x in sorted(self.eng.incidents)]
        return CohortModel(cohort_id, self.side.events, lanes, edges, self._divergences(), self.rollbacks,
                           self.final, incidents)

    def _roots_of(self, sources) -> list[str]:
        out: set[str] = set()
        for s in sources or ():
            v = self.verdicts.get(s)
            if v is not None:
                out |= v.incident_ids
        return sorted(out)

    # ------------------------------------------------------------------------------- lanes

    def _lane(self, job_id: str, halt: dict[str, Any] | None) -> Lane:
        """One job: a row per incarnation, its checkpoints, the rollbacks that started a row."""
        job = self.st.jobs[job_id]
        # the stretches the current weights descend from (SPEC §7 ancestry), with their cuts
        live: dict[int, float] = {}
        if job.current is not None:
            for inc, cut in ancestry(self.st, job.current):
                live[inc.number] = cut
        incs: list[IncarnationSpan] = []
        marks: list[CheckpointMark] = []
        for n in sorted(job.incarnations):
            inc = job.incarnations[n]
            cut = live.get(n)
            span = self._span(job, inc, cut)
            marks += [self._checkpoint(job_id, n, inc, ck, cut) for ck in inc.ckpts]
            if inc.start_kind in ("restore", "scratch"):
                prev = incs[-1] if incs and incs[-1].number == n - 1 else None
                self.rollbacks.append(self._rollback(job_id, inc, span, prev))
            incs.append(span)
        cur = job.current
        return Lane(job_id, job.base_model, job.base_checkpoint_id, incs, marks, self.plans.get(job_id), halt,
                    self.side.finished.get((job_id, cur.number)) if cur is not None else None)

    def _span(self, job, inc, cut: float | None) -> IncarnationSpan:
        """An incarnation's row: from where it started to the largest step it reported, and the
        step after which it is abandoned (``cut``: its ancestry cut, None when not an ancestor)."""
        key = (job.job_id, inc.number)
        prog = self.side.progress.get(key, [])
        steps = [p[0] for p in prog] + [ck.step for ck in inc.ckpts]
        steps += [self.side.consumed_step[(job.job_id, c.seq)] for c in inc.consumptions.values()
                  if (job.job_id, c.seq) in self.side.consumed_step]
        rb = self.side.rolled.get(key)
        if inc.start_kind in ("restore", "scratch") and rb is not None:
            start = rb.resumed_step
        elif inc.start_kind == "start":
            base = self.st.checkpoints.get(job.base_checkpoint_id) if job.base_checkpoint_id else None
            start = base.step if base is not None else 0
        else:
            start = min(steps) if steps else 0
        if steps:
            start = min(start, min(steps))
        end = max(steps + [start])
        if cut is None:
            abandoned_from: int | None = start
        elif cut == INF:
            abandoned_from = None
        else:
            at = next((ck for ck in inc.ckpts if ck.seq == cut), None)
            abandoned_from = at.step if at is not None else start
        span = IncarnationSpan(job.job_id, inc.number, self.row, start, end, inc.start_kind, abandoned_from,
                               cut is not None, list(prog), inc.onset, self.side.finished.get(key))
        self.row += 1
        return span

    def _checkpoint(self, job_id: str, n: int, inc, ck, cut: float | None) -> CheckpointMark:
        aliased = [a.id for a in aliased_checkpoints(self.st, ck)] if ck in inc.alias_ckpts else []
        return CheckpointMark(
            ck.id, job_id, n, ck.step, ck.seq, bool(ck.sources), self._roots_of(ck.sources),
            abandoned=(cut is None) or (cut != INF and ck.seq > cut),
            target_of=list(self.target_of.get(ck.id, [])),
            quarantined_by=list(self.quarantined_by.get(ck.id, [])),
            aliases=aliased[0] if aliased else None,
            aliased=aliased,
        )

    def _rollback(self, job_id: str, inc, span: IncarnationSpan, prev: IncarnationSpan | None) -> RollbackMark:
        """The rollback that started ``inc``, from where incarnation ``n - 1`` stood (``prev``)."""
        restored = inc.restored_checkpoint_id
        rck = self.st.checkpoints.get(restored) if restored else None
        rb = self.side.rolled.get((job_id, inc.number))
        return RollbackMark(
            job_id, prev.number if prev else None, inc.number, prev.end_step if prev else None,
            restored, rck.job_id if rck is not None else None,
            rb.resumed_step if rb is not None else span.start_step,
            rb.command_id if rb is not None else None,
            inc.start_kind == "scratch",
        )

    # ------------------------------------------------------------------------------- edges

    def _consumption_edges(self, lanes: list[Lane]) -> list[Edge]:
        """The consumptions (base, restore, consume), lane by lane, in the consumer's seq order."""
        edges: list[Edge] = []
        for ln in lanes:
            job = self.st.jobs[ln.job_id]
            for span in ln.incarnations:
                inc = job.incarnations[span.number]
                for seq in sorted(inc.consumptions):
                    c = inc.consumptions[seq]
                    src = self.st.checkpoints.get(c.checkpoint_id)
                    if c.kind == "consume":
                        at = self.side.consumed_step.get((ln.job_id, seq), span.start_step)
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
        return edges

    def _alias_edges(self) -> list[Edge]:
        """Unrecorded copies (T3 aliases behind an UNRECORDED_SHARING alert): an edge from every
        checkpoint the copy aliases, as it counts as a consumption of each (SPEC §5)."""
        edges: list[Edge] = []
        for a in self.final["alerts"]:
            if a.get("kind") != "UNRECORDED_SHARING" or not a.get("aliased_checkpoint_id"):
                continue
            ck = self.st.checkpoints.get(a["checkpoint_id"])
            if ck is None:
                continue
            for src in aliased_checkpoints(self.st, ck):
                edges.append(Edge(src.id, src.job_id, src.incarnation, src.step, ck.job_id, ck.incarnation,
                                  ck.step, ck.seq, "CONTENT_ALIAS", "alias", True, bool(src.sources)))
        return edges

    # ------------------------------------------------------------------------- divergences

    def _divergences(self) -> list[DivergenceMark]:
        out: list[DivergenceMark] = []
        for key in sorted(self.st.diverged):
            inc = self.st.diverged[key]
            if inc.onset is None:
                continue
            v = self.verdicts.get(key)
            verdict = v.verdict if v is not None else "INTERNAL"
            detectors = sorted(set(self.side.reported.get(key, [])))
            if inc.detected_onset is not None:
                detectors.append("loss detector")
            out.append(DivergenceMark(
                key[0], key[1], inc.onset, verdict, sorted(v.incident_ids) if v is not None else [],
                verdict != EXTERNAL, inc.detected_onset, inc.reported_onset, detectors,
            ))
        return out


def _mark_restored(lanes: list[Lane], rollbacks: list[RollbackMark]) -> None:
    """The checkpoints rollbacks restored (a finished run has no plan left: these are its targets)."""
    marks_by_id = {ck.checkpoint_id: ck for ln in lanes for ck in ln.checkpoints}
    for rb in rollbacks:
        mark = marks_by_id.get(rb.restored_checkpoint_id or "")
        if mark is not None and rb.job_id not in mark.restored_by:
            mark.restored_by.append(rb.job_id)
