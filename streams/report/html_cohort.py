"""A cohort's section of the page: the picture across the page, then the summary in panels
(incidents; plans, halts, alerts, tainted checkpoints), the commands the control topic carried
across the page, and the folded detail tables (consumptions, checkpoints, divergences and
rollbacks)."""

from __future__ import annotations

from streams.report.figure import FigureInfo
from streams.report.html_base import anchor, e, table
from streams.report.model import CohortModel


def cohort_html(cm: CohortModel, svg: str, info: FigureInfo) -> str:
    return "".join([
        f'<section id="{anchor(cm.cohort_id)}"><h2>Cohort {e(cm.label)}</h2>',
        _counts(cm),
        _figure(svg, info),
        '<div class="panels"><div class="panel">',
        _incidents(cm),
        '</div><div class="panel">',
        _plans(cm),
        _halts_and_alerts(cm),
        _tainted(cm),
        "</div></div></div>",
        _commands(cm),  # the full width of the page, below the panels: it is the widest table
        _consumptions(cm),
        _checkpoints(cm),
        _divergences_and_rollbacks(cm),
        "</section>",
    ])


def _counts(cm: CohortModel) -> str:
    c = cm.counts()
    return (f'<p class="meta">{c["events"]} events · {c["lanes"]} job(s), {c["incarnations"]} '
            f'incarnation(s) · {c["checkpoints"]} checkpoint(s), {c["tainted_checkpoints"]} tainted · '
            f'{c["consumptions"]} consumption(s), {c["tainting_consumptions"]} of a tainted checkpoint</p>')


def _figure(svg: str, info: FigureInfo) -> str:
    """The picture and a caption saying what it left out; opens the layout the panels close."""
    caption = "One lane per job (one row per incarnation); steps on the x axis."
    if info.x_scale != "linear":
        caption += f" x axis: {info.x_scale}."
    if info.unlabelled:
        caption += f" {info.unlabelled} clean checkpoint(s) that nobody consumed are drawn without a label."
    if info.dropped_labels:
        caption += f" {info.dropped_labels} label(s) left out of the picture for lack of room."
    if info.unlabelled or info.dropped_labels:
        caption += " The tables below list everything."
    return f'<div class="layout"><figure>{svg}<figcaption>{e(caption)}</figcaption></figure>'


def _incidents(cm: CohortModel) -> str:
    parts = [f"<h3>Incidents ({len(cm.incidents)})</h3>"]
    if not cm.incidents:
        parts.append('<p><span class="tag clean">none</span> no divergence incident in this cohort.</p>')
    for inc in cm.incidents:
        r = inc["root"]
        parts.append(f'<div class="incident"><div><span class="tag {e(inc["verdict"])}">{e(inc["verdict"])}</span> '
                     f'incident <code title="{e(inc["incident_id"])}">{e(inc["incident_id"])}</code></div>'
                     f'<div>root <b>{e(r["job_id"])}</b> inc {e(r["incarnation"])}, onset step '
                     f'<b>{e(r["onset_step"])}</b> · {len(inc.get("tainted_checkpoints", []))} tainted checkpoint(s)</div>')
        if inc["contaminated"]:
            parts.append(table(["contaminated", "inc", "via checkpoint", "path"],
                               [[x["job_id"], x["incarnation"], x["via_checkpoint_id"] or "",
                                 " → ".join(x.get("path") or [])] for x in inc["contaminated"]], wrap={3}))
        else:
            parts.append('<p class="muted">no other incarnation contaminated</p>')
        if inc["secondary_divergences"]:
            parts.append(table(["secondary divergence", "inc", "onset step"],
                               [[s["job_id"], s["incarnation"], s["onset_step"]]
                                for s in inc["secondary_divergences"]]))
        parts.append("</div>")
    return "".join(parts)


def _plans(cm: CohortModel) -> str:
    head = f"<h3>Plans ({len(cm.final['plans'])})</h3>"
    if not cm.final["plans"]:
        return head + '<p class="muted">no job needs a rollback</p>'
    rows = []
    for p in cm.final["plans"]:
        target = p["target_checkpoint_id"] or ""
        if p["action"] == "QUARANTINE":
            target = ", ".join(p.get("quarantined_checkpoint_ids", []))
        rows.append([e(p["job_id"]), e(p["incarnation"]), f"<b>{e(p['action'])}</b>", e(target),
                     e("" if p["target_step"] is None else p["target_step"]),
                     " ".join(f'<code title="{e(x)}">{e(x[:12])}</code>' for x in p["incident_ids"]),
                     f'<code title="{e(p.get("command_id"))}">{e((p.get("command_id") or "")[:12])}</code>'])
    return head + table(["job", "inc", "action", "target", "step", "incidents", "command"], rows, raw=True)


