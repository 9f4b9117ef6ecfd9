"""What the live page shows, folded from the pipeline's records (no Kafka, no HTTP).

The processor's input (``lineage.by-cohort``: ``EventBatch`` records, in the order the worker
folded them) goes through :func:`streams.referee.input.fold_batch` into a
:class:`~streams.referee.referee.Referee`, the worker's own code, so jobs, incidents, verdicts,
plans, halts and taint are exactly the worker's. The commands come from ``lineage.control`` as
published (a ``RollbackCommand`` is acknowledged when the fold has a ``RolledBack`` with its
``command_id``); the alerts from ``lineage.alerts``. Every method takes the state's lock: the
follower threads write, the HTTP threads read.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Mapping

from streams.control.commands import action_of, command_from_record
from streams.codec import Codec, DecodeError
from streams.core.project import halts as fold_halts
from streams.core.state import Config
from streams.files.archive import LogRecord
from streams.referee.input import BadBatch, fold_batch, read_batch
from streams.records import Alert
from streams.referee.referee import Referee
from streams.signing import check_control, unverified_row

#: alerts kept for the page (the newest)
MAX_ALERTS = 200
#: tainted checkpoints listed (the count is always whole)
MAX_TAINTED = 500
#: control records that are plans (a HaltCommand is a halt)
_PLAN_RECORDS = {"RollbackCommand", "PlanCleared", "QuarantineNotice"}


def incident_ids(lin: Any, ck: Any) -> list[str]:
    """The incidents a checkpoint's taint comes from (the worker's ``/checkpoints`` rule)."""
    return sorted({x for s in ck.sources or () for x in
                   (lin.verdicts[s].incident_ids if s in lin.verdicts else ())})


def retention_view(lin: Any, job_id: str) -> dict[str, Any] | None:
    """A job's checkpoints as the referee last decided their retention (SPEC §13): how many it
    may delete, keeps (by reason) and deleted; None before any decision (no settle horizon)."""
    book = lin.book()
    view = book.views.get(job_id)
    if view is None:
        return None
    _version, deletable, kept = view
    reasons: dict[str, int] = {}
    for _ck, why, _by in kept:
        reasons[why] = reasons.get(why, 0) + 1
    return {"deletable": len(deletable), "kept": len(kept), "kept_by_reason": reasons,
            "deleted": sum(1 for j in book.deleted.values() if j == job_id)}


def job_state(job: Any, plan: dict[str, Any] | None, acknowledged: dict[str, Any]) -> str:
    """One word for a job: halted, diverged, rollback planned, finished, rolled back, running."""
    inc = job.current
    if job.halt_reason:
        return "halted"
    if inc is not None and inc.number in job.diverged:
        return "diverged"
    if plan is not None and plan.get("action") != "CLEAR" and plan.get("command_id") not in acknowledged:
        return "rollback planned"
    if inc is not None and inc.finished:
        return "finished"
    if job.rollbacks or (inc is not None and inc.start_kind in ("restore", "scratch")):
        return "rolled back"
    return "running"


class UIState:
    """The follower's fold and the page's views of it. With ``trusted`` (a keyring) every control
    record is verified as a job client verifies it: one that does not verify is never shown as a
    plan, only listed as left out (``signatures.unverified``)."""

    def __init__(self, config: Config | None = None, codec: Codec | None = None,
                 trusted: Mapping[str, Any] | None = None) -> None:
        self.trusted = trusted
        self.unverified: deque[dict[str, Any]] = deque(maxlen=MAX_ALERTS)
        self.lock = threading.RLock()
        self.codec = codec or Codec()
        self.referee = Referee(config)
        #: the records the drawing re-folds (the report's ``build`` reads an AuditLog of them)
        self.input: list[LogRecord] = []
        self.control: list[LogRecord] = []
        self.commands: list[dict[str, Any]] = []
        self.alerts: deque[Alert] = deque(maxlen=MAX_ALERTS)
        self.alert_total = 0
        #: cohort -> records of it seen (input batches and control records): the drawing's cache key
        self.changes: dict[str, int] = {}
        self.events: dict[str, int] = {}
        self.undecodable = 0
        self.errors: dict[str, str] = {}
        self.version = 0

    # ------------------------------------------------------------------ records in

    def add_input(self, rec: LogRecord) -> None:
        """One ``lineage.by-cohort`` record, folded as the worker folded it."""
        with self.lock:
            self.version += 1
            try:
                batch = read_batch(self.codec, rec.value)
            except BadBatch:
                self.undecodable += 1
                return
            self.input.append(rec)
            fold_batch(self.codec, self.referee, rec.value, rec.partition, rec.offset, rec.timestamp, False)
            self.changes[batch.cohort] = self.changes.get(batch.cohort, 0) + 1
            self.events[batch.cohort] = self.events.get(batch.cohort, 0) + len(batch.events)

    def add_control(self, rec: LogRecord) -> None:
        """One ``lineage.control`` record: a plan, a halt or something else published."""
        with self.lock:
            self.version += 1
            try:
                name, value = self.codec.decode_record(rec.value or b"")
            except DecodeError:
                self.undecodable += 1
                return
            if self.trusted is not None:
                check = check_control(name, value, self.trusted)
                if not check.ok:
                    self.unverified.append({**unverified_row(name, value, check), "position": rec.where})
                    return
            self.control.append(rec)
            cohort = value.get("cohort_id") or self._cohort_of(value.get("job_id"))
            self.changes[cohort] = self.changes.get(cohort, 0) + 1
            cmd = command_from_record(name, value)  # read through its type (streams.records)
            if cmd is None:
                return
            self.commands.append({
                "record": name, "command_id": cmd.command_id, "job_id": cmd.job_id, "cohort_id": cohort,
                "incarnation": cmd.incarnation, "action": action_of(name, value),
                "target_checkpoint_id": cmd.target_checkpoint_id, "target_step": cmd.target_step,
                "reason": cmd.reason, "incident_ids": list(cmd.incident_ids), "supersedes": cmd.supersedes,
                "issued_ts": cmd.issued_ts, "position": rec.where,
            })

    def add_alert(self, alert: Alert) -> None:
        with self.lock:
            self.version += 1
            self.alerts.append(alert)
            self.alert_total += 1

    def note_error(self, topic: str, message: str | None) -> None:
        """What went wrong reading ``topic`` (None: nothing now), shown on the page."""
        with self.lock:
            if message is None:
                self.errors.pop(topic, None)
            else:
                self.errors[topic] = message

    def _cohort_of(self, job_id: str | None) -> str:
        for cohort, lin in self.referee.engines.items():
            if job_id in lin.state.jobs:
                return cohort
        return ""

    # ------------------------------------------------------------------ views out

    def checkpoint(self, checkpoint_id: str) -> dict[str, Any]:
        """The worker's ``/checkpoints/{id}`` answer, from this fold."""
        with self.lock:
            for lin in self.referee.engines.values():
                ck = lin.state.checkpoints.get(checkpoint_id)
                if ck is not None:
                    return {"checkpoint_id": ck.id, "status": "tainted" if ck.sources else "clean",
                            "job_id": ck.job_id, "incarnation": ck.incarnation, "step": ck.step,
                            "content_hash": ck.content_hash, "incident_ids": incident_ids(lin, ck),
                            "retention": lin.book().status_of(ck.job_id, ck.id), "source": "ui"}
            return {"checkpoint_id": checkpoint_id, "status": "unknown"}

    def drawing_input(self, cohort: str) -> tuple[int, list[LogRecord], list[LogRecord]]:
        """What the drawing of ``cohort`` needs: its change count, the input and control records."""
        with self.lock:
            return self.changes.get(cohort, 0), list(self.input), list(self.control)

    def view(self) -> dict[str, Any]:
        """The page's JSON (``/api/state``)."""
        with self.lock:
            engines = sorted(self.referee.engines.items())
            acked: dict[str, Any] = {}
            for _c, lin in engines:
                acked.update(lin.state.acknowledged)
            return {
                "version": self.version,
                "records": {"input": len(self.input), "control": len(self.control), "alerts": self.alert_total,
                            "undecodable": self.undecodable},
                "errors": dict(self.errors),
                "cohorts": [self._cohort_view(c, lin) for c, lin in engines],
                "jobs": [self._job_view(c, lin, j, acked) for c, lin in engines
                         for j in sorted(lin.state.jobs.values(), key=lambda j: j.job_id)],
                "incidents": [{**x, "cohort_id": x.get("cohort_id") or c} for c, lin in engines
                              for x in sorted(lin.incidents.values(), key=lambda v: v["incident_id"])],
                "plans": self._plans(acked),
                "halts": self._halts(engines),
                "tainted": self._tainted(engines),
                "alerts": [{"type": a.NAME, **a.to_value()} for a in list(reversed(self.alerts))[:50]],
                "signatures": {"checked": self.trusted is not None, "unverified": list(reversed(self.unverified))[:50]},
            }

    def _cohort_view(self, cohort: str, lin: Any) -> dict[str, Any]:
        return {"cohort_id": cohort, "events": self.events.get(cohort, 0), "changes": self.changes.get(cohort, 0),
                "jobs": len(lin.state.jobs), "incidents": len(lin.incidents),
                "tainted": sum(1 for ck in lin.state.checkpoints.values() if ck.sources),
                "checkpoints": len(lin.state.checkpoints)}

    @staticmethod
    def _job_view(cohort: str, lin: Any, job: Any, acked: dict[str, Any]) -> dict[str, Any]:
        inc = job.current
        return {"job_id": job.job_id, "cohort_id": job.cohort_id if job.cohort_id is not None else (cohort or None),
                "incarnation": inc.number if inc else None, "last_step": inc.last_step if inc else None,
                "state": job_state(job, lin.plans.get(job.job_id), acked), "rollbacks": job.rollbacks,
                "halted": job.halt_reason, "diverged": sorted(job.diverged),
                "retention": retention_view(lin, job.job_id)}

    def _plans(self, acked: dict[str, Any]) -> list[dict[str, Any]]:
        """The plan records published, each with its acknowledgement; the last of a job is in force."""
        last: dict[str, int] = {}
        plans = [c for c in self.commands if c["record"] in _PLAN_RECORDS]
        for i, c in enumerate(plans):
            last[c["job_id"]] = i
        out = []
        for i, c in enumerate(plans):
            ack = acked.get(c["command_id"] or "")
            out.append({**c, "in_force": last[c["job_id"]] == i and c["record"] != "PlanCleared",
                        "acknowledged": ack is not None, "acknowledged_by_seq": ack[1] if ack else None})
        return out

    def _halts(self, engines: list[tuple[str, Any]]) -> list[dict[str, Any]]:
        published = {c["job_id"] for c in self.commands if c["record"] == "HaltCommand"}
        return [{**h, "cohort_id": c, "published": h["job_id"] in published}
                for c, lin in engines for h in fold_halts(lin.state)]

    @staticmethod
    def _tainted(engines: list[tuple[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for c, lin in engines:
            for ck in lin.state.checkpoints.values():
                if ck.sources and len(out) < MAX_TAINTED:
                    out.append({"checkpoint_id": ck.id, "cohort_id": c, "job_id": ck.job_id,
                                "incarnation": ck.incarnation, "step": ck.step,
                                "incident_ids": incident_ids(lin, ck)})
        return sorted(out, key=lambda t: (t["cohort_id"], t["job_id"], t["step"]))
