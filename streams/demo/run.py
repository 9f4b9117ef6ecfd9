"""``traintrace demo``: the live pipeline refereeing six real training jobs (no printing).

:func:`run_demo` makes a fresh run (:mod:`streams.demo.run_setup`: topics under a new prefix, a new
consumer group, its own directories under ``work_dir``, a signing key), starts ``workers`` real
``traintrace worker`` processes (:mod:`streams.demo.workers`), then runs the six jobs of
:mod:`streams.demo.scenario` as separate processes (:mod:`streams.demo.processes`), each with the
real :class:`streams.client.JobClient`. j1's learning rate blows up and it really diverges; j2
copies j1's checkpoint after the onset, j3 before it. The workers detect it and publish the
plans; the affected jobs restore their targets, acknowledge with ``RolledBack`` and finish.

The jobs start only once the workers' consumer group is stable and every worker has recovered
its assignment (:func:`streams.demo.workers.wait_group_ready`).

When the jobs are done it waits until the pipeline is quiescent, reads everything back
(:mod:`streams.demo.readback`), writes the events to ``work_dir/events.jsonl`` (decoded, per
partition in offset order: each job's events in its order, as ``traintrace analyze`` wants them),
exports, audits and draws the run's log (:mod:`streams.demo.audit_trail`), checks the story
against :func:`streams.demo.story.expected_for` and returns the report
(:mod:`streams.demo.outcome`; also in ``work_dir/report.json``).

While it runs, ``on_tick(state)`` (a :class:`streams.demo.state.DemoState`) is called a few times
a second from the calling thread: what the job processes report (step, loss, incarnation,
status), the referee's ``/jobs`` view and the alerts followed on ``lineage.alerts``
(:mod:`streams.demo.follower`).

Gate modes (:mod:`streams.demo.story`): ``warn`` (default) lets the whole story happen;
``refuse`` makes j2's client refuse the tainted load, so only j1 is rolled back. In refuse mode
the clients keep asking the referee for a while about a checkpoint it does not know yet
(``gate_unknown_wait``), so a clean checkpoint written a moment ago is not refused.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from streams.codec import Codec
from streams.demo.audit_trail import audit_run
from streams.demo.follower import Follower
from streams.demo.outcome import build_report
from streams.demo.processes import JobRun
from streams.demo.readback import read_back, write_events
from streams.demo.roles import DemoKafka
from streams.demo.run_setup import RunSetup, new_run
from streams.demo.state import DemoState
from streams.demo.workers import (launch_workers, stop_workers, wait_group_ready, wait_workers_ready,
                                  worker_views)
from streams.kafka.topics import ensure_topics, standard_topics
from streams.devtools.worker_process import wait_quiescent

__all__ = ["run_demo"]

#: how long the clients of the refusing gate keep asking about a checkpoint the referee does not know
GATE_UNKNOWN_WAIT_S = 30.0
#: how long the pipeline may take to commit everything once the jobs are done
QUIESCENT_TIMEOUT_S = 60.0


@dataclass
class _Live:
    """The running parts of a run (stopped whatever happens) and its live state."""

    run: RunSetup
    state: DemoState
    on_tick: Callable[[DemoState], None] | None
    tick_interval: float
    codec: Any
    workers: list[Any] = field(default_factory=list)
    jobs: JobRun | None = None
    follower: Follower | None = None
    phases: dict[str, float] = field(default_factory=dict)
    _last_status: float = 0.0

    def tick(self, phase: str | None = None) -> None:
        """A new phase (if given); the live view is told."""
        if phase is not None:
            self.state.phase = phase
            self.state.progress = ""
        if self.on_tick is not None:
            self.on_tick(self.state)

    def status(self, phase: str, detail: str = "") -> None:
        """A phase (always shown) or its progress (shown every ``tick_interval`` at most)."""
        if phase != self.state.phase:
            self.state.phase, self.state.progress = phase, detail
        else:
            self.state.progress = detail
            if time.monotonic() - self._last_status < self.tick_interval:
                return
        self._last_status = time.monotonic()
        if self.on_tick is not None:
            self.on_tick(self.state)


def run_demo(kafka: DemoKafka | Any, work_dir: str | os.PathLike[str], *, gate: str = "warn",
             workers: int = 1, partitions: int = 4, steps: int | None = None, live: bool = False,
             on_tick: Callable[[DemoState], None] | None = None, tick_interval: float = 0.25,
             jobs_timeout: float = 150.0, worker_timeout: float = 90.0,
             framework: str = "numpy", ui_port: int | None = None) -> dict[str, Any]:
    """Run the demo once (see the module doc) and return its report.

    ``kafka``: a :class:`~streams.demo.roles.DemoKafka` (each role's settings: the secure demo),
    or one ``KafkaSettings`` or bootstrap servers for every client (the plain demo).

    ``work_dir`` must be new or empty (the jobs' journals are there: a previous run's would make
    them continue). ``live``: follow the alerts and poll the workers' ``/jobs`` for the live view;
    ``on_tick(state)`` is called every ``tick_interval`` s while the jobs run. Raises
    :class:`streams.demo.errors.DemoError` when the pipeline cannot run; ``KeyboardInterrupt``
    stops everything it started (jobs, workers) and propagates. ``ui_port``: serve the live
    lineage page (:mod:`streams.ui`) of the run's topics on that port until the run ends.
    """
    run = new_run(kafka, work_dir, gate=gate, workers=workers, partitions=partitions, steps=steps)
    lv = _Live(run, run.new_state(), on_tick, tick_interval, Codec())
    page = None
    try:
        if ui_port is not None:  # up before the workers: a viewer sees the incident arrive
            page = _start_page(run, ui_port)
        _start_pipeline(lv, worker_timeout)
        if live:
            lv.follower = Follower(run.kafka.operator, run.topics.alerts, lv.workers, lv.codec)
            lv.follower.start()
        _train(lv, jobs_timeout, framework)
        report = _finish(lv)
        report["framework"] = framework
        lv.tick("done")
        return report
    finally:
        _stop_everything(lv)
        if page is not None:
            page.stop()


def _start_page(run: RunSetup, port: int) -> Any:
    """The live lineage page of the run's topics (read as the auditor), serving on ``port``."""
    from streams.demo.errors import DemoError
    from streams.ui import UIError, start_ui

    from streams.signing import load_trusted_keys

    try:  # the run's keyring: a forged command would never show as a plan
        return start_ui(run.kafka.auditor, run.topics, port=port, trusted=load_trusted_keys(run.keyring))
    except UIError as exc:
        raise DemoError(str(exc)) from exc


def _start_pipeline(lv: _Live, worker_timeout: float) -> None:
    """The run's topics, its workers, their consumer group settled."""
    run = lv.run
    if run.kafka.secure:
        lv.tick("granting the run's topics their ACLs")
        run.kafka.grant(run.topics, run.app_id)
    lv.tick("creating topics")
    ensure_topics(run.kafka.processor, standard_topics(run.topics, run.partitions))
    lv.tick(f"starting {run.workers} worker(s)")
    launch_workers(run.kafka, run.prefix, run.app_id, run.work, run.workers, run.partitions,
                   run.keypair.private_path, lv.workers, trusted_keys=run.keyring)
    wait_workers_ready(lv.workers, worker_timeout)
    lv.state.workers = [f"http://127.0.0.1:{w.web_port}" for w in lv.workers]
    lv.tick("waiting for the workers to share the partitions")
    wait_group_ready(run.kafka.processor, run.app_id, lv.workers, run.topics, run.partitions, worker_timeout,
                     lv.state.notes)
    lv.phases["setup_s"] = time.monotonic() - run.t0


def _train(lv: _Live, jobs_timeout: float, framework: str = "numpy") -> None:
    """Start the job processes and follow them until each has reported its end (or crashed, or
    ``jobs_timeout`` passed); then stop them."""
    run = lv.run
    lv.tick("starting the jobs")
    t_jobs = time.monotonic()
    client_kwargs: dict[str, Any] = {"bootstrap": run.kafka.trainer, "topics": run.topics, "gate": run.gate}
    if run.kafka.secure:  # the jobs apply only commands signed by a key of the keyring's role
        client_kwargs["trusted_keys"] = str(run.keyring)
    if run.gate == "refuse":
        client_kwargs["gate_unknown_wait"] = GATE_UNKNOWN_WAIT_S
    lv.jobs = jobs = JobRun(run.job_ids)
    jobs.start(run.work, run.steps, client_kwargs, lv.state.workers, framework)
    lv.tick("training")
    deadline = t_jobs + jobs_timeout
    next_tick = time.monotonic()
    while not jobs.all_done:
        jobs.receive(lv.state, 0.05)
        now = time.monotonic()
        if lv.follower is not None:
            lv.follower.update(lv.state)
        if now >= next_tick:
            lv.tick()
            next_tick = now + lv.tick_interval
        jobs.reap(lv.state)
        if now > deadline:
            jobs.time_out(lv.state, jobs_timeout)
            break
    jobs.stop()
    lv.phases["jobs_s"] = time.monotonic() - t_jobs


def _finish(lv: _Live) -> dict[str, Any]:
    """Once the pipeline is quiescent: the topics read back, ``events.jsonl``, the audit trail,
    the report."""
    run = lv.run
    lv.tick("waiting for the pipeline to settle")
    t_read = time.monotonic()
    try:
        wait_quiescent(run.kafka.processor, run.app_id, run.topics, timeout=QUIESCENT_TIMEOUT_S, settle=0.5)
    except TimeoutError as exc:
        lv.state.notes.append(str(exc))
    if lv.follower is not None:
        lv.state.refresh_referee(worker_views(lv.workers, "/jobs", "jobs"))
    lv.tick("reading the topics back")
    back = read_back(run.kafka, run.topics, lv.codec, lv.workers)
    write_events(back.events, run.work / "events.jsonl")
    lv.phases["readback_s"] = time.monotonic() - t_read
    # the audit trail: the topics into an archive, audited with the keyring, drawn
    t_audit = time.monotonic()
    audit = audit_run(run.kafka.auditor, run.topics, run.work, run.keypair.key_id, lv.status)
    lv.phases.update(audit["timing"])
    lv.phases["audit_trail_s"] = time.monotonic() - t_audit
    assert lv.jobs is not None
    return build_report(run, back, lv.jobs, audit, lv.workers, lv.phases, time.monotonic() - run.t0,
                        lv.state.notes)


def _stop_everything(lv: _Live) -> None:
    """Stop everything the run started; a second Ctrl-C meanwhile does not cut it short (it is
    raised again once everything is stopped)."""
    interrupted = None
    follower, jobs = lv.follower, lv.jobs
    steps: list[Callable[[], Any]] = []
    if follower is not None:
        steps.append(follower.stop.set)
    if jobs is not None:
        steps.append(jobs.stop)
    steps.append(lambda: stop_workers(lv.workers))
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
