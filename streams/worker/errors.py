"""Errors of the worker."""

from __future__ import annotations

from streams.errors import TraintraceError


class WorkerError(TraintraceError):
    """The worker cannot start or go on; the message says why and what to do."""
