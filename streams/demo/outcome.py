"""The report of a finished run (a dict, the ``--json`` output of ``traintrace demo``, also
written to ``work_dir/report.json``): the incidents, every command on ``lineage.control`` and what
became of it, each job's end, the timing, the offline fold of the exported events, the audit, and
the story's checks (:func:`streams.demo.story.check_story`)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from streams.control.commands import HALT_RECORD, action_of
from streams.demo.readback import ReadBack
from streams.demo.run_setup import RunSetup
from streams.demo.story import check_story

#: the fields of an alert the report keeps
ALERT_FIELDS = ("kind", "job_id", "checkpoint_id", "incident_id", "message", "ts")


def build_report(run: RunSetup, back: ReadBack, jobs: Any, audit: dict[str, Any], workers: list[Any],
                 phases: dict[str, float], total_s: float, notes: list[str]) -> dict[str, Any]:
    """The report (strict JSON: see :func:`json_safe`), its story checked, written to
    ``report.json``. ``jobs``: the :class:`streams.demo.processes.JobRun`."""
    from streams.demo.scenario import COHORT_ID, describe

    work = run.work
    events_path = work / "events.jsonl"
    commands = command_outcomes(back.control, back.events)
    report: dict[str, Any] = {
        "cohort_id": COHORT_ID,
        "gate": run.gate,
        "steps": run.steps,
        "workers": len(workers),
        "story": describe(run.specs),
        "incidents": back.incidents,
        "incidents_from": back.incidents_from,
        "plans": back.plans,
        "commands": commands,
        "jobs": job_reports(run.job_ids, jobs.results, jobs.crashed, back.events),
        "alerts": [{k: a.get(k) for k in ALERT_FIELDS} for a in back.alerts],
        "events": {"count": len(back.events), "undecodable": back.undecodable, "path": str(events_path),
                   "by_type": dict(sorted(Counter(e["type"] for e in back.events).items()))},
        "timing": timing(back.incidents, commands, back.events, total_s, phases),
        "expected": run.expected,
        "work_dir": str(work),
        "logs": {"jobs": str(work / "logs"), "workers": [str(w.log_path) for w in workers],
                 "journals": str(work / "journals"), "checkpoints": str(work / "cohort"),
                 "events": str(events_path), "report": str(work / "report.json"),
                 "keys": str(work / "keys"), **{k: audit["paths"][k] for k in ("log", "audit", "html", "png")}},
        "audit": audit,
        "topics": {"prefix": run.prefix, **run.topics.all()},
        "app_id": run.app_id,
        "bootstrap": run.kafka.bootstrap,
        "kafka": run.kafka.describe(),
        "control": control_summary(run, jobs.control, audit),
        "notes": list(notes),
    }
    report["offline"] = offline_fold(back.events, back.incidents)
    report["checks"] = check_story(report, run.expected)
    report["story_ok"] = all(c["ok"] for c in report["checks"])
    report = json_safe(report)
    (work / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


def control_summary(run: RunSetup, clients: dict[str, dict[str, Any]], audit: dict[str, Any]) -> dict[str, Any]:
    """Who signed ``lineage.control`` and who verified it: the workers sign with the processor key
    (both demos); the job clients verify against the keyring only in the secure demo."""
    verifying = [j for j, st in clients.items() if st.get("control_authenticated")]
    return {
        "signed_by": {"processor": run.keypair.key_id,
                      **({"operator": run.operator_keypair.key_id} if run.operator_keypair else {})},
        "verified_by_clients": bool(clients) and len(verifying) == len(clients),
        "jobs_verifying": len(verifying),
        "trusted_keys": str(run.keyring) if run.kafka.secure else None,
        "commands_applied": sum(st.get("commands_applied") or 0 for st in clients.values()),
        "commands_rejected": sum(st.get("commands_rejected") or 0 for st in clients.values()),
        "audit_signatures": audit.get("command_signatures") or {},
    }


def json_safe(x: Any) -> Any:
    """NaN and infinities as null (the report is strict JSON; events.jsonl keeps them)."""
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def for_json(report: dict[str, Any]) -> dict[str, Any]:
    """What ``traintrace demo --json`` prints: the report without the story in words."""
    return {k: v for k, v in report.items() if k != "story"}


def _action(name: str, rec: dict[str, Any]) -> Any:
    """What a control record asks: a rollback's action, QUARANTINE, CLEAR (``action_of``), or a
    halt's reason."""
    return rec.get("reason") if name == HALT_RECORD else action_of(name, rec)


