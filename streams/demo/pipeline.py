"""``traintrace demo``: the live pipeline refereeing six real training jobs (no printing).

:func:`run_demo` makes a fresh run (topics under a new prefix, a new consumer group, its own
directories under ``work_dir``), starts ``workers`` real ``traintrace worker`` processes, then
runs the six jobs of :mod:`streams.demo.scenario` as separate processes (``spawn``), each with
the real :class:`streams.client.JobClient`. j1's learning rate blows up and it really diverges;
j2 copies j1's checkpoint after the onset, j3 before it. The workers detect it and publish the
plans; the affected jobs restore their targets, acknowledge with ``RolledBack`` and finish.

When the jobs are done it waits until the pipeline is quiescent, reads everything back (events,
control, manifests, alerts, the workers' ``/incidents`` view), writes the events to
``work_dir/events.jsonl`` (decoded, per partition in offset order: each job's events in its
order, as ``traintrace analyze`` wants them) and the report to ``work_dir/report.json``, checks
the story against :func:`streams.demo.scenario.expected`, and returns the report (a dict, the
``--json`` output of the command).

The audit trail: at the start a processor signing key is generated into ``work_dir/keys/``
(``processor.key``, 0600, and ``processor-<key id>.pub``, the keyring) and the workers sign every
``LineageCommitment`` with it. At the end, once the pipeline is quiescent, the run's topics are
exported to ``work_dir/log.avro`` (:func:`streams.audit.export.export`, every default topic),
that archive is audited with the keyring (:func:`streams.audit.audit.audit`; the report's
``as_dict()`` in ``work_dir/audit.json``) and drawn (:mod:`streams.report.report`:
``work_dir/lineage.html`` with the audit's verdict block, ``work_dir/lineage.png``). The report's
``audit`` section has the verdict per check, the files, and the commands that redo it; the story
checks "audit of the demo's log passes" and "report written" hold when the audit passed with
signed commitments checked and both files came out.

While it runs, ``on_tick(state)`` (a :class:`DemoState`) is called a few times a second from
the calling thread: what the job processes report through a multiprocessing queue (step,
loss, incarnation, status), the referee's ``/jobs`` view and the alerts followed on
``lineage.alerts``.

The jobs start only once the workers' consumer group is stable and every worker has recovered
its assignment (see :func:`_wait_group_ready`).

Gate modes (``JobClient(gate=...)``): ``warn`` (default) lets j2 load ``j1-110`` whatever the
referee says of it (a tainted or unknown answer is only logged), so the whole story happens: j2
is contaminated and rolled back. ``refuse`` makes j2's client refuse that load (``GateRefused``; the job skips the
exploit and trains on with its own weights): j2 is never contaminated, and only j1 is rolled
back. The expected facts are adjusted accordingly (:func:`expected_for`). In refuse mode the
clients keep asking the referee for a while about a checkpoint it does not know yet
(``gate_unknown_wait``), so a clean checkpoint written a moment ago is not refused.
"""

from __future__ import annotations

import streams.demo  # noqa: F401  (one BLAS thread per process: before anything imports numpy)

import json
import logging
import multiprocessing
import os
import queue
import re
import signal
import threading
import time
import traceback
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from streams.errors import TraintraceError

__all__ = ["DemoError", "DemoState", "JobView", "audit_run", "check_story", "delete_run_topics",
           "expected_for", "redo_commands", "run_demo"]

log = logging.getLogger("traintrace.demo")

GATES = ("warn", "refuse")


class DemoError(TraintraceError):
    """The demo could not run (a worker did not start, the pipeline never settled, ...)."""


# ------------------------------------------------------------------------------------ state


@dataclass
class JobView:
    """One job as the live view shows it."""

    job_id: str
    status: str = "starting"     # starting, training, diverged, waiting, restored, SUCCEEDED, ...
    step: int = 0
    loss: float | None = None
    incarnation: int = 0
    detail: str = ""
    referee_step: int | None = None
    referee_incarnation: int | None = None
    referee_halted: str | None = None


@dataclass
class DemoState:
    """What the run knows so far (updated by :func:`run_demo`, read by the live view)."""

    phase: str = "starting"
    progress: str = ""           # a detail of the phase (records exported, events replayed, ...)
    started: float = field(default_factory=time.monotonic)
    jobs: dict[str, JobView] = field(default_factory=dict)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    work_dir: str = ""
    bootstrap: str = ""
    workers: list[str] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


# ------------------------------------------------------------------- the job processes


