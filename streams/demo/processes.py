"""The demo's job processes: one ``spawn`` process per job of :mod:`streams.demo.scenario`, each
with the real :class:`streams.client.JobClient`, wrapped so that it also tells the parent what
the job does (a multiprocessing queue of ``(kind, job_id, data)``: started, progress, consumed,
refused, diverged, rolled_back, finished, then result or crashed)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.demo.blas import one_thread_per_process
from streams.demo.state import DemoState

#: generous waits: a diverged job waits for its command, a sharing action for the peer's
#: checkpoint; on a loaded machine the referee or a peer may be late by seconds
JOB_WAITS = {"nan_wait_s": 60.0, "peer_wait_s": 90.0, "halt_wait_s": 60.0}
#: the job client's stats sent to the parent when it closes (``control`` messages)
CONTROL_STATS = ("control_authenticated", "commands_seen", "commands_applied", "commands_rejected")


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

    def close(self, *a: Any, **kw: Any) -> Any:
        try:  # what the client did with lineage.control (the secure demo checks it)
            st = self._inner.stats()
            self._put("control", **{k: st.get(k) for k in CONTROL_STATS})
        except Exception:
            pass
        return self._inner.close(*a, **kw)


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


def _log_to(log_path: str) -> None:
    """This process's stdout, stderr and logging into ``log_path``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        force=True)


def job_main(job_id: str, cohort_dir: str, journal_root: str, log_path: str, steps: int,
             client_kwargs: dict[str, Any], job_kwargs: dict[str, Any], q: Any,
             framework: str = "numpy") -> None:
    """What one demo process runs: :func:`streams.demo.scenario.run_scenario_job`'s job (on
    PyTorch with ``framework="torch"``: :mod:`streams.demo.torch_job`), with a client that
    reports to the parent through ``q``."""
    # the variables come from the parent's environment already; this says that numpy needs them
    one_thread_per_process()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    _log_to(log_path)
    try:
        from streams.demo.jobs import JobClientFactory
        from streams.demo.scenario import cohort_spec

        if framework == "torch":
            from streams.demo.torch_job import run_torch_job as run_job
        else:
            from streams.demo.jobs import run_job

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


@dataclass
class JobRun:
    """The job processes of a run and what they reported."""

    job_ids: list[str]
    procs: dict[str, Any] = field(default_factory=dict)
    queue: Any = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    crashed: dict[str, dict[str, Any]] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    #: job -> its client's CONTROL_STATS at close
    control: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def all_done(self) -> bool:
        return len(self.done) >= len(self.job_ids)

    def start(self, work: Path, steps: int, client_kwargs: dict[str, Any], worker_urls: list[str],
              framework: str = "numpy") -> None:
        """One process per job, each talking to a worker's web view in turn. They start with
        SIGINT ignored (inherited through exec): a Ctrl-C on the terminal reaches the whole
        process group, and stopping the jobs is the parent's job."""
        ctx = multiprocessing.get_context("spawn")
        self.queue = ctx.Queue()
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
        try:
            for n, j in enumerate(self.job_ids):
                kw = dict(client_kwargs, worker_url=worker_urls[n % len(worker_urls)])
                p = ctx.Process(target=job_main, name=f"demo-{j}",
                                args=(j, str(work / "cohort"), str(work / "journals"),
                                      str(work / "logs" / f"{j}.log"), steps, kw, JOB_WAITS, self.queue,
                                      framework))
                p.start()
                self.procs[j] = p
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous)

    def _apply(self, state: DemoState, kind: str, j: str, data: dict[str, Any]) -> None:
        state.job(j).apply(kind, data)
        if kind == "control":
            self.control[j] = data
        elif kind == "result":
            self.results[j] = data
            self.done.add(j)
        elif kind == "crashed":
            self.crashed[j] = data
            self.done.add(j)

    def receive(self, state: DemoState, timeout: float) -> bool:
        """One message of a job process onto ``state``; False when none came within ``timeout``."""
        try:
            kind, j, data = self.queue.get(timeout=timeout)
        except queue.Empty:
            return False
        self._apply(state, kind, j, data)
        return True

    def reap(self, state: DemoState) -> None:
        """A process that exited without its result crashed (its last messages are read first:
        they may still be in the pipe)."""
        for j, p in self.procs.items():
            if j not in self.done and not p.is_alive() and p.exitcode is not None:
                while self.receive(state, 0.5):
                    pass
                if j not in self.done:
                    self.crashed[j] = {"error": f"process exited with code {p.exitcode}"}
                    state.jobs[j].status = "CRASHED"
                    self.done.add(j)

    def time_out(self, state: DemoState, jobs_timeout: float) -> None:
        """The jobs still running after ``jobs_timeout`` count as crashed (and are stopped next)."""
        for j in self.job_ids:
            if j not in self.done:
                self.crashed[j] = {"error": f"still running after {jobs_timeout:g}s: stopped"}
                state.jobs[j].status = "TIMED OUT"
        state.notes.append(f"jobs still running after {jobs_timeout:g}s were stopped")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the job closes its client, which flushes, and exits), then SIGKILL."""
        procs = self.procs.values()
        for p in procs:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
