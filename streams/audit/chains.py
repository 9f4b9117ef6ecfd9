"""The ``chains`` check: every job's events on ``lineage.events`` form its hash chain.

seq 0, 1, 2, … with no gap and no conflicting duplicate (identical redeliveries are fine), seq 0
a ``JobStarted``, every ``hash`` recomputed from the canonical bytes and linked to the previous
one; an undecodable record must be in the dead-letter topic (:func:`read_dead_letters` reads
which ones are). Decoding every event here, once, also fills the auditor's ``by_origin`` and
``canonical`` for the checks after it.

Sealed jobs (SPEC revision 3, :mod:`streams.core.seals`). Anyone who can write
``lineage.events`` can extend a job's hash chain correctly, so for a job whose ``JobStarted``
declares a key the chain alone cannot tell the job's record from a forgery that arrived first:
first-seen-wins would name the genuine event the "conflicting duplicate". Here the job's key
decides, offline and independent of arrival order: an event is *authentic* when its hash is its
content's and it is, or its ``prev_hash`` links lead back from, an event whose seal verifies
with the key (one seal vouches for the run before it, as in the processor's gate). Every other
event of the job is a forgery, named with why; the seq, duplicate and link checks then run over
the rest, so the genuine record is checked as if the forgery had never been written. A forgery
the processor dead-lettered is a warning (it did its job); one it folded or kept is a failure.
Unsealed events after a job's last seal are its *tail*: a later seal may still cover them (the
processor holds them until one does), so they are counted, not judged. The job's key is the one
its first ``JobStarted`` (in the log's order, which is the processor's for a job) declares and
seals: the same one the gate pins. Jobs without a key are checked exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streams.codec import DecodeError
from streams.core.chain import GENESIS, canonical_bytes, canonical_with_nulls, chain_hash, verify_link
from streams.core.errors import InvalidEvent
from streams.core.events import Event, JobStarted
from streams.core.seals import FORGED, check_seal, load_public_key
from streams.files.archive import LogRecord
from streams.audit.diff import first_diff
from streams.audit.items import where
from streams.audit.report import Check, Finding

if TYPE_CHECKING:
    from streams.audit.context import AuditContext

#: one decoded event of the events topic: (record, event, canonical bytes and null map)
Decoded = tuple[LogRecord, Event, Any]


def read_dead_letters(a: AuditContext) -> None:
    """The events positions the dead-letter topic accounts for, into ``a.dead``."""
    for pos, _kind, _reason in _dead_letters(a):
        a.dead.add(pos)


def _dead_letters(a: AuditContext) -> list[tuple[tuple[int, int], str, str]]:
    """(events position, error kind, reason) of every dead letter of the events topic."""
    events_topic = (a.log.meta.get("topics") or {}).get("events")
    out = []
    for rec in a.log.topic("dlq"):
        try:
            _name, d = a.codec.decode_record(rec.value or b"")
        except DecodeError:
            continue
        if events_topic is None or d.get("original_topic") in (events_topic, None) or \
                str(d.get("original_topic", "")).endswith("events"):
            out.append(((d["original_partition"], d["original_offset"]), d.get("error_kind") or "",
                        d.get("reason") or ""))
    return out


def check_chains(a: AuditContext) -> None:
    """Decode every event once; tell each keyed job's forgeries from its record; check each
    job's seq continuity and hash links over the rest."""
    chk = a.checks["chains"]
    for moved in a.log.disorder:
        chk.fail(Finding("the archive holds this record out of offset order (records moved in the file)",
                         where=moved))
    decoded = _decode_all(a)
    left_out = _judge_seals(a, decoded)
    _check_links(a, [d for d in decoded if (d[0].partition, d[0].offset) not in left_out])
    chk.checked = len(decoded)
    chk.counts["jobs"] = len({ev.job_id for _r, ev, _c in decoded})


def _decode_all(a: AuditContext) -> list[Decoded]:
    """Every event of the events topic decoded, in offset order (``a.by_origin`` and
    ``a.canonical`` filled); an undecodable record is judged by :func:`_undecodable`."""
    recs = a.log.topic("events")
    total = len(recs)
    out: list[Decoded] = []
    for i, rec in enumerate(recs):
        if i % 5000 == 0:
            a.tick("chains", i, total)
        try:
            ev = a.codec.decode_event_typed(rec.value or b"")
        except (DecodeError, InvalidEvent) as exc:
            _undecodable(a, rec, exc)
            continue
        canonical = canonical_with_nulls(ev)
        a.canonical[id(ev)] = canonical
        a.by_origin[(rec.partition, rec.offset)] = (rec, ev, None)
        out.append((rec, ev, canonical))
    a.tick("chains", total, total)
    return out


