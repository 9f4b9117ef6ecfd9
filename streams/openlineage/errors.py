"""The errors of ``streams.openlineage``: one family, so a caller catches it in one clause."""

from __future__ import annotations

from streams.errors import TraintraceError


class OpenLineageError(TraintraceError):
    """Emitting OpenLineage events failed; the message says what and what to do."""


class TransportConfigError(OpenLineageError):
    """A transport cannot be built from the flags/environment given (a missing URL, topic or path)."""


class EmitError(OpenLineageError):
    """A transport refused or failed to deliver an event (the backend is down or answered an error)."""