def _command(name: str, rec: dict[str, Any], ack: dict[str, Any] | None) -> dict[str, Any]:
    """One control record, with the ``RolledBack`` that acknowledged it (if any)."""
    return {
        "type": name,
        "command_id": rec.get("command_id"),
        "job_id": rec.get("job_id"),
        "incarnation": rec.get("incarnation"),
        "action": _action(name, rec),
        "target_checkpoint_id": rec.get("target_checkpoint_id"),
        "target_step": rec.get("target_step"),
        "incident_ids": sorted(rec.get("incident_ids") or []),
        "supersedes": rec.get("supersedes"),
        "issued_ts": rec.get("issued_ts"),
        "acknowledged_by_seq": ack["seq"] if ack else None,
        "acknowledged_ts": ack["ts"] if ack else None,
        "acknowledged_incarnation": ack["incarnation"] if ack else None,
        "ack_latency_s": (ack["ts"] - rec["issued_ts"]) / 1000.0
        if ack and rec.get("issued_ts") is not None else None,
    }


def command_outcomes(control: list[tuple[str, dict[str, Any]]], events: list[dict[str, Any]]
                     ) -> list[dict[str, Any]]:
    """Every control record and what became of it (``status``): acknowledged; or outrun (the job
    had already rolled back that incarnation with another command of the same plan); superseded;
    informative records (plan ended, quarantine, halt); else NOT ACKNOWLEDGED."""
    acks = {e["command_id"]: e for e in events if e["type"] == "RolledBack" and e.get("command_id")}
    out = [_command(name, rec, acks.get(rec.get("command_id")) if name == "RollbackCommand" else None)
           for name, rec in control]
    superseded = {c["supersedes"] for c in out if c["supersedes"]}
    acked_incs = {(c["job_id"], c["incarnation"]): c for c in out
                  if c["type"] == "RollbackCommand" and c["acknowledged_by_seq"] is not None}
    for c in out:
        if c["type"] != "RollbackCommand":
            c["status"] = {"PlanCleared": "plan ended", "QuarantineNotice": "quarantine",
                           "HaltCommand": "halt"}.get(c["type"], "")
        elif c["acknowledged_by_seq"] is not None:
            c["status"] = "acknowledged"
        elif (c["job_id"], c["incarnation"]) in acked_incs:
            other = acked_incs[(c["job_id"], c["incarnation"])]
            c["status"] = f"outrun: the job had already rolled back with {other['command_id'][:12]}"
            c["outrun_by"] = other["command_id"]
        elif c["command_id"] in superseded:
            c["status"] = "superseded"
        else:
            c["status"] = "NOT ACKNOWLEDGED"
    return out


def _job_report(evs: list[dict[str, Any]], r: dict[str, Any] | None, crash: dict[str, Any] | None
                ) -> dict[str, Any]:
    """One job's end: what its process returned (``r``), else what its events say."""
    finished = [e for e in evs if e["type"] == "JobFinished"]
    rolled = [e for e in evs if e["type"] == "RolledBack"]
    rep: dict[str, Any] = {
        "status": (r or {}).get("status") or (finished[-1]["status"] if finished else
                                              ("CRASHED" if crash is not None else "UNKNOWN")),
        "final_step": (r or {}).get("step"),
        "incarnation": (r or {}).get("incarnation", evs[-1]["incarnation"] if evs else None),
        "rolled_back": bool(rolled),
        "final_loss": (r or {}).get("final_loss"),
        "final_checkpoint_id": (r or {}).get("final_checkpoint_id")
        or (finished[-1]["final_checkpoint_id"] if finished else None),
        "eval_accuracy": (r or {}).get("eval_accuracy"),
        "restored": [{"checkpoint_id": e["restored_checkpoint_id"], "step": e["resumed_step"],
                      "incarnation": e["incarnation"], "command_id": e["command_id"], "seq": e["seq"]}
                     for e in rolled],
        "consumed": [[c["checkpoint_id"], c["mode"], c["step"]] for c in (r or {}).get("consumed", [])],
        "refused": [[c.get("checkpoint_id"), c["mode"], c["step"]] for c in (r or {}).get("refused", [])],
        "divergences": (r or {}).get("divergences", []),
        "events": len(evs),
        "wall_s": (r or {}).get("wall_s"),
    }
    if rep["final_step"] is None and evs:
        steps = [e["step"] for e in evs if e["type"] == "Progress"]
        rep["final_step"] = steps[-1] if steps else None
    if crash is not None:
        rep["error"] = crash.get("error")
    return rep


