"""The words the picture writes around the plot: the header (source, counts, one line per
incident, the audit's verdict), each lane's status in the right-hand column, and the note under
the legend saying what the picture left out."""

from __future__ import annotations

from typing import Any, Iterable

from streams.report.audit_lines import audit_summary
from streams.report.model import CohortModel, Lane, RollbackMark
from streams.report.style import C_QUARANTINE, C_ROLLBACK, C_TAINT_EDGE, C_TARGET, short_label

HEADER_STYLE = {"fontsize": 9.5, "color": "#333333"}
INCIDENT_STYLE = {"fontsize": 9.5, "color": C_TAINT_EDGE}
INCIDENTS_SHOWN = 4


def header_lines(cm: CohortModel, *, source: str, events: int | None, summary: bool,
                 audit: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """The lines under the title, each with its text style: the facts, then one line per
    incident (up to :data:`INCIDENTS_SHOWN`), then the audit's verdict. None without ``summary``."""
    if not summary:
        return []
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
    header = [((f"source: {source}  ·  " if source else "") + "  ·  ".join(facts), dict(HEADER_STYLE))]
    for inc in cm.final["incidents"][:INCIDENTS_SHOWN]:
        r = inc["root"]
        header.append((f"incident {inc['incident_id'][:12]}  {inc['verdict']}  root {r['job_id']} inc "
                       f"{r['incarnation']} onset step {r['onset_step']}  ·  {len(inc['contaminated'])} "
                       f"contaminated, {len(inc['secondary_divergences'])} secondary divergence(s)",
                       dict(INCIDENT_STYLE)))
    if n_inc > INCIDENTS_SHOWN:
        header.append((f"… and {n_inc - INCIDENTS_SHOWN} more incident(s) (see the HTML report)",
                       dict(INCIDENT_STYLE)))
    if not n_inc:
        header.append(("no divergence incident", {"fontsize": 9.5, "color": C_TARGET}))
    if audit is not None:
        text, ok = audit_summary(audit)
        header.append((text, {"fontsize": 9.5, "color": C_TARGET if ok else C_TAINT_EDGE, "fontweight": "bold"}))
    return header


def lane_status(ln: Lane, rollbacks: Iterable[RollbackMark] = ()) -> list[tuple[str, str]]:
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


def figure_notes(cm: CohortModel, *, unlabelled: int, dropped_labels: int, x_scale: str) -> list[str]:
    """What the picture leaves out or does differently, for the note under the legend."""
    notes = []
    if any(len(short_label(ck.checkpoint_id, ck.job_id)) < len(ck.checkpoint_id)
           for ln in cm.lanes for ck in ln.checkpoints):
        notes.append("checkpoint labels omit their job's prefix")
    if unlabelled:
        notes.append(f"{unlabelled} clean checkpoint(s) that nobody consumed are not labelled")
    if dropped_labels:
        notes.append(f"{dropped_labels} label(s) left out for lack of room (all in the HTML tables)")
    if x_scale != "linear":
        notes.append(f"x axis: {x_scale}")
    return notes
