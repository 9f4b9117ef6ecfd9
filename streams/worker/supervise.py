"""``traintrace worker --supervise``: restart the worker when it dies.

A worker is crash-only: an unexpected error in an agent, or a crash of the Faust app, ends the
process with a non-zero status (70) before the batch is acknowledged, so the batch is processed
again after a restart. Who restarts it is the deployment's: Kubernetes restarts the pod's
container (the Helm chart relies on it), systemd a unit with ``Restart=on-failure``. Where there
is no such supervisor (a laptop, a VM, the fault suite), ``--supervise`` makes the worker its own:
the command runs again in a child process whenever the child exits with a non-zero status, after
a backoff that doubles from 1 s to 30 s (reset once a child lived 60 s); SIGTERM or SIGINT is
passed to the child and ends the supervision; a clean exit (0) ends it too. On Linux the child
also dies with its supervisor (``PR_SET_PDEATHSIG``): a supervisor killed outright leaves no
orphan worker holding its partitions.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence

__all__ = ["SUPERVISED_ENV", "supervise"]

log = logging.getLogger("traintrace.worker")

#: set in the child's environment: it runs the worker itself
SUPERVISED_ENV = "TRAINTRACE_SUPERVISED_CHILD"


def _die_with_supervisor() -> None:  # pragma: no cover - runs in the child
    """Linux: the worker gets SIGTERM when its supervisor dies, even by SIGKILL (no orphan
    worker keeps the partitions of a supervisor that is gone)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux's libc: the supervisor's signals still reach it
        pass


def supervise(argv: Sequence[str], *, first_backoff: float = 1.0, max_backoff: float = 30.0,
              stable_after: float = 60.0, max_restarts: int | None = None,
              say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)) -> int:
    """Run ``argv`` until it exits 0 or the supervisor is told to stop; restart it after a
    non-zero exit. Returns the last child's exit status."""
    stopping: list[int] = []
    child: list[subprocess.Popen] = []

    def forward(signum, _frame) -> None:
        stopping.append(signum)
        if child and child[0].poll() is None:
            child[0].send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    backoff, restarts, code = first_backoff, 0, 0
    try:
        while True:
            started = time.monotonic()
            p = subprocess.Popen(list(argv), env={**os.environ, SUPERVISED_ENV: "1"},
                                 preexec_fn=_die_with_supervisor if sys.platform == "linux" else None)
            child[:] = [p]
            code = p.wait()
            lived = time.monotonic() - started
            if code == 0 or stopping:
                return code
            if max_restarts is not None and restarts >= max_restarts:
                say(f"traintrace worker: exited with status {code}; {restarts} restart(s) done, giving up")
                return code
            if lived >= stable_after:
                backoff = first_backoff
            say(f"traintrace worker: exited with status {code} after {lived:.0f} s; restarting in {backoff:g} s "
                "(--supervise)")
            deadline = time.monotonic() + backoff
            while time.monotonic() < deadline and not stopping:
                time.sleep(0.1)
            if stopping:
                return code
            restarts += 1
            backoff = min(max_backoff, backoff * 2)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