def _check_links(a: AuditContext, decoded: list[Decoded]) -> None:
    """Per job: seq 0, 1, 2, … (no gap, no conflicting duplicate), seq 0 a JobStarted, every
    hash its content's and linked to the previous one."""
    chk = a.checks["chains"]
    heads: dict[str, tuple[int, str | None]] = {}  # job -> (next seq, head hash)
    seen: dict[tuple[str, int], Event] = {}
    unhashed = 0
    for rec, ev, canonical in decoded:
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
    if unhashed:
        chk.counts["unhashed events"] = unhashed


# ---------------------------------------------------------------------------- sealed jobs


@dataclass(slots=True)
class Forgery:
    """An event of a keyed job its key does not vouch for. ``cover``: the record after which
    the processor must have refused it (itself, or the first seal at or past its seq);
    ``tail``: after the job's last seal, so the processor may still hold it."""

    rec: LogRecord
    event: Event
    why: str
    cover: LogRecord
    tail: bool = False


def _judge_seals(a: AuditContext, decoded: list[Decoded]) -> set[tuple[int, int]]:
    """Name every forgery of a keyed job and count every unsealed tail; returns the positions
    the link checks leave out (forgeries and tails)."""
    chk = a.checks["chains"]
    by_job: dict[str, list[Decoded]] = {}
    for d in decoded:
        by_job.setdefault(d[1].job_id, []).append(d)
    forgeries: list[Forgery] = []
    left_out: set[tuple[int, int]] = set()
    keyed = False
    for job_events in by_job.values():
        found, tail, is_keyed = _job_forgeries(job_events)
        keyed |= is_keyed
        forgeries.extend(found)
        left_out.update((rec.partition, rec.offset) for rec in tail)
        if tail:
            _count(chk, "unsealed tail (awaiting a seal)", len(tail))
    last_input_ts = max((r.timestamp for r in a.log.topic("input")), default=None)
    for f in sorted(forgeries, key=lambda f: (f.rec.partition, f.rec.offset)):
        left_out.add((f.rec.partition, f.rec.offset))
        _report_forgery(a, chk, f, (f.rec.partition, f.rec.offset) in a.dead, last_input_ts)
    if keyed:
        dead = {pos: (kind, reason) for pos, kind, reason in _dead_letters(a)}
        _genuine_dead_lettered(chk, decoded, left_out, dead)
    return left_out


def _job_forgeries(events: list[Decoded]) -> tuple[list[Forgery], list[LogRecord], bool]:
    """One job's forgeries and unsealed tail (records), from its events in offset order, and
    whether the job is keyed. The first ``JobStarted`` the gate takes decides: one declaring a
    key it does not seal is refused (a forgery) and the next decides."""
    refused: list[Forgery] = []
    for rec, ev, can in events:
        if ev.seq != 0 or type(ev) is not JobStarted:
            continue
        if ev.public_key is None:
            return refused, [], False  # the job is not keyed: checked as before
        k = load_public_key(ev.public_key)
        problem = "its public_key is not an Ed25519 key in hex" if k is None else check_seal(ev, k, can[0])
        if problem is None:
            forged, tail = _keyed_forgeries(events, k)
            return forged, tail, True
        refused.append(Forgery(rec, ev, f"it is not sealed by the key it declares: {problem}", rec))
    return refused, [], False


def _keyed_forgeries(events: list[Decoded], key: Any) -> tuple[list[Forgery], list[LogRecord]]:
    """A keyed job: authentic = its hash is its content's and it is, or links back from, an
    event whose seal verifies with ``key``; every other event is a forgery, but an unsealed
    one past the last seal that links to the sealed chain is tail (a later seal may cover it)."""
    ok = [(rec, ev, can, _hash_ok(ev, can)) for rec, ev, can in events]
    by_hash: dict[str, list[Event]] = {}
    for _rec, ev, _can, good in ok:
        if good:
            by_hash.setdefault(ev.hash, []).append(ev)
    seals: list[tuple[LogRecord, Event]] = []
    bad_seal: dict[int, str] = {}
    for rec, ev, can, _good in ok:
        if ev.signature is not None:
            problem = check_seal(ev, key, can[0])
            if problem is None:
                seals.append((rec, ev))
            else:
                bad_seal[id(ev)] = problem
    authentic = _linked_back({ev.hash for _r, ev in seals}, by_hash)
    last = max((ev.seq for _r, ev in seals), default=-1)
    reach = _linked_forward(authentic, last, ok)
    at_seq = {ev.seq for _r, ev, _c, good in ok if good and ev.hash in authentic}
    forged: list[Forgery] = []
    tail: list[LogRecord] = []
    for rec, ev, _can, good in ok:
        if good and ev.hash in authentic:
            continue  # the job's record (a copy with a signature that fails changes nothing)
        if good and ev.hash in reach:
            tail.append(rec)
            continue
        cover = rec if id(ev) in bad_seal else next((r for r, s in seals if s.seq >= ev.seq), rec)
        forged.append(Forgery(rec, ev, _why(ev, good, bad_seal.get(id(ev)), ev.seq in at_seq, last),
                              cover, tail=id(ev) not in bad_seal and ev.seq > last))
    return forged, tail