def _halts_and_alerts(cm: CohortModel) -> str:
    parts = []
    if cm.final["halts"]:
        parts.append(f"<h3>Halts ({len(cm.final['halts'])})</h3>")
        parts.append(table(["job", "reason", "detail"],
                           [[h["job_id"], h["reason"], h.get("detail", "")] for h in cm.final["halts"]], wrap={2}))
    if cm.final["alerts"]:
        parts.append(f"<h3>Alerts ({len(cm.final['alerts'])})</h3>")
        parts.append(table(["kind", "job", "checkpoint", "copies"],
                           [[a["kind"], a.get("job_id") or "", a.get("checkpoint_id") or "",
                             a.get("aliased_checkpoint_id") or ""] for a in cm.final["alerts"]]))
    return "".join(parts)


def _tainted(cm: CohortModel) -> str:
    tainted = cm.tainted_checkpoints
    return (f"<h3>Tainted checkpoints ({len(tainted)})</h3>"
            + '<p class="ids">' + (", ".join(f'<code>{e(t)}</code>' for t in tainted)
                                   or '<span class="muted">none</span>') + "</p>")


def _commands(cm: CohortModel) -> str:
    """Every command of the cohort on the control topic, in log order, with its state."""
    if not cm.commands:
        return ""
    rows = []
    for cmd in cm.commands:
        rows.append([cmd["position"], cmd["job_id"], cmd["action"],
                     cmd["target_checkpoint_id"] or cmd.get("reason") or "",
                     (cmd["command_id"] or "")[:12], _command_state(cmd),
                     "yes" if cmd["matches_plan"] else ("—" if cmd["record"] == "HaltCommand" else "no")])
    return (f"<h3>Commands issued on the control topic ({len(cm.commands)})</h3>"
            + table(["record", "job", "action", "target / reason", "command", "state", "= final plan"], rows))


def _command_state(cmd: dict) -> str:
    """In force (the last of its job), cleared or superseded (a halt is neither), and applied
    when a ``RolledBack`` acknowledged it."""
    if cmd["in_force"]:
        state = "in force"
    elif cmd["record"] == "PlanCleared":
        state = "cleared"
    elif cmd["record"] == "HaltCommand":
        state = ""
    else:
        state = "superseded"
    if cmd.get("applied"):
        state += (", " if state else "") + "applied"
    return state


def _consumptions(cm: CohortModel) -> str:
    rows = [[x.source_checkpoint_id, x.source_job_id or "(never recorded)",
             f"{x.consumer_job_id} inc {x.consumer_incarnation}", x.consumer_step, x.mode, x.kind,
             "yes" if x.carries_taint else ("never (EVAL_ONLY)" if not x.tainting else "no")]
            for x in cm.edges]
    return (f"<details><summary>Consumptions ({len(cm.edges)})</summary>"
            + table(["source checkpoint", "writer", "consumer", "at step", "mode", "kind", "carries taint"], rows)
            + "</details>")


def _checkpoints(cm: CohortModel) -> str:
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
    return (f"<details><summary>Checkpoints ({len(rows)})</summary>"
            + table(["checkpoint", "job", "step", "status", "incidents", "notes"], rows) + "</details>")


def _divergences_and_rollbacks(cm: CohortModel) -> str:
    if not (cm.divergences or cm.rollbacks):
        return ""
    rows = [[f"{d.job_id} inc {d.incarnation}", d.onset_step, d.verdict, ", ".join(d.detectors),
             " ".join(x[:12] for x in d.incident_ids)] for d in cm.divergences]
    rollbacks = [[f"{r.job_id} inc {r.from_incarnation} → inc {r.to_incarnation}",
                  "" if r.from_step is None else r.from_step,
                  r.restored_checkpoint_id or ("(pretrained, from scratch)" if r.from_scratch else "(base)"),
                  r.resumed_step, (r.command_id or "")[:12]] for r in cm.rollbacks]
    return (f"<details><summary>Divergences ({len(rows)}) and rollbacks ({len(cm.rollbacks)})</summary>"
            + table(["divergence", "onset step", "verdict", "found by", "incidents"], rows)
            + table(["rollback", "from step", "restored checkpoint", "resumed step", "command"], rollbacks)
            + "</details>")