class _ReportingClient:
    """A ``JobClient`` that also tells the parent what the job does (progress, divergence, end)."""

    def __init__(self, inner: Any, job_id: str, q: Any) -> None:
        self._inner = inner
        self._job_id = job_id
        self._q = q

    def _put(self, kind: str, **data: Any) -> None:
        try:
            self._q.put_nowait((kind, self._job_id, {"incarnation": self._inner.incarnation, **data}))
        except Exception:  # the live view is best effort; the record is the client's business
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def start(self, *a: Any, **kw: Any) -> Any:
        out = self._inner.start(*a, **kw)
        self._put("started")
        return out

    def progress(self, step: int, epoch: int, loss: float, grad_norm: float | None = None,
                 lr: float | None = None) -> Any:
        out = self._inner.progress(step, epoch, loss, grad_norm=grad_norm, lr=lr)
        self._put("progress", step=step, loss=loss)
        return out

    def consumed(self, source_checkpoint_id: str, step: int, mode: str, **kw: Any) -> Any:
        try:
            out = self._inner.consumed(source_checkpoint_id, step, mode, **kw)
        except Exception as exc:
            self._put("refused", step=step, checkpoint_id=source_checkpoint_id, mode=mode,
                      why=str(exc)[:200])
            raise
        self._put("consumed", step=step, checkpoint_id=source_checkpoint_id, mode=mode)
        return out

    def diverged(self, onset_step: int, detector: str, reason: str) -> Any:
        out = self._inner.diverged(onset_step, detector, reason)
        self._put("diverged", step=onset_step, detector=detector)
        return out

    def finished(self, status: str = "SUCCEEDED", final_checkpoint_id: str | None = None) -> Any:
        out = self._inner.finished(status, final_checkpoint_id)
        self._put("finished", status=status, checkpoint_id=final_checkpoint_id)
        return out


class _ReportingFactory:
    """Wraps :class:`streams.demo.jobs.JobClientFactory`: the client reports to ``q``, and so
    does the rollback callback (once the job restored its state)."""

    def __init__(self, inner: Any, q: Any) -> None:
        self.inner = inner
        self.q = q

    def __call__(self, job_id: str, cohort_id: str, base_model: str, **callbacks: Any) -> Any:
        holder: dict[str, Any] = {}
        on_rollback = callbacks.get("on_rollback")

        def rollback(cmd: Any) -> Any:
            # what the job's callback returns (how it restored, if it says) goes back to the client
            done = on_rollback(cmd) if on_rollback is not None else None
            client = holder.get("client")
            try:
                self.q.put_nowait(("rolled_back", job_id, {
                    "incarnation": (client.incarnation + 1) if client is not None else None,
                    "step": cmd.target_step, "checkpoint_id": cmd.target_checkpoint_id,
                    "command_id": cmd.command_id, "action": cmd.action}))
            except Exception:
                pass
            return done

        callbacks["on_rollback"] = rollback
        client = _ReportingClient(self.inner(job_id, cohort_id, base_model, **callbacks), job_id, self.q)
        holder["client"] = client
        return client


def _job_main(job_id: str, cohort_dir: str, journal_root: str, log_path: str, steps: int,
              client_kwargs: dict[str, Any], job_kwargs: dict[str, Any], q: Any) -> None:
    """What one demo process runs: :func:`streams.demo.scenario.run_scenario_job`'s job, with a
    client that reports to the parent through ``q``."""
    import streams.demo  # noqa: F401  (the BLAS variables, before numpy)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        force=True)
    try:
        from streams.demo.jobs import JobClientFactory, run_job
        from streams.demo.scenario import cohort_spec

        spec = cohort_spec(job_id, steps=steps)
        factory = _ReportingFactory(JobClientFactory(Path(journal_root), **client_kwargs), q)
        result = run_job(spec, factory, cohort_dir=cohort_dir, **job_kwargs)
        q.put(("result", job_id, result.to_dict()))
    except BaseException as exc:
        logging.getLogger("traintrace.demo").exception("job %s crashed", job_id)
        q.put(("crashed", job_id, {"error": f"{type(exc).__name__}: {exc}",
                                    "traceback": traceback.format_exc()[-4000:]}))
        raise
    finally:
        try:
            q.close()
            q.join_thread()
        except Exception:
            pass


# --------------------------------------------------------------------- expected facts


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


# ------------------------------------------------------------------------ reading back


def _read_topic(bootstrap: str, topic: str) -> list[Any]:
    """Every record of ``topic``, per partition in offset order (partitions in order)."""
    from streams.kafka.reader import read_to_end

    msgs = list(read_to_end(bootstrap, topic))
    msgs.sort(key=lambda m: (m.partition, m.offset))
    return msgs


def _decode_events(bootstrap: str, topic: str, codec: Any) -> tuple[list[dict[str, Any]], int]:
    from streams.codec import DecodeError

    out, bad = [], 0
    for m in _read_topic(bootstrap, topic):
        try:
            ev = codec.decode_event(m.value)
        except DecodeError:
            bad += 1
            continue
        out.append(ev)
    return out, bad


def _decode_records(bootstrap: str, topic: str, codec: Any) -> list[tuple[str, dict[str, Any]]]:
    from streams.codec import DecodeError

    out = []
    for m in _read_topic(bootstrap, topic):
        try:
            out.append(codec.decode_record(m.value))
        except DecodeError:
            continue
    return out


