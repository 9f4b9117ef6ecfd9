// traintrace live lineage: polls /api/state every second and redraws the page from it.
// No framework, no build step: the server sends this file as is.
"use strict";

const POLL_MS = 1000;
let selected = null;          // the cohort whose drawing is shown
let drawnKey = null;          // "cohort:changes" of the drawing on the page
let drawingInFlight = false;
let lastState = null;

const $ = (id) => document.getElementById(id);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g,
  (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const short = (id) => (id ? String(id).slice(0, 12) : "");
const slug = (s) => String(s).replace(/\s+/g, "-");

function time(ts) {
  if (ts === null || ts === undefined) return "";
  const d = new Date(Number(ts));
  return isNaN(d) ? String(ts) : d.toLocaleTimeString();
}

function renderCohorts(st) {
  const box = $("cohorts");
  if (!st.cohorts.length) { box.innerHTML = '<p class="empty">no cohort yet</p>'; return; }
  if (selected === null || !st.cohorts.some((c) => c.cohort_id === selected)) {
    const hot = st.cohorts.find((c) => c.incidents > 0);
    selected = (hot || st.cohorts[0]).cohort_id;
  }
  box.innerHTML = st.cohorts.map((c) => `
    <button class="cohort${c.cohort_id === selected ? " selected" : ""}" data-cohort="${esc(c.cohort_id)}"
            data-testid="cohort">
      <div class="name">${esc(c.cohort_id || "(unregistered)")}</div>
      <div class="counts">${c.jobs} jobs · ${c.events} events · ${c.checkpoints} checkpoints
        ${c.incidents ? `· <span class="bad">${c.incidents} incident(s)</span>` : ""}
        ${c.tainted ? `· <span class="bad">${c.tainted} tainted</span>` : ""}</div>
    </button>`).join("");
  box.querySelectorAll(".cohort").forEach((b) => b.addEventListener("click", () => {
    selected = b.dataset.cohort; drawnKey = null; render(lastState);
  }));
}

function renderJobs(st) {
  $("jobs").tBodies[0].innerHTML = st.jobs.map((j) => `
    <tr data-testid="job" data-job="${esc(j.job_id)}" data-state="${esc(j.state)}">
      <td><b>${esc(j.job_id)}</b></td><td>${esc(j.cohort_id)}</td>
      <td class="num">${esc(j.incarnation)}</td><td class="num">${j.last_step === null ? "–" : esc(j.last_step)}</td>
      <td><span class="badge st-${slug(j.state)}" data-testid="job-state">${esc(j.state)}</span>
        ${j.rollbacks && j.state !== "rolled back" ? `<span class="badge st-rolled-back">↺ rolled back ×${esc(j.rollbacks)}</span>` : ""}
        ${j.halted ? `<span class="badge st-halted">${esc(j.halted)}</span>` : ""}</td>
      <td data-testid="job-retention">${j.retention ? `${esc(j.retention.kept)} kept · ${esc(j.retention.deletable)} deletable · ${esc(j.retention.deleted)} deleted`
        : '<span class="empty">all kept</span>'}</td>
    </tr>`).join("") || '<tr><td colspan="6" class="empty">no job yet</td></tr>';
}

function renderIncidents(st) {
  const box = $("incidents");
  if (!st.incidents.length) { box.innerHTML = '<p class="empty">none</p>'; return; }
  box.innerHTML = st.incidents.map((x) => {
    const r = x.root || {};
    const cont = (x.contaminated || []).map((c) =>
      `<li><b>${esc(c.job_id)}</b> (inc ${esc(c.incarnation)}) via <code>${esc(c.via_checkpoint_id)}</code>
       <span class="label">path ${esc((c.path || []).join(" → "))}</span></li>`).join("");
    const sec = (x.secondary_divergences || []).map((s) =>
      `<li>${esc(s.job_id)} (inc ${esc(s.incarnation)}) at step ${esc(s.onset_step)}</li>`).join("");
    const taint = (x.tainted_checkpoints || []).map((c) =>
      `<span class="chip"><b>TAINTED</b><code>${esc(c)}</code></span>`).join(" ");
    return `<div class="incident" data-testid="incident" data-root="${esc(r.job_id)}">
      <div class="title">incident <code>${esc(short(x.incident_id))}</code> · cohort ${esc(x.cohort_id)}</div>
      <div>root <b data-testid="incident-root">${esc(r.job_id)}</b> (incarnation ${esc(r.incarnation)}),
        onset at step ${esc(r.onset_step)} · verdict <span class="verdict" data-testid="incident-verdict">${esc(x.verdict)}</span>
        ${x.attributed_to ? `→ ${esc(x.attributed_to.map(short).join(", "))}` : ""}</div>
      <div class="label">contaminated</div>
      ${cont ? `<ul data-testid="incident-contaminated">${cont}</ul>` : '<div class="empty">nobody</div>'}
      ${sec ? `<div class="label">secondary divergences</div><ul>${sec}</ul>` : ""}
      <div class="label">tainted checkpoints</div><div class="chips">${taint || '<span class="empty">none</span>'}</div>
    </div>`;
  }).join("");
}

function ackCell(p) {
  if (p.record !== "RollbackCommand") return '<span class="badge ack-none">—</span>';
  if (p.acknowledged) {
    return `<span class="badge ack-yes" data-testid="plan-ack">acknowledged ✓ RolledBack seq ${esc(p.acknowledged_by_seq)}</span>`;
  }
  return '<span class="badge ack-no" data-testid="plan-ack">waiting for the job</span>';
}

function renderPlans(st) {
  $("plans").tBodies[0].innerHTML = st.plans.map((p) => {
    const target = p.record === "PlanCleared" ? `ends <code>${esc(short(p.supersedes))}</code>`
      : (p.target_checkpoint_id ? `<code>${esc(p.target_checkpoint_id)}</code> (step ${esc(p.target_step)})` : "from scratch");
    return `<tr data-testid="plan" data-job="${esc(p.job_id)}" data-record="${esc(p.record)}"
                data-acknowledged="${p.acknowledged}" class="${p.in_force || p.record !== "RollbackCommand" ? "" : "superseded"}">
      <td><b>${esc(p.job_id)}</b></td><td class="num">${esc(p.incarnation)}</td><td>${esc(p.action)}</td>
      <td>${target}</td><td><code>${esc(short(p.command_id))}</code></td><td>${ackCell(p)}</td></tr>`;
  }).join("") || '<tr><td colspan="6" class="empty">no plan published</td></tr>';
  const sig = st.signatures || { checked: false, unverified: [] };
  $("signatures").textContent = sig.checked
    ? (sig.unverified.length ? `${sig.unverified.length} control record(s) did not verify under the trusted keys: left out (forged?)`
      : "control signatures verified under the trusted keys")
    : "control signatures NOT checked (the page was started without --trusted-keys): a forged command would show as a plan";
  $("signatures").dataset.checked = String(sig.checked);
  $("unverified").innerHTML = sig.unverified.map((u) => `
    <li data-testid="unverified-record" data-job="${esc(u.job_id)}"><span class="badge st-halted">${esc(u.reason)}</span>
      ${esc(u.record)} <code>${esc(short(u.command_id))}</code> for <b>${esc(u.job_id)}</b> at ${esc(u.position)}</li>`).join("");
  $("halts").tBodies[0].innerHTML = st.halts.map((h) => `
    <tr data-testid="halt" data-job="${esc(h.job_id)}"><td><b>${esc(h.job_id)}</b></td>
      <td><span class="badge st-halted">${esc(h.reason)}</span></td><td>${esc(h.detail)}</td>
      <td>${h.published ? "yes" : "not yet"}</td></tr>`).join("")
    || '<tr><td colspan="4" class="empty">no halt</td></tr>';
}

function renderTaintAndAlerts(st) {
  $("tainted").innerHTML = st.tainted.map((t) => `
    <a class="chip" data-testid="tainted-checkpoint" data-checkpoint="${esc(t.checkpoint_id)}"
       href="/checkpoints/${encodeURIComponent(t.checkpoint_id)}" title="${esc(t.job_id)} step ${esc(t.step)}">
      <b>TAINTED</b><code>${esc(t.checkpoint_id)}</code></a>`).join("") || '<p class="empty">none</p>';
  $("alert-count").textContent = st.records.alerts ? `${st.records.alerts} on lineage.alerts, newest first` : "";
  $("alerts").innerHTML = st.alerts.map((a) => `
    <li data-testid="alert" data-kind="${esc(a.kind)}"><span class="label">${esc(time(a.ts))}</span>
      <span class="kind k-${esc(a.kind)}">${esc(a.kind)}</span>${a.job_id ? `<b>${esc(a.job_id)}</b> ` : ""}${esc(a.message)}</li>`
  ).join("") || '<li class="empty">no alert</li>';
}

function renderStatus(st, ok) {
  const s = $("status");
  const errs = Object.entries(st.errors || {}).map(([t, e]) => `${t}: ${e}`);
  s.className = "status" + (ok && !errs.length ? "" : " down");
  s.textContent = (ok ? `live · updated ${new Date().toLocaleTimeString()}` : "disconnected: showing the last state")
    + ` · ${st.records.input} input batches, ${st.records.control} commands, ${st.records.alerts} alerts`
    + (errs.length ? ` · ${errs.join("; ")}` : "");
}

async function refreshDrawing(st) {
  const c = (st.cohorts || []).find((x) => x.cohort_id === selected);
  $("lineage-cohort").textContent = selected === null ? "—" : (selected || "(unregistered)");
  if (!c || drawingInFlight || drawnKey === `${selected}:${c.changes}`) return;
  drawingInFlight = true;
  try {
    const r = await fetch(`/api/lineage/${encodeURIComponent(selected)}`, {cache: "no-store"});
    const d = await r.json();
    if (d.cohort_id !== selected) return;
    if (d.svg) { $("lineage").innerHTML = d.svg; }
    else if (d.error) { $("lineage").innerHTML = `<p class="err">${esc(d.error)}</p>`; }
    if (!d.stale) drawnKey = `${selected}:${d.changes}`;
    $("lineage-note").textContent = d.stale ? "drawing the latest records…" : `${c.events} events`;
  } catch (e) { /* the next poll tries again */ } finally { drawingInFlight = false; }
}

function render(st) {
  if (!st) return;
  renderCohorts(st); renderJobs(st); renderIncidents(st); renderPlans(st); renderTaintAndAlerts(st);
}

async function poll() {
  try {
    const r = await fetch("/api/state", {cache: "no-store"});
    const st = await r.json();
    if (!lastState || st.version !== lastState.version) render(st);
    lastState = st;
    renderStatus(st, true);
    refreshDrawing(st);
  } catch (e) {
    if (lastState) renderStatus(lastState, false); else $("status").textContent = "cannot reach the server";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

$("ck-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const id = $("ck-input").value.trim();
  if (!id) return;
  const out = $("ck-result");
  try {
    const d = await (await fetch(`/checkpoints/${encodeURIComponent(id)}`)).json();
    const cls = d.status === "tainted" ? "chip" : "badge " + (d.status === "clean" ? "ack-yes" : "ack-none");
    out.innerHTML = `<span class="${cls}" data-testid="ck-status" data-status="${esc(d.status)}">${esc(d.status.toUpperCase())}</span>`
      + (d.job_id ? ` ${esc(d.job_id)} step ${esc(d.step)}` : "")
      + ((d.incident_ids || []).length ? ` · incident ${esc(d.incident_ids.map(short).join(", "))}` : "")
      + ` · <a href="/checkpoints/${encodeURIComponent(id)}" style="color:#9cc0ff">JSON</a>`;
  } catch (e) { out.textContent = "lookup failed"; }
});

poll();
