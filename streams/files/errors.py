"""Errors of the file adapters (JSON Lines, archives)."""

from __future__ import annotations

from streams.errors import TraintraceError


class FilesError(TraintraceError):
    """A file cannot be read as what it should be; the message names the file and what is wrong."""
