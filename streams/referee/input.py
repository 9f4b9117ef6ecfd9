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
from typing import Any, Callable, Sequence

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


def parse_routed(codec: Codec, routed: dict[str, Any]) -> Event:
    """The event a RoutedEvent carries; raises DecodeError or InvalidEvent (both ValueError)."""
    return codec.decode_event_typed(routed["value"])


class ParsedEvents:
    """The batches the route stage of this process wrote, each with the events it parsed,
    handed to its fold stage by the very bytes of the ``EventBatch`` (issue 27): an event is
    decoded once, and a batch this worker routed is not read back.

    A batch is taken only for the same bytes: reading an ``EventBatch`` and decoding its events
    are pure functions of the bytes, so what is taken is what reading them would give, and a
    replay (which has no such hand-off) folds the same. At most ``limit`` events are held, the
    oldest batches dropped first (a quarter of them at once); a batch a fold never asks for
    (another worker folds that cohort, a partition moved) is dropped in its turn; a miss only
    costs the read. ``hits`` counts the events taken, ``misses`` the records read instead."""

    __slots__ = ("limit", "_held", "_events", "hits", "misses")

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        #: EventBatch bytes -> (cohort, [(RoutedEvent dict, its event)] in fold order)
        self._held: dict[bytes, tuple[str, list[tuple[dict[str, Any], Event]]]] = {}
        self._events = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """The events held."""
        return self._events

    def put(self, value: bytes, cohort: str, items: list[tuple[dict[str, Any], Event]]) -> None:
        """The batch ``value`` (an EventBatch of ``cohort``) holds ``items``: each RoutedEvent
        dict it was written from, with the event parsed from its ``value``."""
        held = self._held
        before = held.get(value)
        if before is not None:  # the same bytes again (the same events routed twice): one entry
            self._events -= len(before[1])
        held[value] = (cohort, items)
        self._events += len(items)
        if self._events > self.limit:
            # the oldest quarter at once, into a new dict (dropping them one by one walks past
            # every slot freed at the front, each time)
            kept = dict(islice(held.items(), max(1, len(held) // 4), None))
            self._held = kept
            self._events = sum(len(entry[1]) for entry in kept.values())

    def take(self, value: bytes) -> tuple[str, list[tuple[dict[str, Any], Event]]] | None:
        """The cohort and the items of the batch written as ``value`` (once), or None."""
        entry = self._held.pop(value, None)
        if entry is None:
            self.misses += 1
            return None
        self._events -= len(entry[1])
        self.hits += len(entry[1])
        return entry


class _Undecodable:
    """In place of the event a RoutedEvent did not decode to: why (the error's message). Not the
    exception itself: its traceback holds the frame that holds the batch's list, a cycle left to
    the worker's rare collections (streams.worker.gctune) for every bad event."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _decoded(codec: Codec, events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], "Event | _Undecodable"]]:
    """Each RoutedEvent of a batch with its event, or with an :class:`_Undecodable` saying why
    it has none (DecodeError, InvalidEvent), in order."""
    decode = codec.decode_event_typed
    items: list[tuple[dict[str, Any], Event | _Undecodable]] = []
    append = items.append
    for routed in events:
        try:
            append((routed, decode(routed["value"])))
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
    record, told with that record's routed event. ``parsed``: the batches this process's
    router wrote, with the events it parsed (:class:`ParsedEvents`): a record among them is
    neither read nor decoded again."""
    handed = parsed.take(value) if parsed is not None and value else None
    if handed is not None:  # a batch this process routed: its events as the router parsed them
        cohort, items = handed
        return _fold_items(referee, cohort, items, partition, offset, ts, publish, on_reject)
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
    # Every event of the record is decoded first, then all are folded, in order: the same calls
    # and the same rejects in the same order as one event at a time (a decode is a pure function
    # of the bytes), but the two loops apart cost ~3-4 µs an event less than interleaved
    # (bench/bench_fold_stage.py: its fifth part against its sixth, 23.2 against 26.6 µs an
    # event), each loop's code and memory staying warm through its run.
    return _fold_items(referee, batch.cohort, _decoded(codec, batch.events), partition, offset, ts, publish,
                       on_reject)


def _fold_items(referee: Referee, cohort: str, items: "Sequence[tuple[dict[str, Any], Event | _Undecodable]]",
                partition: int, offset: int, ts: int, publish: bool,
                on_reject: Reject | None) -> tuple[int, list[Emission]]:
    """Fold the decoded events of the record at ``partition``/``offset``, in order (:func:`fold_batch`)."""
    out: list[Emission] = []
    n = 0
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
    referee.note_input(cohort, partition, offset)
    return n, out
