"""The demo's processor workers: real ``traintrace worker`` processes on the run's topics,
signing their commitments; started, waited for until their consumer group has settled, asked
for their web views, stopped."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from streams.demo.errors import DemoError
from streams.demo.roles import DemoKafka
from streams.kafka.settings import KafkaSettings
from streams.devtools.worker_process import WorkerProcess

log = logging.getLogger("traintrace.demo")

#: What a Faust worker logs (at INFO) when it has taken an assignment, and when it has recovered
#: its tables and sought its stream partitions for it.
_ASSIGNED_LINE = "Executing _on_partitions_assigned"
_READY_LINE = "Worker ready"


def launch_workers(kafka: DemoKafka, prefix: str, app_id: str, work: Path, count: int, partitions: int,
                   signing_key: Path, started: list[Any], trusted_keys: Path | None = None) -> None:
    """Start ``count`` workers (data under ``work/workers/w<n>``), appending each to ``started``
    as soon as it runs, so that whatever happens next stops it. They run as the processor
    (``kafka.worker_env()``: its credentials on the secure demo); with ``trusted_keys`` each
    watches the control topic for forgeries (``--trusted-keys``)."""
    watch = ["--trusted-keys", str(trusted_keys)] if trusted_keys is not None else []
    for i in range(count):
        w = WorkerProcess(kafka.bootstrap, prefix, app_id, work / "workers" / f"w{i + 1}", partitions,
                          extra_args=["--commit-interval", "0.2", "--loglevel", "info",
                                      "--signing-key", str(signing_key), "--commitment-interval", "2", *watch],
                          env=kafka.worker_env())
        started.append(w.start())


def wait_workers_ready(workers: list[Any], timeout: float) -> None:
    """Each worker answers ``/health``; raises :class:`DemoError` if one does not."""
    for w in workers:
        try:
            w.wait_ready(timeout)
        except (RuntimeError, TimeoutError) as exc:
            raise DemoError(f"a worker did not start: {exc}") from exc


def _recovered(log_path: Path | None) -> bool:
    """The worker's last assignment is followed by its "Worker ready" (recovery done)."""
    try:
        text = Path(log_path).read_text(errors="replace") if log_path else ""
    except OSError:
        return False
    assigned = text.rfind(_ASSIGNED_LINE)
    return assigned >= 0 and text.rfind(_READY_LINE) > assigned


def _group_state(admin: Any, app_id: str, want: set[tuple[str, int]], members: int) -> tuple[bool, str]:
    """Whether the group is STABLE with ``members`` members holding ``want``; and what it is."""
    from confluent_kafka import ConsumerGroupState

    try:
        d = admin.describe_consumer_groups([app_id], request_timeout=5)[app_id].result(timeout=10)
    except Exception as exc:  # the group may not exist yet
        return False, str(exc)
    held = {(tp.topic, tp.partition) for m in d.members for tp in m.assignment.topic_partitions}
    last = f"{d.state}, {len(d.members)} member(s), {len(want & held)}/{len(want)} partitions"
    return d.state == ConsumerGroupState.STABLE and len(d.members) == members and want <= held, last


def wait_group_ready(kafka: KafkaSettings | str, app_id: str, workers: list[Any], topics: Any, partitions: int,
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
    admin = KafkaSettings.of(kafka).admin()
    want = {(t, p) for t in (topics.events, topics.by_cohort) for p in range(partitions)}
    t0 = time.monotonic()
    last = "no answer"
    stable_since: float | None = None
    while time.monotonic() - t0 < timeout:
        stable, last = _group_state(admin, app_id, want, len(workers))
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


def worker_views(workers: list[Any], path: str, key: str) -> list[dict[str, Any]]:
    """The ``key`` list of every worker's ``GET path`` (a worker that does not answer is left out)."""
    out: list[dict[str, Any]] = []
    for w in workers:
        try:
            out.extend(w.get(path, timeout=5.0).get(key, []))
        except Exception as exc:  # a worker that does not answer: the others (or the topics) do
            log.warning("worker %s: GET %s failed: %s", w.web_port, path, exc)
    return out


def stop_workers(workers: list[Any], timeout: float = 30.0) -> None:
    """SIGTERM to each worker's process group, then SIGKILL to those still there."""
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
