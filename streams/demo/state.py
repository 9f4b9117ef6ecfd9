"""What a running demo knows so far: the live view's state, and how each report of a job
process or of the referee changes it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DemoJob:
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

    def apply(self, kind: str, data: dict[str, Any]) -> None:
        """One message of the job's process (see :mod:`streams.demo.processes`)."""
        if data.get("incarnation") is not None:
            self.incarnation = data["incarnation"]
        if kind == "started":
            self.status = "training"
        elif kind == "progress":
            self.step, self.loss = data["step"], data["loss"]
            if self.status in ("starting", "restored"):
                self.status = "training"
        elif kind == "consumed":
            self.detail = f"step {data['step']}: {data['mode']} {data['checkpoint_id']}"
        elif kind == "refused":
            self.detail = f"step {data['step']}: gate refused {data['mode']} {data['checkpoint_id']}"
        elif kind == "diverged":
            self.status = "diverged"
            self.detail = f"{data['detector']} at step {data['step']}; waiting for the referee"
        elif kind == "rolled_back":
            self.status = "restored"
            self.step = data.get("step") or 0
            self.detail = f"{data['action']} to {data['checkpoint_id']} (command {str(data['command_id'])[:12]})"
        elif kind == "finished":
            self.status = data["status"]
        elif kind == "result":
            self.status = data.get("status", self.status)
            self.step = data.get("step", self.step)
            self.incarnation = data.get("incarnation", self.incarnation)
            if data.get("final_loss") is not None:
                self.loss = data["final_loss"]
        elif kind == "crashed":
            self.status = "CRASHED"
            self.detail = data.get("error", "")[:120]


@dataclass
class DemoState:
    """What the run knows so far (updated by :func:`streams.demo.run.run_demo`, read by the live
    view)."""

    phase: str = "starting"
    progress: str = ""           # a detail of the phase (records exported, events replayed, ...)
    started: float = field(default_factory=time.monotonic)
    jobs: dict[str, DemoJob] = field(default_factory=dict)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    work_dir: str = ""
    bootstrap: str = ""
    workers: list[str] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def job(self, job_id: str) -> DemoJob:
        return self.jobs.setdefault(job_id, DemoJob(job_id))

    def refresh_referee(self, views: list[dict[str, Any]]) -> None:
        """The referee's ``/jobs`` view of each job."""
        for v in views:
            jv = self.jobs.get(v.get("job_id"))
            if jv is not None:
                jv.referee_step, jv.referee_incarnation = v.get("last_step"), v.get("incarnation")
                jv.referee_halted = v.get("halted")