def _why(ev: Event, good: bool, bad_seal: str | None, other_at_seq: bool, last: int) -> str:
    if bad_seal is not None:
        return f"its seal does not verify: {bad_seal}"
    if not good:
        return "unsealed, and its hash is not its content's"
    if other_at_seq:
        return f"unsealed, and the job sealed other content at seq {ev.seq}"
    if ev.seq <= last:
        return "unsealed, and not on the job's sealed chain"
    return (f"unsealed, and not linked to the job's sealed chain (its last seal is at seq {last}: "
            "no later seal can cover it)")


def _hash_ok(ev: Event, can: Any) -> bool:
    if ev.hash is None:
        return False
    try:
        return chain_hash(ev.prev_hash, ev, can[0]) == ev.hash
    except ValueError:
        return False


def _linked_back(sealed: set[str], by_hash: dict[str, list[Event]]) -> set[str]:
    """The hashes the sealed ones vouch for: themselves and every hash their prev_hash links
    reach through events whose hash is their content's."""
    out: set[str] = set()
    todo = [h for h in sealed if h in by_hash]
    while todo:
        h = todo.pop()
        if h in out:
            continue
        out.add(h)
        for ev in by_hash.get(h, ()):
            if ev.prev_hash in by_hash and ev.prev_hash not in out:
                todo.append(ev.prev_hash)
    return out


def _linked_forward(authentic: set[str], last: int, ok: list) -> set[str]:
    """The hashes of unsealed events past the last seal that link, through each other, to the
    job's sealed chain: what a later seal may still cover."""
    reach = set(authentic)
    for _rec, ev, _can, good in sorted((x for x in ok if x[1].seq > last), key=lambda x: x[1].seq):
        if good and ev.signature is None and ev.prev_hash in reach:
            reach.add(ev.hash)
    return reach - authentic


def _report_forgery(a: AuditContext, chk: Check, f: Forgery, dead: bool, last_input_ts: int | None) -> None:
    """A dead-lettered forgery is a warning (the processor refused it); one past the last seal
    is a warning (the processor holds it until a seal comes); one the processor should have
    refused by now and did not dead-letter is a failure."""
    ev = f.event
    name = f"forged {type(ev).__name__}: {f.why}"
    finding = Finding(name, job_id=ev.job_id, seq=ev.seq, where=where(f.rec))
    if dead:
        finding.what += " (dead-lettered)"
        _count(chk, "forged, dead-lettered")
        chk.warn(finding)
    elif not (a.log.topic("dlq") or a.log.has_input):
        _count(chk, "forged (no processor topics to check)")
        chk.warn(finding)
    elif f.tail:
        finding.what += " (held by the processor until a seal covers its seq)"
        _count(chk, "forged, held")
        chk.warn(finding)
    elif a.cut or last_input_ts is None or max(f.rec.timestamp, f.cover.timestamp) >= last_input_ts:
        finding.what += ": not yet dead-lettered when the log was read or cut"
        _count(chk, "forged, not yet dead-lettered")
        chk.warn(finding)
    else:
        finding.what += f": not in the dead-letter topic (the processor must refuse it as {FORGED})"
        _count(chk, "forged, not dead-lettered")
        chk.fail(finding)


def _genuine_dead_lettered(chk: Check, decoded: list[Decoded], left_out: set[tuple[int, int]],
                           dead: dict[tuple[int, int], tuple[str, str]]) -> None:
    """An event of a job's record that the processor refused as forged: the genuine event lost."""
    for rec, ev, _can in decoded:
        pos = (rec.partition, rec.offset)
        kind, reason = dead.get(pos, ("", ""))
        if kind == FORGED and pos not in left_out:
            chk.fail(Finding(f"a genuine event was dead-lettered as forged ({reason})",
                             job_id=ev.job_id, seq=ev.seq, where=where(rec)))


def _count(chk: Check, key: str, n: int = 1) -> None:
    chk.counts[key] = chk.counts.get(key, 0) + n


def _undecodable(a: AuditContext, rec: LogRecord, exc: Exception) -> None:
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
