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
import faulthandler
import logging
import os
import threading
import time
from typing import Any, Awaitable, Callable

from streams.kafka.retry import Degradation
from streams.worker import metrics

__all__ = ["Health", "Watchdog", "guarded"]

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


class Watchdog(threading.Thread):
    """Liveness a supervisor can trust: a worker that is alive but makes no progress is ended.

    Two checks, every second, from a thread of its own (a wedged event loop cannot run them):

    - the event loop stopped turning: :meth:`beat` (an asyncio timer, every second) was last
      called more than ``loop_s`` ago;
    - an owned partition has records waiting (lag > 0) and its position has not moved for
      ``stall_s`` while every timer is healthy (a broker outage degrades the timers: then the
      worker waits, it is not stuck): :meth:`progress`, fed by the lag timer.

    Either way the worker's stacks are dumped to stderr (``faulthandler``), ``/health`` says
    dead, and the process exits with status 70 so that its supervisor restarts it
    (:mod:`streams.worker.supervise`). ``stall_s`` 0 switches the watchdog off.
    """

    def __init__(self, health: Health, stall_s: float, loop_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic, exit: Callable[[int], None] = os._exit) -> None:
        super().__init__(name="traintrace-watchdog", daemon=True)
        self.health, self.stall_s, self.clock, self.exit = health, stall_s, clock, exit
        self.loop_s = loop_s if loop_s is not None else max(30.0, stall_s / 2)
        self.last_beat = clock()
        self.positions: dict[tuple[str, int], tuple[int, float]] = {}  # -> (position, since)
        self._stopping = threading.Event()

    def beat(self) -> None:
        self.last_beat = self.clock()

    def progress(self, lags: dict[tuple[str, int], tuple[int, int]]) -> None:
        now = self.clock()
        for key, (pos, lag) in lags.items():
            seen = self.positions.get(key)
            if lag <= 0 or seen is None or seen[0] != pos:
                self.positions[key] = (pos, now)
        for key in set(self.positions) - set(lags):
            del self.positions[key]  # no longer owned

    def verdict(self) -> str | None:
        """Why the worker is stuck, or None."""
        now = self.clock()
        if now - self.last_beat > self.loop_s:
            return f"the event loop has not turned for {now - self.last_beat:.0f} s"
        if any(d.degraded for d in self.health.timers.values()):
            return None  # a dependency is away: waiting is right
        stuck = sorted(f"{t}[{p}]" for (t, p), (_pos, since) in self.positions.items() if now - since > self.stall_s)
        if stuck:
            return f"records wait on {', '.join(stuck)} and none was processed for {self.stall_s:.0f} s"
        return None

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        while not self._stopping.wait(1.0):
            why = self.verdict()
            if why is None:
                continue
            self.health.dead = why
            log.critical("watchdog: %s; dumping the stacks and exiting with status 70 so that the worker is "
                         "restarted", why)
            faulthandler.dump_traceback(all_threads=True)
            logging.shutdown()
            self.exit(70)
            return
