"""The processor's fold order as the audit replays it, and how findings name a position.

The input check (:mod:`streams.audit.input_check`) turns the processor's input into a list of
:class:`FoldItem` — one per event folded, one per clock tick the processor recorded — which
the replay (:mod:`streams.audit.replay`) folds in that order. Findings name records by
:func:`where` (``topic[partition]@offset``) and a decision by what it came after (:func:`after`).
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.core.events import Event
from streams.files.archive import LogRecord


@dataclass(slots=True)
class FoldItem:
    """One event in the processor's fold order."""

    cohort: str
    event: Event | None
    ts: int
    partition: int
    via: LogRecord
    tick: tuple[int, int, int | None] | None = None  # (now_ms, grace_ms, settle_horizon_ms) of a clock tick
    #: the routed event of the input record (``partition``, ``offset``, ``value``): what the
    #: processor's fold holds a held event by (a snapshot's plain form of it)
    routed: dict | None = None

    @property
    def where(self) -> str:
        return where(self.via)


def where(rec: LogRecord) -> str:
    return f"{rec.topic}[{rec.partition}]@{rec.offset}"


def after(cause: FoldItem | None, verb: str = "decided") -> str:
    if cause is None:
        return ""
    if cause.event is None:
        return f" ({verb} at the processor's clock tick {cause.where})"
    return f" ({verb} after {cause.event.job_id} seq {cause.event.seq}, {cause.where})"
