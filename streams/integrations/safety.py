"""Never crash the user's experiment: a failure of ours inside a framework's callback becomes a
logged, counted outcome for that one job, not an exception out of ``Trainer.train()`` or
``Trainer.fit()``.

:class:`Outcomes` is what an integration's callback keeps of it (``errors``, and ``outcomes``,
one line each: what went wrong and what was done instead); :func:`never_raises` wraps a hook so
that an exception is logged with its traceback, counted, and the hook returns what the
framework expects (``control`` for a Hugging Face hook, None for a Lightning one).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

__all__ = ["Outcomes", "after_run", "never_raises"]

log = logging.getLogger("traintrace.integrations")


class Outcomes:
    """Failures of ours that the job went on through, and what was done instead."""

    errors: int
    outcomes: list[str]

    def _init_outcomes(self) -> None:
        self.errors = 0
        self.outcomes = []

    def outcome(self, text: str, *, error: bool = True) -> None:
        """Note (and log) what happened instead of what was asked, e.g. a substituted restore."""
        if error:
            self.errors += 1
        self.outcomes.append(text)
        job = getattr(getattr(self, "client", None), "job_id", "?")
        (log.error if error else log.warning)("traintrace: job %s: %s", job, text)


def never_raises(returns: Callable[..., Any] | None = None) -> Callable:
    """A hook of an :class:`Outcomes` object that never raises into the framework: an exception
    is logged with its traceback, counted, and ``returns(*args, **kwargs)`` (or None) returned."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def hook(self: Outcomes, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the experiment goes on
                log.exception("traintrace: %s failed", fn.__name__)
                self.outcome(f"{fn.__name__} failed ({type(exc).__name__}: {exc}); training went on")
                return returns(*args, **kwargs) if returns is not None else None
        return hook
    return wrap


def after_run(callback: Any, wait_s: float, poll: Callable[[], Any]) -> str | None:
    """What the control loop of ``train_under_control`` / ``fit_under_control`` does when one run
    of the framework's loop returned: the status to finish the job with (it gave up; or it
    diverged and no command came within ``wait_s``), or None to go on (``callback.pending`` then
    holds the restore to make, if any: ``poll`` is called for a command that came with the last
    step)."""
    if callback.gave_up:
        return str(callback.gave_up)
    if callback.pending is None and callback.guard.tripped and not callback.wait_for_command(wait_s):
        status = callback.gave_up or "FAILED"
        if not callback.gave_up:
            callback.outcome(f"diverged and no command came within {wait_s} s (is the traintrace worker "
                             "running?): the job stops")
        return str(status)
    if callback.pending is None:
        poll()
    return None
