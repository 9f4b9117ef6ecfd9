"""A ``traintrace worker`` the harness started stops when the process that started it is killed
(:mod:`streams.devtools.lifetime`; the unit tests in ``tests/unit/test_lifetime.py``): a test
process that crashed left its worker running for 20 minutes (issue 27's thirty-first round)."""

from __future__ import annotations

import os
import signal
import uuid

from tests.unit.test_lifetime import _alive, _parent_then_kill, _wait_gone


def test_a_traintrace_worker_the_harness_started_stops_when_its_starter_is_killed(kafka_bootstrap, tmp_path):
    # a worker with a broker runs until it is stopped: only the tie stops it here
    prefix = f"lifetime{uuid.uuid4().hex[:8]}."
    child = _parent_then_kill(f"""
        import time
        from pathlib import Path
        from streams.devtools.worker_process import WorkerProcess
        w = WorkerProcess({kafka_bootstrap!r}, {prefix!r}, "tt-{prefix.rstrip(".")}", Path({str(tmp_path / "w")!r}), 1)
        w.start().wait_ready(120)
        print(w.proc.pid, flush=True)
        time.sleep(600)
        """, tmp_path)
    try:
        assert _wait_gone(child), "the worker outlived the process that started it"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
