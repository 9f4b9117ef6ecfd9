"""Waiting for what a live pipeline does, with a deadline (never a fixed sleep as a check)."""

from __future__ import annotations

import time

#: how long a test waits for something the pipeline must do (a shared, noisy machine)
WAIT = 90.0


def until(predicate, timeout: float = WAIT, interval: float = 0.2, what: str = "condition"):
    """The first truthy value of ``predicate()``, polled every ``interval`` s; TimeoutError
    naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout}s")
