"""The story the demo must tell: the facts expected of a run (:func:`expected_for`, by gate mode)
and :func:`check_story`, one check per fact of a finished run's report. Timing is never checked.

Gate modes (``JobClient(gate=...)``): ``warn`` (default) lets j2 load ``j1-110`` whatever the
referee says of it (a tainted or unknown answer is only logged), so the whole story happens: j2
is contaminated and rolled back. ``refuse`` makes j2's client refuse that load (``GateRefused``;
the job skips the exploit and trains on with its own weights): j2 is never contaminated, and only
j1 is rolled back.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

GATES = ("warn", "refuse")

#: ``add(check, ok, detail)``: records one check
_Add = Callable[..., None]


def expected_for(gate: str, steps: int | None = None) -> dict[str, Any]:
    """:func:`streams.demo.scenario.expected`, adjusted for the gate mode.

    ``refuse``: j2's client refuses ``j1-110`` (tainted, or not known yet to the referee), so j2
    is neither contaminated nor rolled back, and joins the clean jobs; the refusal is recorded.
    """
    from streams.demo.scenario import default_cohort, expected

    exp = expected(default_cohort(steps=steps) if steps else None)
    exp["gate"] = gate
    if gate == "refuse":
        exp["contaminated"] = []
        exp["secondary_divergence"] = None
        exp["rollbacks"] = {j: p for j, p in exp["rollbacks"].items() if j == exp["root"]["job_id"]}
        exp["clean"] = sorted(set(exp["clean"]) | {"j2"})
        exp["refused"] = [["j2", f"j1-{exp['root']['onset_step']}", "PBT_EXPLOIT"]]
    else:
        exp["refused"] = []
    exp["clean_consumptions"] = [list(c) for c in exp["clean_consumptions"]]
    return exp


def check_story(report: dict[str, Any], exp: dict[str, Any]) -> list[dict[str, Any]]:
    """The facts of the run against ``exp`` (:func:`expected_for`): one check per fact, each
    ``{"check", "ok", "detail"}``. Timing is never checked."""
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool, detail: str = "") -> None:
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    _check_incident(add, report["incidents"], exp)
    rollbacks = [c for c in report["commands"] if c["type"] == "RollbackCommand"]
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in rollbacks:
        by_job[c["job_id"]].append(c)
    for j, plan in sorted(exp["rollbacks"].items()):
        _check_rollback(add, j, plan, by_job.get(j, []), report)
    pending = [c for c in rollbacks if c["status"] == "NOT ACKNOWLEDGED"]
    add("every command acted on", not pending,
        ", ".join(f"{c['job_id']} {c['command_id'][:12]}" for c in pending) or
        f"{len(rollbacks)} rollback command(s): acknowledged, or outrun/superseded by one that was")
    for j in exp["clean"]:
        job = report["jobs"].get(j, {})
        add(f"{j} untouched",
            job.get("status") == "SUCCEEDED" and job.get("incarnation") == 0 and not by_job.get(j)
            and not job.get("rolled_back") and job.get("final_step") == report["steps"],
            f"{job.get('status')} at step {job.get('final_step')}, incarnation {job.get('incarnation')}, "
            f"{len(by_job.get(j, []))} command(s)")
    _check_sharing(add, report, exp)
    _check_records(add, report)
    if (report.get("kafka") or {}).get("secure"):
        _check_signed_control(add, report.get("control") or {})
    return checks


def _check_signed_control(add: Any, control: dict[str, Any]) -> None:
    """The secure demo: every job verified its commands against the keyring and rejected none;
    the audit verified every command signature and rejected none."""
    sigs = control.get("audit_signatures") or {}
    verified = sigs.get("command signatures verified", 0)
    rejected = {k: v for k, v in sigs.items() if k.startswith("command signatures rejected")}
    add("control signed and verified",
        control.get("verified_by_clients") and control.get("commands_rejected") == 0 and verified > 0
        and not rejected,
        f"{control.get('jobs_verifying', 0)} job(s) verifying, {control.get('commands_applied', 0)} command(s) "
        f"applied, {control.get('commands_rejected')} rejected; audit: {verified} signature(s) verified"
        + (f", {rejected}" if rejected else ""))


def _check_incident(add: _Add, incidents: list[dict[str, Any]], exp: dict[str, Any]) -> None:
    """One incident, with the expected root, verdict, contaminated jobs, tainted checkpoints and
    secondary divergences."""
    root = exp["root"]
    add("one incident", len(incidents) == 1, f"{len(incidents)} incident(s)")
    if len(incidents) != 1:
        return
    inc = incidents[0]
    r = inc["root"]
    add("root", (r["job_id"], r["incarnation"], r["onset_step"]) ==
        (root["job_id"], root["incarnation"], root["onset_step"]),
        f"{r['job_id']} incarnation {r['incarnation']} onset {r['onset_step']}")
    add("verdict", inc["verdict"] == root["verdict"], inc["verdict"])
    got = sorted((c["job_id"], c["incarnation"], c["via_checkpoint_id"]) for c in inc["contaminated"])
    want = sorted((c["job_id"], c["incarnation"], c["via_checkpoint_id"]) for c in exp["contaminated"])
    add("contaminated", got == want, ", ".join(f"{j}#{i} via {v}" for j, i, v in got) or "none")
    tainted = set(inc.get("tainted_checkpoints") or [])
    missing = [c for c in exp["tainted_include"] if c not in tainted]
    add("tainted", not missing, "missing " + ", ".join(missing) if missing else
        ", ".join(exp["tainted_include"]) + " tainted")
    sec = exp.get("secondary_divergence")
    secs = inc.get("secondary_divergences") or []
    if sec is None:
        add("secondary divergences", not secs, f"{len(secs)}")
    else:  # seen only if the job computed a step past the consumption before its rollback
        ok = all(s["job_id"] == sec["job_id"] and s["incarnation"] == sec["incarnation"]
                 and s["onset_step"] > sec["onset_after_step"] for s in secs)
        add("secondary divergences", ok, ", ".join(f"{s['job_id']}#{s['incarnation']} at {s['onset_step']}"
                                                   for s in secs) or "none (rolled back first)")


def _check_rollback(add: _Add, j: str, plan: dict[str, Any], cmds: list[dict[str, Any]],
                    report: dict[str, Any]) -> None:
    """Job ``j`` was commanded to its expected target, acknowledged it, restored and finished."""
    inc0 = [c for c in cmds if c["incarnation"] == 0]
    want = (plan["action"], plan["target_checkpoint_id"], plan["target_step"])
    final = inc0[-1] if inc0 else None  # the job's last plan for incarnation 0
    # (the incident ids it names may be an earlier view: a job can roll back on a command
    # issued before the referee saw the root, with the same target)
    ok = final is not None and (final["action"], final["target_checkpoint_id"], final["target_step"]) == want
    add(f"{j} command", ok, ", ".join(f"{c['action']} {c['target_checkpoint_id']} (incarnation "
                                      f"{c['incarnation']}, {c['command_id'][:12]})" for c in cmds)
        or "no command")
    acked = [c for c in inc0 if c["acknowledged_by_seq"] is not None
             and (c["action"], c["target_checkpoint_id"], c["target_step"]) == want]
    add(f"{j} acknowledged", bool(acked),
        "; ".join(f"{c['command_id'][:12]} by RolledBack seq {c['acknowledged_by_seq']}" for c in acked)
        or "no RolledBack with its command_id")
    job = report["jobs"].get(j, {})
    restored = [x["checkpoint_id"] for x in job.get("restored", [])]
    add(f"{j} restored and finished",
        job.get("status") == "SUCCEEDED" and (job.get("incarnation") or 0) >= 1
        and plan["target_checkpoint_id"] in restored and job.get("final_step") == report["steps"],
        f"{job.get('status')} at step {job.get('final_step')}, incarnation {job.get('incarnation')}, "
        f"restored {', '.join(restored) or 'nothing'}")


def _check_sharing(add: _Add, report: dict[str, Any], exp: dict[str, Any]) -> None:
    """The clean consumptions happened; the gate refused exactly what it should."""
    consumed = {(j, c[0], c[1]) for j, job in report["jobs"].items() for c in job.get("consumed", [])}
    missing = [c for c in exp["clean_consumptions"] if tuple(c) not in consumed]
    add("clean consumptions", not missing,
        "missing " + ", ".join(f"{j} {m} {ck}" for j, ck, m in missing) if missing
        else f"{len(exp['clean_consumptions'])} done")
    refused = {(j, c[0], c[1]) for j, job in report["jobs"].items() for c in job.get("refused", [])}
    want_refused = {tuple(r) for r in exp.get("refused", [])}
    add("gate refusals", refused == want_refused,
        ", ".join(f"{j} {m} {ck}" for j, ck, m in sorted(refused)) or "none")


def _check_records(add: _Add, report: dict[str, Any]) -> None:
    """No halts, every event decoded, the offline fold agrees, the audit passed and drew."""
    halts = report["plans"].get("halts", [])
    add("no halts", not halts, ", ".join(f"{h['job_id']} {h['reason']}" for h in halts) or "none")
    add("events decoded", report["events"]["undecodable"] == 0,
        f"{report['events']['count']} events, {report['events']['undecodable']} undecodable")
    off = report.get("offline")
    if off is not None:
        add("offline fold equal", off["equal"], off["detail"])
    au = report.get("audit")
    if au is not None:
        add("audit of the demo's log passes", audit_passed(au), audit_detail(au))
        files = au.get("files") or {}
        wrote = bool(files.get("html_has_svg")) and bool(files.get("png_is_png"))
        add("report written", wrote,
            au["error"] if au.get("error") and not wrote else
            f"lineage.html ({files.get('html_bytes', 0):,} bytes, inline SVG: {bool(files.get('html_has_svg'))}), "
            f"lineage.png ({files.get('png_bytes', 0):,} bytes, PNG: {bool(files.get('png_is_png'))})")


def audit_passed(au: dict[str, Any]) -> bool:
    """The demo's audit passed, and the commitments were among what it checked, signatures
    verified against the run's keyring."""
    commitments = next((c for c in au.get("checks", []) if c["name"] == "commitments"), None)
    return (bool(au.get("passed")) and not au.get("error") and commitments is not None
            and commitments["verdict"] == "PASS" and commitments["checked"] > 0
            and au.get("signed_commitments", 0) == commitments["checked"])


def audit_detail(au: dict[str, Any]) -> str:
    if au.get("error"):
        return au["error"]
    checks = ", ".join(f"{c['name']} {c['verdict']} ({c['checked']} checked"
                       + (f", {c['failed']} failed" if c["failed"] else "") + ")" for c in au.get("checks", []))
    return (f"{'PASSED' if au.get('passed') else 'FAILED'}: {checks}; {au.get('signed_commitments', 0)} "
            f"commitment(s) signed by key {au.get('key_id')}")
