"""Errors of the audit."""

from __future__ import annotations

from streams.errors import TraintraceError


class AuditError(TraintraceError):
    """The log cannot be audited or a proof cannot be made or checked; the message says why."""
