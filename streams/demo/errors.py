"""The demo's error family (:class:`DemoError`; ``SmokeError`` in :mod:`streams.demo.smoke`)."""

from __future__ import annotations

from pathlib import Path

from streams.errors import TraintraceError


class DemoError(TraintraceError):
    """The demo could not run (a worker did not start, the pipeline never settled, ...)."""


class WorkDirNotEmpty(DemoError):
    """The run's work directory holds something (a previous run's journals would be continued)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"work directory {path} is not empty (a previous run's journals would be "
                         f"continued): give a new one")
        self.path = path