def job_reports(job_ids: list[str], results: dict[str, dict[str, Any]], crashed: dict[str, dict[str, Any]],
                events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each job's end (see :func:`_job_report`)."""
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_job[e["job_id"]].append(e)
    return {j: _job_report(sorted(by_job.get(j, []), key=lambda e: e["seq"]), results.get(j), crashed.get(j))
            for j in job_ids}


def _divergence_ts(incidents: list[dict[str, Any]], events: list[dict[str, Any]]) -> tuple[Any, str | None]:
    """When the run diverged: the earliest event of an incident's root at its onset step."""
    t_div, source = None, None
    roots = {(x["root"]["job_id"], x["root"]["incarnation"], x["root"]["onset_step"]) for x in incidents}
    for e in events:
        key = (e["job_id"], e["incarnation"])
        for (j, i, onset) in roots:
            if key != (j, i):
                continue
            hit = ((e["type"] == "Progress" and e["step"] == onset)
                   or (e["type"] == "DivergenceReported" and e["onset_step"] == onset))
            if hit and (t_div is None or e["ts"] < t_div):
                t_div, source = e["ts"], f"{e['type']} of {j} (incarnation {i}) at step {onset}"
    return t_div, source


def timing(incidents: list[dict[str, Any]], commands: list[dict[str, Any]], events: list[dict[str, Any]],
           total_s: float, phases: dict[str, float]) -> dict[str, Any]:
    """From the divergence to the first command and to the last acknowledged rollback; the phases."""
    t_div, source = _divergence_ts(incidents, events)
    rollbacks = [c for c in commands if c["type"] == "RollbackCommand"]
    if t_div is None and rollbacks:
        t_div = min(c["issued_ts"] for c in rollbacks)
        source = "the first RollbackCommand"
    acks = [c["acknowledged_ts"] for c in rollbacks if c["acknowledged_ts"] is not None]
    first_cmd = min((c["issued_ts"] for c in rollbacks), default=None)
    out: dict[str, Any] = {
        "divergence_to_last_ack_s": (max(acks) - t_div) / 1000.0 if acks and t_div is not None else None,
        "divergence_to_first_command_s": (first_cmd - t_div) / 1000.0
        if first_cmd is not None and t_div is not None else None,
        "divergence_ts": t_div,
        "divergence_from": source,
        "last_ack_ts": max(acks) if acks else None,
        "total_s": round(total_s, 3),
    }
    out.update({k: round(v, 3) for k, v in phases.items()})
    return out


def offline_fold(events: list[dict[str, Any]], live_incidents: list[dict[str, Any]]) -> dict[str, Any]:
    """``traintrace analyze`` on the exported events: the same incidents as the live pipeline?"""
    from streams.core.cohorts import CohortLineage
    from streams.core.events import parse_event

    lin = CohortLineage()
    lin.apply_many(parse_event(e) for e in events)
    lin.finish_input()
    final = lin.final_state()

    def shape(xs: list[dict[str, Any]]) -> list[Any]:
        return sorted((x["incident_id"], x["verdict"], json.dumps(x["root"], sort_keys=True),
                       sorted((c["job_id"], c["incarnation"], c["via_checkpoint_id"]) for c in x["contaminated"]),
                       sorted((s["job_id"], s["incarnation"], s["onset_step"])
                              for s in x["secondary_divergences"])) for x in xs)

    equal = shape(final["incidents"]) == shape(live_incidents)
    return {"equal": equal, "incidents": len(final["incidents"]), "plans": len(final["plans"]),
            "halts": len(final["halts"]),
            "detail": "analyze of events.jsonl gives the live incidents" if equal
            else "analyze of events.jsonl differs from the live incidents"}
