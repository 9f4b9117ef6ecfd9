"""The ``chains`` check: every job's events on ``lineage.events`` form its hash chain.

seq 0, 1, 2, … with no gap and no conflicting duplicate (identical redeliveries are fine), seq 0
a ``JobStarted``, every ``hash`` recomputed from the canonical bytes and linked to the previous
one; an undecodable record must be in the dead-letter topic (:func:`read_dead_letters` reads
which ones are). Decoding every event here, once, also fills the auditor's ``by_origin`` and
``canonical`` for the checks after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streams.codec import DecodeError
from streams.core.chain import GENESIS, canonical_bytes, canonical_with_nulls, verify_link
from streams.core.errors import InvalidEvent
from streams.core.events import Event, JobStarted, parse_event
from streams.files.archive import LogRecord
from streams.audit.diff import first_diff
from streams.audit.items import where
from streams.audit.report import Finding

if TYPE_CHECKING:
    from streams.audit.auditor import Auditor


def read_dead_letters(a: Auditor) -> None:
    """The events positions the dead-letter topic accounts for, into ``a.dead``."""
    events_topic = (a.log.meta.get("topics") or {}).get("events")
    for rec in a.log.topic("dlq"):
        try:
            _name, d = a.codec.decode_record(rec.value or b"")
        except DecodeError:
            continue
        if events_topic is None or d.get("original_topic") in (events_topic, None) or \
                str(d.get("original_topic", "")).endswith("events"):
            a.dead.add((d["original_partition"], d["original_offset"]))


def check_chains(a: Auditor) -> None:
    """Decode every event once and check each job's seq continuity and hash links."""
    chk = a.checks["chains"]
    recs = a.log.topic("events")
    total = len(recs)
    heads: dict[str, tuple[int, str | None]] = {}  # job -> (next seq, head hash)
    seen: dict[tuple[str, int], Event] = {}
    unhashed = 0
    for moved in a.log.disorder:
        chk.fail(Finding("the archive holds this record out of offset order (records moved in the file)",
                         where=moved))
    for i, rec in enumerate(recs):
        if i % 5000 == 0:
            a.tick("chains", i, total)
        try:
            ev = parse_event(a.codec.decode_event(rec.value or b""))
        except (DecodeError, InvalidEvent) as exc:
            _undecodable(a, rec, exc)
            continue
        canonical = canonical_with_nulls(ev)
        a.canonical[id(ev)] = canonical
        a.by_origin[(rec.partition, rec.offset)] = (rec, ev, None)
        chk.checked += 1
        job, seq = ev.job_id, ev.seq
        if ev.hash is None:
            unhashed += 1
        prev = seen.get((job, seq))
        if prev is not None:
            if prev != ev and canonical_bytes(prev) != canonical_bytes(ev):
                name, e, g = first_diff(prev, ev)
                chk.fail(Finding("conflicting duplicate: a different event with the same seq",
                                 job_id=job, seq=seq, where=where(rec), field=name, expected=e, found=g))
            continue
        seen[(job, seq)] = ev
        nxt, head = heads.get(job, (0, GENESIS))
        if seq != nxt:
            what = (f"seq gap: expected seq {nxt}, found {seq}" if seq > nxt
                    else f"out of order: seq {seq} after seq {nxt - 1}")
            chk.fail(Finding(what, job_id=job, seq=seq, where=where(rec), field="seq", expected=nxt, found=seq))
            head = None  # the link to a missing predecessor cannot be checked
        if seq == 0 and not isinstance(ev, JobStarted):
            chk.fail(Finding("seq 0 is not a JobStarted", job_id=job, seq=seq, where=where(rec)))
        problem = verify_link(ev, head if head is not None else None, canonical[0])
        if problem is not None:
            chk.fail(Finding(f"hash chain broken: {problem}", job_id=job, seq=seq, where=where(rec)))
        heads[job] = (max(nxt, seq + 1), ev.hash)
    a.tick("chains", total, total)
    if unhashed:
        chk.counts["unhashed events"] = unhashed
    chk.counts["jobs"] = len(heads)


def _undecodable(a: Auditor, rec: LogRecord, exc: Exception) -> None:
    """An event record that does not decode: fine when dead-lettered; a failure when the
    processor's topics are there to show it was not; else (an events-only log) a warning."""
    chk = a.checks["chains"]
    a.by_origin[(rec.partition, rec.offset)] = (rec, None, str(exc))
    if (rec.partition, rec.offset) in a.dead:
        chk.counts["undecodable, dead-lettered"] = chk.counts.get("undecodable, dead-lettered", 0) + 1
    elif a.log.topic("dlq") or a.log.has_input:
        chk.fail(Finding(f"undecodable record that is not in the dead-letter topic: {exc}",
                         job_id=rec.key, where=where(rec)))
    else:
        chk.warn(Finding(f"undecodable record: {exc}", job_id=rec.key, where=where(rec)))
