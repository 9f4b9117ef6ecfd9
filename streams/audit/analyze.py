"""Offline analysis of a JSON Lines log through the same core the stream processor uses."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from streams.files.jsonl import JsonlError, LineError, open_text, read_events
from streams.core.cohorts import CohortLineage
from streams.core.state import Config


@dataclass
class Analysis:
    result: dict[str, Any]
    lineage: CohortLineage
    events: int = 0
    skipped: list[LineError] = field(default_factory=list)


def analyze_file(
    path: str,
    config: Config | None = None,
    skip_invalid: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Analysis:
    """Fold every event of ``path`` and return the final state (SPEC §11).

    Raises :class:`JsonlError` on the first bad line unless ``skip_invalid``. ``progress`` is
    called with (bytes read, total bytes) now and then.
    """
    lineage = CohortLineage(config)
    skipped: list[LineError] = []
    total = os.path.getsize(path) if path != "-" else 0
    events = 0
    fh = open_text(path)
    try:
        for item in read_events(path, fh):
            if isinstance(item, LineError):
                if not skip_invalid:
                    raise JsonlError(item)
                skipped.append(item)
                continue
            lineage.fold(item)
            events += 1
            if progress is not None and events % 20000 == 0 and total:
                progress(fh.buffer.tell() if hasattr(fh, "buffer") else 0, total)
    finally:
        if fh is not None and path != "-":
            fh.close()
    lineage.finish_input()
    if progress is not None and total:
        progress(total, total)
    return Analysis(lineage.final_state(), lineage, events, skipped)
