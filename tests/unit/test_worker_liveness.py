"""Liveness a supervisor can trust (issue 23): the watchdog ends a worker that is alive but makes
no progress while records wait, not one whose dependencies are away; ``--supervise`` restarts a
worker that died, not one that stopped cleanly."""

from __future__ import annotations

import sys

from streams.worker.health import Health, Watchdog
from streams.worker.supervise import supervise


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def watchdog(stall_s=60.0):
    clock, health = Clock(), Health()
    return Watchdog(health, stall_s, clock=clock, exit=lambda code: None), clock, health


def test_records_waiting_and_no_progress_is_a_stall():
    w, clock, _ = watchdog()
    for _ in range(10):
        w.beat()
        w.progress({("lineage.events", 2): (100, 5), ("lineage.events", 3): (7, 0)})
        clock.t += 7
    w.beat()
    assert w.verdict() == "records wait on lineage.events[2] and none was processed for 60 s"


def test_progress_or_no_lag_is_no_stall():
    w, clock, _ = watchdog()
    for i in range(20):
        w.beat()
        w.progress({("lineage.events", 2): (100 + i, 5), ("lineage.by-cohort", 0): (9, 0)})
        clock.t += 7
    assert w.verdict() is None


def test_a_dependency_away_is_waited_for_not_a_stall():
    w, clock, health = watchdog()
    health.timer("housekeeping").failed("NOT_COORDINATOR")
    for _ in range(20):
        w.beat()
        w.progress({("lineage.events", 2): (100, 5)})
        clock.t += 7
    w.beat()
    assert w.verdict() is None


def test_an_event_loop_that_stops_turning_is_a_stall():
    w, clock, _ = watchdog(stall_s=60)
    w.beat()
    clock.t += 31
    assert "event loop has not turned for 31 s" in w.verdict()


def test_the_watchdog_exits_70_and_health_says_dead():
    codes = []
    health = Health()
    clock = Clock()
    w = Watchdog(health, 60, clock=clock, exit=codes.append)
    clock.t += 1000
    w.start()
    w.join(5)
    assert codes == [70] and health.view()["state"] == "dead" and "event loop" in health.view()["reason"]


def test_supervise_restarts_a_crashed_worker_until_it_exits_cleanly(tmp_path):
    marker = tmp_path / "runs"
    code = ("import os,sys; p=sys.argv[1]; n=len(open(p).read()) if os.path.exists(p) else 0; "
            "open(p,'a').write('x'); sys.exit(70 if n < 2 else 0)")
    said = []
    assert supervise([sys.executable, "-c", code, str(marker)], first_backoff=0.01, say=said.append) == 0
    assert marker.read_text() == "xxx" and len(said) == 2 and "status 70" in said[0]


def test_supervise_gives_up_after_max_restarts(tmp_path):
    said = []
    assert supervise([sys.executable, "-c", "import sys; sys.exit(3)"], first_backoff=0.01, max_restarts=2,
                     say=said.append) == 3
    assert "giving up" in said[-1]


def test_the_supervised_worker_dies_with_its_supervisor(tmp_path):
    """A supervisor killed with SIGKILL (it cannot pass a signal on) leaves no orphan worker."""
    import os
    import signal
    import subprocess
    import time

    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    code = ("import sys; from streams.worker.supervise import supervise; "
            f"sys.exit(supervise([sys.executable, '-c', {child!r}]))")
    sup = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the supervised child never started"
            time.sleep(0.05)
        child_pid = int(pid_file.read_text())
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait(10)
        deadline = time.monotonic() + 10
        while True:
            try:
                os.kill(child_pid, 0)
            except ProcessLookupError:
                break
            # a zombie (already dead, not yet reaped by init) counts as gone
            try:
                with open(f"/proc/{child_pid}/stat") as fh:
                    if fh.read().split(") ", 1)[1].startswith("Z"):
                        break
            except OSError:
                break
            assert time.monotonic() < deadline, "the worker outlived its supervisor"
            time.sleep(0.05)
    finally:
        sup.kill()
