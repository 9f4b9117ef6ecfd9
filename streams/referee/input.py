"""The processor's input, unpacked one way for everyone: a ``lineage.by-cohort`` record
(``EventBatch``) becomes the items the referee folds, in order.

A record is either a batch of routed events of one cohort (each with its position on
``lineage.events`` and its exact bytes) or a clock tick of that cohort (``tick_ms``,
``grace_ms``: the processor's clock, recorded in its input so every replay halts at the same
point). The live worker (:mod:`streams.worker.stages`; :mod:`streams.worker.recovery` when it
rebuilds a partition) and the audit (:mod:`streams.audit.log`, :mod:`streams.audit.run`) read the input through
:func:`read_batch` and :func:`parse_routed` and fold it through :func:`fold_batch`, so they
cannot disagree on what a record means.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable

from streams.codec import Codec, DecodeError
from streams.core.errors import InvalidEvent
from streams.core.events import Event
from streams.errors import TraintraceError
from streams.referee.records import Emission
from streams.referee.referee import Referee


@dataclass(frozen=True, slots=True)
class Batch:
    """One decoded ``EventBatch``: ``events`` are RoutedEvent dicts (``partition``, ``offset``,
    ``value``) in fold order; ``tick`` is ``(tick_ms, grace_ms, settle_horizon_ms or None)`` for a
    clock tick (no events)."""

    cohort: str
    events: list[dict[str, Any]]
    tick: tuple[int, int, int | None] | None = None


class BadBatch(TraintraceError, ValueError):
    """An input record that is not an ``EventBatch`` (the message says why)."""


def read_batch(codec: Codec, value: bytes | None) -> Batch:
    """The :class:`Batch` an input record holds; raises :class:`BadBatch` when it holds none."""
    try:
        _name, batch = codec.decode_record(value or b"")
        cohort, events = batch["cohort_id"], batch["events"]
    except (DecodeError, KeyError, TypeError) as exc:
        raise BadBatch(f"undecodable EventBatch: {exc}") from exc
    tick = batch.get("tick_ms")
    if tick is not None:
        return Batch(cohort, [], (tick, batch.get("grace_ms") or 0, batch.get("settle_horizon_ms")))
    return Batch(cohort, events)


def parse_routed(codec: Codec, routed: dict[str, Any], parsed: "ParsedEvents | None" = None) -> Event:
    """The event a RoutedEvent carries; raises DecodeError or InvalidEvent (both ValueError).
    With ``parsed``, an event the router of this process already parsed from the same bytes is
    taken from there instead of being decoded a second time."""
    if parsed is not None:
        event = parsed.take(routed)
        if event is not None:
            return event
    return codec.decode_event_typed(routed["value"])


class ParsedEvents:
    """The events the route stage of this process parsed, by their position on
    ``lineage.events``, handed to its fold stage so an event is decoded once (issue 27).

    An entry is taken only for the very same bytes (``RoutedEvent.value``): decoding is a pure
    function of the bytes, so the event taken is the event a decode would give, and a replay
    (which has no such hand-off) folds the same. At most ``limit`` entries are held, the oldest
    dropped first (a quarter of them at once); an entry a fold never asks for (another worker
    folds that cohort, a partition moved) is dropped in its turn; a miss only costs the decode."""

    __slots__ = ("limit", "_held", "hits", "misses")

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self._held: dict[tuple[int, int], tuple[bytes, Event]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._held)

    def put(self, partition: int, offset: int, value: bytes, event: Event) -> None:
        held = self._held
        held[(partition, offset)] = (value, event)
        if len(held) > self.limit:
            # the oldest quarter at once, into a new dict: dropping them one by one costs a
            # walk past every slot freed at the front (next(iter()): 8 µs a put once entries go
            # untaken, as they do for the cohorts another worker folds); so 0.6 µs a put
            self._held = dict(islice(held.items(), max(1, self.limit // 4), None))

    def take(self, routed: dict[str, Any]) -> Event | None:
        entry = self._held.pop((routed["partition"], routed["offset"]), None)
        if entry is None or entry[0] != routed["value"]:
            self.misses += 1
            return None
        self.hits += 1
        return entry[1]


class _Undecodable:
    """In place of the event a RoutedEvent did not decode to: why (the error's message). Not the
    exception itself: its traceback holds the frame that holds the batch's list, a cycle left to
    the worker's rare collections (streams.worker.gctune) for every bad event."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _decoded(codec: Codec, events: list[dict[str, Any]],
             parsed: "ParsedEvents | None") -> list[tuple[dict[str, Any], "Event | _Undecodable"]]:
    """Each RoutedEvent of a batch with its event, or with an :class:`_Undecodable` saying why
    it has none (DecodeError, InvalidEvent), in order."""
    decode = codec.decode_event_typed
    items: list[tuple[dict[str, Any], Event | _Undecodable]] = []
    append = items.append
    for routed in events:
        try:
            append((routed, decode(routed["value"]) if parsed is None else parse_routed(codec, routed, parsed)))
        except (DecodeError, InvalidEvent) as exc:
            append((routed, _Undecodable(str(exc))))
    return items


