"""The worker's health, as a supervisor reads it on ``/health``: ready, degraded or dead.

- **ready**: every timer's last round went through;
- **degraded**: some timer's rounds are failing (a broker paused, a coordinator moving): they
  are skipped, counted (``traintrace_timer_rounds_failed_total``) and told once, and the worker
  goes on — it is alive, routing and folding what it can; a supervisor should not restart it;
- **dead**: the worker is stopping after a crash (answered with HTTP 503 while the web server
  still serves): restart it.

:func:`guarded` runs a timer's body so that its exception never reaches Faust (an exception in
a Faust timer crashes the whole app: that is how one paused broker used to stop every worker).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from streams.kafka.retry import Degradation
from streams.worker import metrics

__all__ = ["Health", "guarded"]

log = logging.getLogger("traintrace.worker")


class Health:
    """The degradations of one worker's timers, and whether it is going down."""

    def __init__(self) -> None:
        self.timers: dict[str, Degradation] = {}
        self.dead: str | None = None

    def timer(self, name: str) -> Degradation:
        d = self.timers.get(name)
        if d is None:
            d = self.timers[name] = Degradation(f"timer {name}", log)
        return d

    def view(self) -> dict[str, Any]:
        degraded = {n: {"failing_for_s": round(d.clock() - d.since, 1), "rounds_skipped": d.failures}
                    for n, d in sorted(self.timers.items()) if d.degraded}
        state = "dead" if self.dead else ("degraded" if degraded else "ready")
        out: dict[str, Any] = {"state": state, "ok": state != "dead", "degraded": degraded}
        if self.dead:
            out["reason"] = self.dead
        return out


async def guarded(health: Health, name: str, body: Callable[[], Awaitable[Any]]) -> None:
    """Run one round of timer ``name``: an exception is counted and told (once per outage),
    and the next round tries again."""
    d = health.timer(name)
    try:
        await body()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a timer must not crash the app
        metrics.TIMER_FAILURES.labels(name, type(exc).__name__).inc()
        d.failed(f"{type(exc).__name__}: {exc}")
    else:
        d.ok()