def _worker_views(workers: list[Any], path: str, key: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for w in workers:
        try:
            out.extend(w.get(path, timeout=5.0).get(key, []))
        except Exception as exc:  # a worker that does not answer: the others (or the topics) do
            log.warning("worker %s: GET %s failed: %s", w.web_port, path, exc)
    return out


# ---------------------------------------------------------------------------- the report


def _json_safe(x: Any) -> Any:
    """NaN and infinities as null (the report is strict JSON; events.jsonl keeps them)."""
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _commands(control: list[tuple[str, dict[str, Any]]], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    acks = {e["command_id"]: e for e in events if e["type"] == "RolledBack" and e.get("command_id")}
    out = []
    for name, rec in control:
        ack = acks.get(rec.get("command_id")) if name == "RollbackCommand" else None
        out.append({
            "type": name,
            "command_id": rec.get("command_id"),
            "job_id": rec.get("job_id"),
            "incarnation": rec.get("incarnation"),
            "action": rec.get("action") if name == "RollbackCommand" else (
                "QUARANTINE" if name == "QuarantineNotice" else ("CLEAR" if name == "PlanCleared" else
                                                                  rec.get("reason"))),
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
        })
    # what became of each command: acknowledged; or outrun (the job had already rolled back that
    # incarnation with another command of the same plan); superseded; informative records
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


def _job_reports(job_ids: list[str], results: dict[str, dict[str, Any]], crashed: dict[str, dict[str, Any]],
                 events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_job[e["job_id"]].append(e)
    out = {}
    for j in job_ids:
        evs = sorted(by_job.get(j, []), key=lambda e: e["seq"])
        finished = [e for e in evs if e["type"] == "JobFinished"]
        rolled = [e for e in evs if e["type"] == "RolledBack"]
        r = results.get(j)
        rep: dict[str, Any] = {
            "status": (r or {}).get("status") or (finished[-1]["status"] if finished else
                                                  ("CRASHED" if j in crashed else "UNKNOWN")),
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
        if j in crashed:
            rep["error"] = crashed[j].get("error")
        out[j] = rep
    return out


def _timing(incidents: list[dict[str, Any]], commands: list[dict[str, Any]], events: list[dict[str, Any]],
            total_s: float, phases: dict[str, float]) -> dict[str, Any]:
    t_div = None
    source = None
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


def check_story(report: dict[str, Any], exp: dict[str, Any]) -> list[dict[str, Any]]:
    """The facts of the run against ``exp`` (:func:`expected_for`): one check per fact, each
    ``{"check", "ok", "detail"}``. Timing is never checked."""
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool, detail: str = "") -> None:
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    incidents = report["incidents"]
    root = exp["root"]
    add("one incident", len(incidents) == 1, f"{len(incidents)} incident(s)")
    inc = incidents[0] if len(incidents) == 1 else None
    if inc is not None:
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
    rollbacks = [c for c in report["commands"] if c["type"] == "RollbackCommand"]
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in rollbacks:
        by_job[c["job_id"]].append(c)
    for j, plan in sorted(exp["rollbacks"].items()):
        cmds = by_job.get(j, [])
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
    consumed = {(j, c[0], c[1]) for j, job in report["jobs"].items() for c in job.get("consumed", [])}
    missing = [c for c in exp["clean_consumptions"] if tuple(c) not in consumed]
    add("clean consumptions", not missing,
        "missing " + ", ".join(f"{j} {m} {ck}" for j, ck, m in missing) if missing
        else f"{len(exp['clean_consumptions'])} done")
    refused = {(j, c[0], c[1]) for j, job in report["jobs"].items() for c in job.get("refused", [])}
    want_refused = {tuple(r) for r in exp.get("refused", [])}
    add("gate refusals", refused == want_refused,
        ", ".join(f"{j} {m} {ck}" for j, ck, m in sorted(refused)) or "none")
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
    return checks


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


def _offline(events: list[dict[str, Any]], live_incidents: list[dict[str, Any]]) -> dict[str, Any]:
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


# ------------------------------------------------------------------- the audit trail


def _q(path: Any) -> str:
    import shlex

    return shlex.quote(str(path))


def redo_commands(work: Path) -> list[str]:
    """The commands that redo the demo's audit, its lineage report and the offline analysis."""
    return [
        f"traintrace audit {_q(work / 'log.avro')} --trusted-keys {_q(work / 'keys')}",
        f"traintrace report {_q(work / 'log.avro')} --out {_q(work / 'lineage.html')} "
        f"--audit {_q(work / 'audit.json')}",
        f"traintrace analyze {_q(work / 'events.jsonl')}",
    ]


def audit_run(bootstrap: str, topics: Any, work: Path, key_id: str | None,
              status: Callable[[str, str], None] | None = None) -> dict[str, Any]:
    """Export the run's topics to ``work/log.avro``, audit the archive with the keyring of
    ``work/keys`` into ``work/audit.json``, draw ``work/lineage.html`` and ``work/lineage.png``.

    Returns the report's ``audit`` section. Never raises for what goes wrong on the way (an
    export, an audit or a drawing that fails): the section says so in ``error`` and the story
    checks fail. ``status(phase, detail)`` is told what is going on."""
    from streams.codec import Codec, DecodeError
    from streams.audit.audit import audit as run_audit, finding_line
    from streams.audit.log import load_archive
    from streams.audit.export import DEFAULT_TOPICS, export

    def say(phase: str, detail: str = "") -> None:
        if status is not None:
            status(phase, detail)

    paths = {"log": work / "log.avro", "audit": work / "audit.json", "html": work / "lineage.html",
             "png": work / "lineage.png", "keys": work / "keys"}
    out: dict[str, Any] = {
        "passed": False, "verdict": "ERROR", "error": None, "checks": [], "key_id": key_id,
        "signed_commitments": 0, "events": 0,
        "paths": {k: str(v) for k, v in paths.items()},
        "commands": redo_commands(work),
        "log": None, "files": {}, "timing": {},
    }
    stage = "export"
    t = time.monotonic()
    try:
        say("exporting the log", "")
        summary = export(bootstrap, topics, str(paths["log"]), topics=DEFAULT_TOPICS,
                         progress=lambda topic, n: say("exporting the log", f"{topic}: {n} records"))
        exp = summary.as_dict()
        out["log"] = {"records": exp["records"], "total": exp["total"], "bytes": exp["bytes"]}
        out["timing"]["export_s"] = round(time.monotonic() - t, 3)

        stage, t = "audit", time.monotonic()
        say("auditing the log", "")
        from streams.signing import load_keyring

        keyring = load_keyring(paths["keys"])
        log_ = load_archive(str(paths["log"]))
        rep = run_audit(log_, None, keyring,
                        progress=lambda st, done, total: say("auditing the log", f"{st} {done}/{total}"))
        d = rep.as_dict()
        paths["audit"].write_text(json.dumps(d, indent=2, sort_keys=True, default=str) + "\n")
        codec, signed = Codec(), 0
        for rec in log_.topic("commitments"):
            try:
                _name, v = codec.decode_record(rec.value or b"")
            except DecodeError:
                continue
            if v.get("signature") and v.get("key_id") in keyring:
                signed += 1
        out.update({
            "passed": bool(d["passed"]), "verdict": d["verdict"], "events": d["events"],
            "signed_commitments": signed, "trusted_keys": sorted(keyring),
            "checks": [{"name": c["name"], "title": c["title"], "verdict": c["verdict"],
                        "checked": c["checked"], "failed": c["failed"], "warned": c["warned"],
                        "failures": [finding_line(f, lambda v: str(v)[:60]) for f in c["failures"][:5]],
                        "notes": list(c["notes"][:5]) + [f"{k}: {v}" for k, v in c.get("counts", {}).items()]}
                       for c in d["checks"]],
        })
        out["timing"]["audit_s"] = round(time.monotonic() - t, 3)

        stage, t = "report", time.monotonic()
        say("drawing the lineage report", "")
        from streams.report.report import build, render_html, render_png, render_svg

        model = build(log_)
        cohorts = model.order()
        svgs = {c: render_svg(model.cohorts[c], source=model.source, events=model.cohorts[c].events,
                              summary=False) for c in cohorts}
        page = render_html(model, cohorts=cohorts, audit=d, audit_path=str(paths["audit"]),
                           audit_href="audit.json", svgs=svgs)
        paths["html"].write_text(page, encoding="utf-8")
        pngs: dict[str, str] = {}
        for i, c in enumerate(cohorts):  # the demo has one cohort: lineage.png
            path = paths["png"] if i == 0 else work / f"lineage-{re.sub(r'[^A-Za-z0-9._-]+', '_', c)}.png"
            cm = model.cohorts[c]
            path.write_bytes(render_png(cm, source=paths["log"].name, events=cm.events, audit=d))
            pngs[c] = str(path)
        png = paths["png"].read_bytes() if paths["png"].exists() else b""
        out["files"] = {
            "html_bytes": len(page.encode("utf-8")), "html_has_svg": "<svg" in page,
            "png_bytes": len(png), "png_is_png": png.startswith(b"\x89PNG\r\n\x1a\n"),
            "png_by_cohort": pngs,
            "cohorts": {c: model.cohorts[c].counts() for c in cohorts},
            "dropped_labels": {c: svgs[c][1].dropped_labels for c in cohorts},
        }
        out["timing"]["report_s"] = round(time.monotonic() - t, 3)
    except Exception as exc:  # the run is over: report what went wrong, do not lose the rest
        log.exception("the demo's %s failed", stage)
        out["error"] = f"{stage} failed: {type(exc).__name__}: {exc}"
        out["timing"][f"{stage}_s"] = round(time.monotonic() - t, 3)
        if stage != "report":
            out["passed"], out["verdict"] = False, "ERROR"
    return out


# ------------------------------------------------------------------------------ the run


#: What a Faust worker logs (at INFO) when it has taken an assignment, and when it has recovered
#: its tables and sought its stream partitions for it.
_ASSIGNED_LINE = "Executing _on_partitions_assigned"
_READY_LINE = "Worker ready"


def _recovered(log_path: Path | None) -> bool:
    """The worker's last assignment is followed by its "Worker ready" (recovery done)."""
    try:
        text = Path(log_path).read_text(errors="replace") if log_path else ""
    except OSError:
        return False
    assigned = text.rfind(_ASSIGNED_LINE)
    return assigned >= 0 and text.rfind(_READY_LINE) > assigned


def _wait_group_ready(bootstrap: str, app_id: str, workers: list[Any], topics: Any, partitions: int,
                      timeout: float, notes: list[str] | None = None) -> float:
    """Wait until the workers' consumer group is STABLE with one member per worker, holding every
    partition of the events and by-cohort topics between them, and every worker has finished the
    recovery of that assignment; returns the seconds waited.

    A worker answers ``/health`` before it has joined the group, and joins, is assigned, then
    recovers its tables and seeks its partitions. Jobs started before that see their partitions
    move between workers in the middle of the run, and (seen once in ~30 runs with two workers,
    when a recovery took seconds) the first events of a partition never committed before can be
    skipped by the router: the job is then halted UNREGISTERED. The recovery is read from the
    worker's log (Faust logs it at INFO); if it never shows, the run goes on after ``timeout``
    with a note."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    want = {(t, p) for t in (topics.events, topics.by_cohort) for p in range(partitions)}
    t0 = time.monotonic()
    last = "no answer"
    stable_since: float | None = None
    while time.monotonic() - t0 < timeout:
        try:
            d = admin.describe_consumer_groups([app_id], request_timeout=5)[app_id].result(timeout=10)
            held = {(tp.topic, tp.partition) for m in d.members for tp in m.assignment.topic_partitions}
            last = f"{d.state}, {len(d.members)} member(s), {len(want & held)}/{len(want)} partitions"
            stable = d.state == ConsumerGroupState.STABLE and len(d.members) == len(workers) and want <= held
        except Exception as exc:  # the group may not exist yet
            last, stable = str(exc), False
        if stable:
            stable_since = stable_since or time.monotonic()
            if all(_recovered(w.log_path) for w in workers):
                return time.monotonic() - t0
            last = "stable, a worker is still recovering its assignment"
        else:
            stable_since = None
        time.sleep(0.25)
    if stable_since is not None:  # stable, but no "Worker ready" seen: go on, say so
        if notes is not None:
            notes.append(f"no worker log said '{_READY_LINE}' within {timeout:g}s; the jobs started anyway")
        return time.monotonic() - t0
    raise DemoError(f"the workers' consumer group {app_id} did not settle within {timeout:g}s ({last})")


def _stop_workers(workers: list[Any], timeout: float = 30.0) -> None:
    for w in workers:
        if w.proc is not None and w.proc.poll() is None:
            try:
                os.killpg(w.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for w in workers:
        if w.proc is None:
            continue
        try:
            w.proc.wait(max(0.1, deadline - time.monotonic()))
        except Exception:
            try:
                os.killpg(w.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            w.proc.wait(10)


def _stop_jobs(procs: dict[str, Any], timeout: float = 15.0) -> None:
    for p in procs.values():
        if p.is_alive():
            p.terminate()  # SIGTERM: the job closes its client (flushes) and exits
    deadline = time.monotonic() + timeout
    for p in procs.values():
        p.join(max(0.1, deadline - time.monotonic()))
    for p in procs.values():
        if p.is_alive():
            p.kill()
            p.join(5)


class _Follower(threading.Thread):
    """Follows ``lineage.alerts`` (decoded) and polls the workers' ``/jobs`` into queues."""

    def __init__(self, bootstrap: str, topic: str, workers: list[Any], codec: Any) -> None:
        super().__init__(name="demo-follower", daemon=True)
        self.bootstrap, self.topic, self.workers, self.codec = bootstrap, topic, workers, codec
        self.alerts: queue.Queue[dict[str, Any]] = queue.Queue()
        self.referee: dict[str, dict[str, Any]] = {}
        self.stop = threading.Event()
        self._seen: set[tuple[int, int]] = set()
        self._jobs_thread = threading.Thread(target=self._poll_jobs, name="demo-jobs", daemon=True)

    def run(self) -> None:
        from streams.kafka.reader import follow

        self._jobs_thread.start()
        while not self.stop.is_set():
            try:
                # from the beginning (the topic is this run's own); idle: check the stop flag
                for m in follow(self.bootstrap, self.topic, from_beginning=True, idle_timeout=2.0,
                                poll_interval=0.2):
                    if (m.partition, m.offset) in self._seen:
                        continue
                    self._seen.add((m.partition, m.offset))
                    try:
                        name, rec = self.codec.decode_record(m.value)
                    except Exception:
                        continue
                    if name == "Alert":
                        self.alerts.put(rec)
                    if self.stop.is_set():
                        break
            except Exception as exc:  # the live view is best effort
                log.debug("following alerts: %s", exc)
                self.stop.wait(1.0)

    def _poll_jobs(self) -> None:
        while not self.stop.wait(1.0):
            for j in _worker_views(self.workers, "/jobs", "jobs"):
                self.referee[j["job_id"]] = j


def run_demo(bootstrap: str, work_dir: str | os.PathLike[str], *, gate: str = "warn", workers: int = 1,
             partitions: int = 4, steps: int | None = None, live: bool = False,
             on_tick: Callable[[DemoState], None] | None = None, tick_interval: float = 0.25,
             jobs_timeout: float = 150.0, worker_timeout: float = 90.0) -> dict[str, Any]:
    """Run the demo once (see the module doc) and return its report.

    ``work_dir`` must be new or empty (the jobs' journals are there: a previous run's would make
    them continue). ``live``: follow the alerts and poll the workers' ``/jobs`` for the live view;
    ``on_tick(state)`` is called every ``tick_interval`` s while the jobs run. Raises
    :class:`DemoError` when the pipeline cannot run; ``KeyboardInterrupt`` stops everything it
    started (jobs, workers) and propagates.
    """
    from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
    from streams.codec import Codec
    from streams.demo.scenario import COHORT_ID, STEPS, default_cohort, describe
    from streams.operators.plans import effective_plans
    from streams.worker.process import WorkerProcess, wait_quiescent

    if gate not in GATES:
        raise ValueError(f"gate must be one of {GATES}, not {gate!r}")
    if workers < 1:
        raise ValueError("at least one worker")
    steps = steps or STEPS
    t0 = time.monotonic()
    phases: dict[str, float] = {}
    work = Path(work_dir).resolve()
    if work.exists() and any(work.iterdir()):
        raise DemoError(f"work directory {work} is not empty (a previous run's journals would be "
                        f"continued): give a new one")
    for sub in ("logs", "journals", "cohort", "workers"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    codec = Codec()
    run_id = uuid.uuid4().hex[:8]
    prefix = f"demo{run_id}."
    topics = TopicNames.from_env(prefix)
    app_id = f"traintrace-demo-{run_id}"
    specs = default_cohort(steps=steps)
    job_ids = [s.job_id for s in specs]
    state = DemoState(work_dir=str(work), bootstrap=bootstrap,
                      jobs={j: JobView(j) for j in job_ids})
    exp = expected_for(gate, steps)

    def tick(phase: str | None = None) -> None:
        if phase is not None:
            state.phase = phase
            state.progress = ""
        if on_tick is not None:
            on_tick(state)

    last_status = [0.0]

    def status(phase: str, detail: str = "") -> None:
        """A phase (always shown) or its progress (shown every ``tick_interval`` at most)."""
        if phase != state.phase:
            state.phase, state.progress = phase, detail
        else:
            state.progress = detail
            if time.monotonic() - last_status[0] < tick_interval:
                return
        last_status[0] = time.monotonic()
        if on_tick is not None:
            on_tick(state)

    # the processor's signing key: the workers sign every commitment, the audit checks them
    from streams.signing import SigningError, write_keypair

    try:
        keypair = write_keypair(work / "keys")
    except SigningError as exc:
        raise DemoError(f"cannot write the demo's signing key: {exc}") from exc

    started_workers: list[Any] = []
    procs: dict[str, Any] = {}
    follower: _Follower | None = None
    results: dict[str, dict[str, Any]] = {}
    crashed: dict[str, dict[str, Any]] = {}
    try:
        tick("creating topics")
        ensure_topics(bootstrap, standard_topics(topics, partitions))
        tick(f"starting {workers} worker(s)")
        for i in range(workers):
            w = WorkerProcess(bootstrap, prefix, app_id, work / "workers" / f"w{i + 1}", partitions,
                              extra_args=["--commit-interval", "0.2", "--loglevel", "info",
                                          "--signing-key", str(keypair.private_path),
                                          "--commitment-interval", "2"])
            started_workers.append(w.start())
        for w in started_workers:
            try:
                w.wait_ready(worker_timeout)
            except (RuntimeError, TimeoutError) as exc:
                raise DemoError(f"a worker did not start: {exc}") from exc
        state.workers = [f"http://127.0.0.1:{w.web_port}" for w in started_workers]
        tick("waiting for the workers to share the partitions")
        _wait_group_ready(bootstrap, app_id, started_workers, topics, partitions, worker_timeout, state.notes)
        phases["setup_s"] = time.monotonic() - t0

        if live:
            follower = _Follower(bootstrap, topics.alerts, started_workers, codec)
            follower.start()

        tick("starting the jobs")
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        t_jobs = time.monotonic()
        client_kwargs_base: dict[str, Any] = {"bootstrap": bootstrap, "topics": topics, "gate": gate}
        if gate == "refuse":
            client_kwargs_base["gate_unknown_wait"] = 30.0
        # generous waits: a diverged job waits for its command, a sharing action for the peer's
        # checkpoint; on a loaded machine the referee or a peer may be late by seconds
        job_kwargs = {"nan_wait_s": 60.0, "peer_wait_s": 90.0, "halt_wait_s": 60.0}
        # the job processes start with SIGINT ignored (inherited through exec): a Ctrl-C on the
        # terminal reaches the whole process group, and stopping the jobs is this function's job
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
        try:
            for n, j in enumerate(job_ids):
                kw = dict(client_kwargs_base, worker_url=state.workers[n % len(state.workers)])
                p = ctx.Process(target=_job_main, name=f"demo-{j}",
                                args=(j, str(work / "cohort"), str(work / "journals"),
                                      str(work / "logs" / f"{j}.log"), steps, kw, job_kwargs, q))
                p.start()
                procs[j] = p
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous)
        tick("training")

        deadline = t_jobs + jobs_timeout
        done: set[str] = set()
        next_tick = time.monotonic()
        while len(done) < len(job_ids):
            try:
                kind, j, data = q.get(timeout=0.05)
                _apply(state, kind, j, data, results, crashed, done)
            except queue.Empty:
                pass
            now = time.monotonic()
            if follower is not None:
                while True:
                    try:
                        state.alerts.append(follower.alerts.get_nowait())
                    except queue.Empty:
                        break
                _refresh_referee(state, list(follower.referee.values()))
            if now >= next_tick:
                tick()
                next_tick = now + tick_interval
            for j, p in procs.items():
                if j not in done and not p.is_alive() and p.exitcode is not None:
                    # its last message may still be in the pipe
                    try:
                        while True:
                            kind, jj, data = q.get(timeout=0.5)
                            _apply(state, kind, jj, data, results, crashed, done)
                    except queue.Empty:
                        pass
                    if j not in done:
                        crashed[j] = {"error": f"process exited with code {p.exitcode}"}
                        state.jobs[j].status = "CRASHED"
                        done.add(j)
            if now > deadline:
                for j in job_ids:
                    if j not in done:
                        crashed[j] = {"error": f"still running after {jobs_timeout:g}s: stopped"}
                        state.jobs[j].status = "TIMED OUT"
                state.notes.append(f"jobs still running after {jobs_timeout:g}s were stopped")
                break
        _stop_jobs(procs)
        phases["jobs_s"] = time.monotonic() - t_jobs

        tick("waiting for the pipeline to settle")
        t_read = time.monotonic()
        try:
            wait_quiescent(bootstrap, app_id, topics, timeout=60.0, settle=0.5)
        except TimeoutError as exc:
            state.notes.append(str(exc))
        if follower is not None:
            _refresh_referee(state, _worker_views(started_workers, "/jobs", "jobs"))
        tick("reading the topics back")
        events, undecodable = _decode_events(bootstrap, topics.events, codec)
        control = _decode_records(bootstrap, topics.control, codec)
        manifests = [r for n, r in _decode_records(bootstrap, topics.manifests, codec) if n == "DivergenceManifest"]
        alerts = [r for n, r in _decode_records(bootstrap, topics.alerts, codec) if n == "Alert"]
        plans = effective_plans(bootstrap, topics, codec)
        incidents = list({x["incident_id"]: x for x in reversed(
            _worker_views(started_workers, "/incidents", "incidents"))}.values())  # one per id
        incidents_from = "worker /incidents"
        latest: dict[str, dict[str, Any]] = {}
        for m in manifests:
            if m["incident_id"] not in latest or m["version"] > latest[m["incident_id"]]["version"]:
                latest[m["incident_id"]] = m
        if not incidents and latest:
            incidents, incidents_from = [dict(m) for m in latest.values()], "lineage.manifests"
        incidents = sorted(incidents, key=lambda x: x["incident_id"])
        for x in incidents:
            m = latest.get(x["incident_id"])
            x["manifest_versions"] = m["version"] if m else 0
            x["commitment_root"] = m.get("commitment_root") if m else None
        events_path = work / "events.jsonl"
        with open(events_path, "w", encoding="utf-8") as fh:
            for e in events:
                fh.write(json.dumps(e) + "\n")
        commands = _commands(control, events)
        phases["readback_s"] = time.monotonic() - t_read
        # the audit trail: the topics into an archive, audited with the keyring, drawn
        t_audit = time.monotonic()
        audit = audit_run(bootstrap, topics, work, keypair.key_id, status)
        phases.update(audit["timing"])
        phases["audit_trail_s"] = time.monotonic() - t_audit
        total = time.monotonic() - t0
        report: dict[str, Any] = {
            "cohort_id": COHORT_ID,
            "gate": gate,
            "steps": steps,
            "workers": len(started_workers),
            "story": describe(specs),
            "incidents": incidents,
            "incidents_from": incidents_from,
            "plans": plans,
            "commands": commands,
            "jobs": _job_reports(job_ids, results, crashed, events),
            "alerts": [{k: a.get(k) for k in ("kind", "job_id", "checkpoint_id", "incident_id", "message", "ts")}
                       for a in alerts],
            "events": {"count": len(events), "undecodable": undecodable, "path": str(events_path),
                       "by_type": dict(sorted(_count(e["type"] for e in events).items()))},
            "timing": _timing(incidents, commands, events, total, phases),
            "expected": exp,
            "work_dir": str(work),
            "logs": {"jobs": str(work / "logs"), "workers": [str(w.log_path) for w in started_workers],
                     "journals": str(work / "journals"), "checkpoints": str(work / "cohort"),
                     "events": str(events_path), "report": str(work / "report.json"),
                     "keys": str(work / "keys"), **{k: audit["paths"][k] for k in ("log", "audit", "html", "png")}},
            "audit": audit,
            "topics": {"prefix": prefix, **topics.all()},
            "app_id": app_id,
            "bootstrap": bootstrap,
            "notes": list(state.notes),
        }
        report["offline"] = _offline(events, incidents)
        report["checks"] = check_story(report, exp)
        report["story_ok"] = all(c["ok"] for c in report["checks"])
        report = _json_safe(report)
        (work / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        tick("done")
        return report
    finally:
        _cleanup(follower, procs, started_workers)


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for x in items:
        out[x] += 1
    return out


def _cleanup(follower: _Follower | None, procs: dict[str, Any], workers: list[Any]) -> None:
    """Stop everything the run started; a second Ctrl-C meanwhile does not cut it short (it is
    raised again once everything is stopped)."""
    interrupted = None
    steps: list[Callable[[], Any]] = []
    if follower is not None:
        steps.append(follower.stop.set)
    steps += [lambda: _stop_jobs(procs), lambda: _stop_workers(workers)]
    if follower is not None:
        steps.append(lambda: follower.join(2.5))
    for step in steps:
        while True:
            try:
                step()
                break
            except KeyboardInterrupt as exc:
                interrupted = exc  # and do the step again: stopping is idempotent
    if interrupted is not None:
        raise interrupted


def delete_run_topics(bootstrap: str, report: dict[str, Any], timeout: float = 30.0) -> int:
    """Delete the topics and consumer groups of a finished run (its prefix's topics, the
    workers' internal ``<app_id>-…`` topics): a local broker that runs the demo often does not
    collect them. Returns the number of topics deleted; best effort (errors are ignored)."""
    from confluent_kafka.admin import AdminClient

    prefix, app_id = report["topics"]["prefix"], report["app_id"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        names = [t for t in admin.list_topics(timeout=timeout).topics
                 if t.startswith(prefix) or t.startswith(app_id + "-")]
        if names:
            for fut in admin.delete_topics(names, operation_timeout=timeout).values():
                try:
                    fut.result()
                except Exception:
                    pass
        groups = [g for g in (app_id, f"{app_id}-published")]
        for fut in admin.delete_consumer_groups(groups, request_timeout=timeout).values():
            try:
                fut.result()
            except Exception:  # a group that never committed does not exist
                pass
        return len(names)
    except Exception as exc:
        log.warning("could not delete the demo's topics (%s*): %s", prefix, exc)
        return 0


def _refresh_referee(state: DemoState, views: list[dict[str, Any]]) -> None:
    """The referee's ``/jobs`` view of each job onto the live state."""
    for v in views:
        jv = state.jobs.get(v.get("job_id"))
        if jv is not None:
            jv.referee_step, jv.referee_incarnation = v.get("last_step"), v.get("incarnation")
            jv.referee_halted = v.get("halted")


def _apply(state: DemoState, kind: str, j: str, data: dict[str, Any], results: dict[str, dict[str, Any]],
           crashed: dict[str, dict[str, Any]], done: set[str]) -> None:
    """One message of a job process onto the live state."""
    jv = state.jobs.setdefault(j, JobView(j))
    if data.get("incarnation") is not None:
        jv.incarnation = data["incarnation"]
    if kind == "started":
        jv.status = "training"
    elif kind == "progress":
        jv.step, jv.loss = data["step"], data["loss"]
        if jv.status in ("starting", "restored"):
            jv.status = "training"
    elif kind == "consumed":
        jv.detail = f"step {data['step']}: {data['mode']} {data['checkpoint_id']}"
    elif kind == "refused":
        jv.detail = f"step {data['step']}: gate refused {data['mode']} {data['checkpoint_id']}"
    elif kind == "diverged":
        jv.status = "diverged"
        jv.detail = f"{data['detector']} at step {data['step']}; waiting for the referee"
    elif kind == "rolled_back":
        jv.status = "restored"
        jv.step = data.get("step") or 0
        jv.detail = f"{data['action']} to {data['checkpoint_id']} (command {str(data['command_id'])[:12]})"
    elif kind == "finished":
        jv.status = data["status"]
    elif kind == "result":
        results[j] = data
        jv.status = data.get("status", jv.status)
        jv.step = data.get("step", jv.step)
        jv.incarnation = data.get("incarnation", jv.incarnation)
        if data.get("final_loss") is not None:
            jv.loss = data["final_loss"]
        done.add(j)
    elif kind == "crashed":
        crashed[j] = data
        jv.status = "CRASHED"
        jv.detail = data.get("error", "")[:120]
        done.add(j)