#: reject(routed event or None for the whole record, reason, error kind): what could not be folded
Reject = Callable[[dict[str, Any] | None, str, str], None]


def fold_batch(codec: Codec, referee: Referee, value: bytes | None, partition: int, offset: int, ts: int,
               publish: bool, on_reject: Reject | None = None,
               parsed: ParsedEvents | None = None) -> tuple[int, list[Emission]]:
    """Fold the input record at ``partition``/``offset`` (its timestamp ``ts`` is the processor's
    clock for it) into ``referee``; return (events folded, records to publish: none unless
    ``publish``). What cannot be folded is told to ``on_reject``: an undecodable record
    (``BAD_BATCH``), an event that does not parse (``INVALID_EVENT``), one the fold rejects
    (its guard's first reason), one the seal gate refuses (``FORGED_EVENT``, ``UNSIGNED_JOB``,
    ``KEY_NOT_ISSUED``: :mod:`streams.core.seals`) — possibly an event held from an earlier
    record, told with that record's routed event. ``parsed``: events this process's router
    parsed already (:class:`ParsedEvents`)."""
    try:
        batch = read_batch(codec, value)
    except BadBatch as exc:
        if on_reject is not None:
            on_reject(None, str(exc), "BAD_BATCH")
        return 0, []
    if batch.tick is not None:
        out = referee.clock_tick(batch.cohort, batch.tick[0], batch.tick[1], partition=partition, publish=publish,
                                 horizon_ms=batch.tick[2])
        referee.note_input(batch.cohort, partition, offset)
        return 0, out
    out = []
    n = 0
    cohort = batch.cohort
    # Every event of the record is decoded first, then all are folded, in order: the same calls
    # and the same rejects in the same order as one event at a time (a decode is a pure function
    # of the bytes), but the two loops apart cost ~3-4 µs an event less than interleaved
    # (bench/bench_fold_stage.py: its fifth part against its sixth, 23.2 against 26.6 µs an
    # event), each loop's code and memory staying warm through its run.
    items = _decoded(codec, batch.events, parsed)
    handle = referee.handle  # (bound once: this loop runs for every event a worker folds)
    for routed, event in items:
        if isinstance(event, _Undecodable):
            if on_reject is not None:
                on_reject(routed, event.reason, "INVALID_EVENT")
            continue
        handled = handle(cohort, event, ts, partition, publish, None, routed)
        n += 1
        result = handled.result
        if on_reject is not None:
            if not (result.accepted or result.duplicate or result.held) and \
                    not any(r[1] is event for r in result.refused):
                reasons = "; ".join(f"{r}: {d}" for r, d in result.guard) or "rejected by the fold"
                on_reject(routed, reasons, result.guard[0][0] if result.guard else "REJECTED")
            for ref, _event, kind, reason in result.refused:  # this event, or held ones (seals)
                on_reject(ref, reason, kind)
        out.extend(handled.emissions)
    referee.note_input(batch.cohort, partition, offset)
    return n, out
