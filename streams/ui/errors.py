"""Errors of the live lineage page."""

from __future__ import annotations

from streams.errors import TraintraceError


class UIError(TraintraceError):
    """The live page could not start or serve (the message says what and what to do)."""


class PortInUse(UIError):
    """The page's port is taken."""
