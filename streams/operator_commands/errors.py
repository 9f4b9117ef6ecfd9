"""Errors of the operators' commands."""

from __future__ import annotations

from streams.errors import TraintraceError


class OperatorError(TraintraceError):
    """An operator command could not complete; the message says what and why."""
