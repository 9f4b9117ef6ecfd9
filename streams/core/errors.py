"""Errors of the lineage core."""

from __future__ import annotations
from streams.errors import TraintraceError


class CoreError(TraintraceError):
    """Base of every error the core raises."""


class InvalidEvent(CoreError):
    """An event does not satisfy SPEC §4; ``field`` names the offending field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"field {field!r} {reason}")
        self.field = field
        self.reason = reason
