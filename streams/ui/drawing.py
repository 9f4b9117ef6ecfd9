"""The lineage picture of a cohort on the live page: the report's own drawing, kept current.

A drawing is the report's (:func:`streams.report.build` over the records followed so far, then
:func:`streams.report.render_svg` of the cohort), so the page and ``traintrace report`` draw
the same thing. Folding and drawing take a while, so one background thread renders and the page
gets the last drawing at once (possibly a few records old); a drawing is cached under the
cohort's change count (:attr:`UIState.changes`) and redrawn only when that moved.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from streams.audit.log import AuditLog
from streams.ui.state import UIState

log = logging.getLogger(__name__)


class Drawings:
    """The latest SVG of each cohort asked for, rendered by one daemon thread."""

    def __init__(self, state: UIState, source: str = "kafka") -> None:
        self.state = state
        self.source = source
        self._cache: dict[str, tuple[int, str | None, str | None]] = {}  # cohort -> (key, svg, error)
        self._wanted: dict[str, int] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="traintrace-ui-drawing", daemon=True)
        self._thread.start()

    def get(self, cohort: str) -> dict[str, Any]:
        """The cohort's latest drawing (``svg`` None while the first is being drawn), the change
        count it shows (``drawn``), the current one (``changes``) and any error; asks for a new
        drawing when the cohort changed since."""
        current = self.state.changes.get(cohort, 0)
        with self._cond:
            key, svg, error = self._cache.get(cohort, (-1, None, None))
            if key != current and self._wanted.get(cohort) != current:
                self._wanted[cohort] = current
                self._cond.notify()
        return {"cohort_id": cohort, "svg": svg, "drawn": key, "changes": current, "error": error,
                "stale": key != current}

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the drawing thread and wait (up to ``timeout`` s) for a drawing under way: a
        daemon thread still inside matplotlib when the process exits crashed it (SIGSEGV,
        SIGABRT: seen in the unit tests)."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._wanted and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                cohort = next(iter(self._wanted))
                del self._wanted[cohort]
            key, input_recs, control_recs = self.state.drawing_input(cohort)
            try:
                svg, error = self._render(cohort, input_recs, control_recs), None
            except Exception as exc:  # noqa: BLE001 - a drawing that fails is reported on the page, not fatal
                log.exception("drawing cohort %r", cohort)
                svg, error = None, f"{type(exc).__name__}: {exc}"
            with self._cond:
                self._cache[cohort] = (key, svg, error)

    def _render(self, cohort: str, input_recs: list[Any], control_recs: list[Any]) -> str | None:
        from streams.report import build, render_svg

        key = lambda r: (r.partition, r.offset)  # noqa: E731 - the log's order
        audit_log = AuditLog(records={"input": sorted(input_recs, key=key), "control": sorted(control_recs, key=key)},
                             source=self.source)
        model = build(audit_log, self.state.referee.config)
        cm = model.cohorts.get(cohort)
        if cm is None:
            return None
        svg, _info = render_svg(cm, source=self.source, events=cm.events, summary=False)
        return svg
