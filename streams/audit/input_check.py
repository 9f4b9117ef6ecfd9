"""The ``input`` check: the processor's input (``lineage.by-cohort``) is exactly the events log.

Every routed event is byte for byte the record at its events position, every valid event was
routed (or dead-lettered), each job's events in order. Reading the input also gives the fold
order the replay follows (``a.items``): the processor's, clock ticks included. A log without
the input topic skips the check, with a note; its fold order is then the events' own order.
The batches are unpacked by :mod:`streams.referee.input`, as the live worker unpacks them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streams.codec import Codec, DecodeError
from streams.core.cohorts import CohortRouter
from streams.core.errors import InvalidEvent
from streams.core.events import Event
from streams.files.archive import LogRecord
from streams.referee.input import BadBatch, read_batch
from streams.audit.diff import first_diff
from streams.audit.items import FoldItem, where
from streams.audit.report import Finding

if TYPE_CHECKING:
    from streams.audit.context import AuditContext


def check_input(a: AuditContext) -> None:
    chk = a.checks["input"]
    if not a.log.has_input:
        chk.skipped = True
        chk.notes.append("the log has no processor input (lineage.by-cohort): the fold order is the "
                         "events' own order, so only decisions that do not depend on the interleaving "
                         "of jobs can be expected to match")
        _events_order(a)
        return
    routed = _read_input(a)
    _never_folded(a, routed)


def _events_order(a: AuditContext) -> None:
    """The fold order of a log without the processor's input: the events' own, routed as the
    router would."""
    router = CohortRouter()
    for (p, o), (rec, ev, _err) in sorted(a.by_origin.items()):
        if ev is not None:
            a.items.append(FoldItem(router.route(ev), ev, rec.timestamp, 0, rec))


def _read_input(a: AuditContext) -> set[tuple[int, int]]:
    """Every input batch in order, into ``a.items``, each routed event checked against the
    events log; returns the events positions routed."""
    chk = a.checks["input"]
    routed: set[tuple[int, int]] = set()
    last_of_job: dict[str, int] = {}
    folded_seqs: dict[str, set[int]] = {}
    recs = a.log.topic("input")
    for i, rec in enumerate(recs):
        if i % 200 == 0:
            a.tick("input", i, len(recs))
        try:
            batch = read_batch(a.codec, rec.value)
        except BadBatch as exc:
            chk.fail(Finding(f"undecodable input batch: {exc.__cause__}", where=where(rec)))
            continue
        cohort = batch.cohort
        if batch.tick is not None:  # the processor's clock, recorded in its input
            a.items.append(FoldItem(cohort, None, rec.timestamp, rec.partition, rec, batch.tick))
            continue
        for r in batch.events:
            chk.checked += 1
            origin = (r["partition"], r["offset"])
            have = a.by_origin.get(origin)
            if have is None:
                ev = _try_parse(a.codec, r["value"])
                chk.fail(Finding(f"the processor folded an event that is not on the events log "
                                 f"(events[{origin[0]}]@{origin[1]}, via {where(rec)})",
                                 job_id=ev.job_id if ev else None, seq=ev.seq if ev else None, where=f"events[{origin[0]}]@{origin[1]}"))
                continue
            orec, ev, err = have
            if orec.value != r["value"] or ev is None:
                ev = _not_the_logged_bytes(a, rec, r, orec, ev)
                if ev is None:
                    continue
            if origin not in routed:  # (a redelivered batch is folded again: the fold drops it)
                routed.add(origin)
                last = last_of_job.get(ev.job_id)
                seqs = folded_seqs.setdefault(ev.job_id, set())
                # a seq already folded (an identical redelivery, which the fold drops, or a
                # conflicting duplicate, which it dead-letters) is no reordering
                if last is not None and ev.seq < last and ev.seq not in seqs:
                    chk.fail(Finding(f"folded out of order: seq {ev.seq} after seq {last} "
                                     f"(via {where(rec)})", job_id=ev.job_id, seq=ev.seq,
                                     where=f"events[{origin[0]}]@{origin[1]}"))
                seqs.add(ev.seq)
                last_of_job[ev.job_id] = max(ev.seq, last if last is not None else -1)
            a.items.append(FoldItem(cohort, ev, rec.timestamp, rec.partition, rec, routed=r))
    a.tick("input", len(recs), len(recs))
    return routed


def _not_the_logged_bytes(a: AuditContext, rec: LogRecord, r: dict, orec: LogRecord, ev: Event | None) -> Event | None:
    """A routed event whose bytes are not the events log's (or the logged ones do not decode):
    a failure. Returns the event as routed, which is what the processor folded (None when it
    does not decode either)."""
    origin = (r["partition"], r["offset"])
    folded = _try_parse(a.codec, r["value"])
    job = (folded or ev).job_id if (folded or ev) else orec.key
    seq = (folded or ev).seq if (folded or ev) else None
    f, e, g = first_diff(folded, ev) if folded is not None and ev is not None else ("value", None, None)
    a.checks["input"].fail(Finding(f"the events log holds different bytes than the processor folded "
                                   f"(via {where(rec)})", job_id=job, seq=seq, where=f"events[{origin[0]}]@{origin[1]}",
                                   field=f, expected=e, found=g))
    return folded


def _never_folded(a: AuditContext, routed: set[tuple[int, int]]) -> None:
    """Valid events the input never routed nor the dead-letter topic holds: a failure, or a
    warning for the tail the processor had not reached when the log was read or cut."""
    chk = a.checks["input"]
    last_input_ts = max((r.timestamp for r in a.log.topic("input")), default=0)
    for origin, (rec, ev, _err) in sorted(a.by_origin.items()):
        if ev is None or origin in routed or origin in a.dead:
            continue
        f = Finding("a valid event the processor never folded (and did not dead-letter)",
                    job_id=ev.job_id, seq=ev.seq, where=where(rec))
        if a.cut or rec.timestamp >= last_input_ts:
            f.what = "not yet folded when the log was read or cut"
            chk.warn(f)
        else:
            chk.fail(f)


def _try_parse(codec: Codec, value: bytes | None) -> Event | None:
    try:
        return codec.decode_event_typed(value or b"")
    except (DecodeError, InvalidEvent):
        return None
