"""Processes the tooling starts for its own run end with the process that started them.

A test, a benchmark or the demo starts brokers and workers in their own sessions (so a Ctrl-C
in the terminal reaches the tooling, which stops them in order). When that process dies without
its cleanup (``kill -9``, a crashed pytest worker), they would run on, holding ports, CPU and
data directories. On Linux the child asks the kernel for SIGTERM when its parent goes
(``PR_SET_PDEATHSIG``): a broker or a worker takes SIGTERM as a clean stop.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable

#: prctl(2)'s option that sets the signal a process gets when its parent dies
PR_SET_PDEATHSIG = 1


def die_with_parent(*, any_thread: bool = False) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that ties the child to this process, or
    None where that cannot be done safely.

    The kernel counts the *thread* that forked as the parent: a child started from another
    thread would be stopped when that thread ends. So by default only a child started from the
    main thread is tied; ``any_thread`` ties it anyway (the caller keeps that thread alive as
    long as the child). A parent gone between the fork and the ``prctl`` is caught too: the
    child then exits at once."""
    if sys.platform != "linux":
        return None
    if not any_thread and threading.current_thread() is not threading.main_thread():
        return None
    try:  # resolved here: the child between fork and exec should not import or load libraries
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:  # pragma: no cover - runs in the child
        if prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM)) != 0:
            return
        if os.getppid() != parent:
            os._exit(1)

    return preexec
