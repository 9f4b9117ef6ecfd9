"""``traintrace audit``: check a log without trusting the system that wrote it (SPEC §9).

The audit reads an :class:`~streams.audit.log.AuditLog` (the topics, or an archive of
them) and runs five checks, each with its own verdict:

``chains``       every job's events on ``lineage.events``: seq 0, 1, 2, … with no gap, no
                 conflicting duplicate (identical redeliveries are fine), every ``hash`` recomputed
                 from the canonical bytes and linked to the previous one; undecodable records must
                 be in the dead-letter topic.
``input``        the processor's input (``lineage.by-cohort``) is exactly the events log: every
                 routed event is byte for byte the record at its events position, every valid
                 event was routed, each job's events in order. (Skipped, with a note, for a log
                 without the input topic: then the fold order is the events' own order.)
``commands``     re-folding the events in the processor's order through the same referee code
                 gives exactly the commands on ``lineage.control``: none missing, none extra,
                 none different (every field, the processor's timestamps included — they are
                 the time of the input record that caused them, so a replay reproduces them).
``manifests``    likewise every ``DivergenceManifest`` version, with the commitment root and
                 concurrency snapshot it was decided with.
``commitments``  every ``LineageCommitment`` is recomputed at the fold position it covers and
                 must be equal field for field (root, heads, snapshot, fold log); with a keyring,
                 every one must carry a valid Ed25519 signature by a trusted key. Without one,
                 no signature is verified, and the verdict line (``Check.summary``) says so:
                 how many records are signed and unsigned, none counted as verified.

What the processor decides on its own clock is checked for justification instead of equality:
an ``UNTRACEABLE_SOURCE`` halt (issued after a grace period) must name a job that consumed a
checkpoint nobody had written when it was folded; a missing one is a warning.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from streams.files.archive import LogRecord
from streams.referee.input import BadBatch, read_batch
from streams.referee.referee import Referee
from streams.codec import Codec, DecodeError
from streams.core.chain import GENESIS, canonical_bytes, canonical_with_nulls, verify_link
from streams.core.cohorts import CohortRouter
from streams.core.commitment import build_commitment
from streams.core.decide import HaltIssued
from streams.core.errors import InvalidEvent
from streams.core.events import Event, JobStarted, parse_event
from streams.core.state import Config
from streams.referee import records as R
from streams.audit.log import AuditLog, codec_for, no_gc

CHECKS = ("chains", "input", "commands", "manifests", "commitments")
TITLES = {
    "chains": "hash chains and seq continuity",
    "input": "the processor's input is the events log",
    "commands": "every command follows from the log",
    "manifests": "every manifest version follows from the log",
    "commitments": "every commitment recomputes; with --trusted-keys, its signature verifies",
}
MAX_LISTED = 200  # findings kept per check (counts stay exact)


@dataclass
class Finding:
    what: str
    job_id: str | None = None
    seq: int | None = None
    where: str | None = None
    field: str | None = None
    expected: Any = None
    found: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("what", self.what), ("job_id", self.job_id), ("seq", self.seq),
                                  ("where", self.where), ("field", self.field),
                                  ("expected", self.expected), ("found", self.found)) if v is not None}

    def line(self) -> str:
        return finding_line(self.as_dict(), value=_short)


def finding_line(f: Any, value: Callable[[Any], str] | None = None) -> str:
    """One finding (a :class:`Finding`'s ``as_dict()``, as in a JSON report) as one line:
    ``job J, seq S, at topic[p]@o: what — field: expected E, found F``. ``value`` renders the
    expected and found values (default: ``str``, cut at 80 characters); a string is returned
    as it is."""
    if not isinstance(f, dict):
        return str(f)
    value = value or (lambda v: str(v)[:80])
    head = [x for x in (f"job {f['job_id']}" if f.get("job_id") is not None else "",
                        f"seq {f['seq']}" if f.get("seq") is not None else "",
                        f"at {f['where']}" if f.get("where") else "") if x]
    s = (", ".join(head) + ": " if head else "") + str(f.get("what", ""))
    if f.get("field") is not None:
        s += f" — {f['field']}: expected {value(f.get('expected'))}, found {value(f.get('found'))}"
    return s


def _short(v: Any, n: int = 80) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 1] + "…"


@dataclass
class Check:
    name: str
    checked: int = 0
    failed: int = 0
    warned: int = 0
    failures: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: what was seen besides the checked records (jobs, unhashed events, …): summed over shards
    counts: dict[str, int] = field(default_factory=dict)
    skipped: bool = False
    #: the commitments check only: whether trusted keys were given (None for the other checks),
    #: and per record what was found (summed over shards): ``recompute`` (equal to the
    #: recomputed one), ``signed``, ``unsigned``, ``verified``, ``rejected``, ``rejected:REASON``
    trusted: bool | None = None
    tally: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.failed == 0

    def count(self, key: str, n: int = 1) -> None:
        self.tally[key] = self.tally.get(key, 0) + n

    def signatures(self) -> dict[str, Any] | None:
        """What is known of the commitments' signatures (the commitments check only): how many
        were ``signed`` and ``unsigned``, and — only with trusted keys — ``verified`` (a valid
        signature by a trusted key) or ``rejected`` (by reason); without trusted keys every
        signed one is ``not_checked``. Nothing here is ever counted as verified unless it was."""
        if self.trusted is None:
            return None
        t = self.tally
        signed, unsigned = t.get("signed", 0), t.get("unsigned", 0)
        return {"trusted_keys": self.trusted, "signed": signed, "unsigned": unsigned,
                "verified": t.get("verified", 0) if self.trusted else 0,
                "rejected": t.get("rejected", 0) if self.trusted else 0,
                "not_checked": 0 if self.trusted else signed,
                "rejected_by_reason": {k.split(":", 1)[1]: v for k, v in sorted(t.items())
                                       if k.startswith("rejected:")}}

    @property
    def summary(self) -> str:
        """The verdict line: ``PASS — …`` saying exactly what was established. For the
        commitments: how many recompute, and how many signatures were verified — or that they
        were NOT checked (no trusted keys), with how many records are signed and unsigned."""
        if self.skipped:
            return f"{self.verdict} — " + (self.notes[0] if self.notes else "nothing to check")
        sig = self.signatures()
        if sig is None:
            s = f"{self.verdict} — {self.checked} checked, {self.failed} failed"
            return s + (f", {self.warned} warning(s)" if self.warned else "")
        ok = self.tally.get("recompute", 0)
        head = (f"{ok} commitment{'s recompute' if ok != 1 else ' recomputes'}" if ok == self.checked
                else f"{ok} of {self.checked} commitments recompute{'s' if ok == 1 else ''}")
        if not sig["trusted_keys"]:
            return (f"{self.verdict} — {head}; signatures NOT checked (no --trusted-keys): "
                    f"{sig['signed']} signed, {sig['unsigned']} unsigned")
        if not sig["rejected"]:
            v = sig["verified"]
            return f"{self.verdict} — {head}, {v} signature{'s' if v != 1 else ''} verified"
        why = ", ".join(f"{r} {n}" for r, n in sig["rejected_by_reason"].items())
        return (f"{self.verdict} — {head}; signatures: {sig['verified']} verified, {sig['rejected']} rejected"
                + (f" ({why})" if why else "") + f" of {self.checked}")

    def fail(self, f: Finding) -> None:
        self.failed += 1
        if len(self.failures) < MAX_LISTED:
            self.failures.append(f)

    def warn(self, f: Finding) -> None:
        self.warned += 1
        if len(self.warnings) < MAX_LISTED:
            self.warnings.append(f)

    @property
    def verdict(self) -> str:
        return "SKIPPED" if self.skipped else ("PASS" if self.passed else "FAIL")

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "title": TITLES[self.name], "verdict": self.verdict, "passed": self.passed,
               "summary": self.summary,
               "checked": self.checked, "failed": self.failed, "warned": self.warned,
               "failures": [f.as_dict() for f in self.failures],
               "warnings": [f.as_dict() for f in self.warnings], "notes": self.notes,
               "counts": dict(sorted(self.counts.items()))}
        sig = self.signatures()
        if sig is not None:
            out["recompute"] = self.tally.get("recompute", 0)
            out["signatures"] = sig
        return out


@dataclass
class AuditReport:
    source: str
    checks: list[Check]
    events: int = 0
    seconds: float = 0.0
    final_state: dict[str, Any] = field(default_factory=dict)
    #: what the replay decided, encoded: topic -> [(key, record name, bytes)] in decision order
    recomputed: dict[str, list[tuple[str, str, bytes]]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "passed": self.passed, "verdict": "PASS" if self.passed else "FAIL",
                "events": self.events, "seconds": round(self.seconds, 3),
                "checks": [c.as_dict() for c in self.checks],
                "recomputed": {t: len(v) for t, v in self.recomputed.items()},
                "final_state": self.final_state, "meta": self.meta}


@dataclass(slots=True)
class _Item:
    """One event in the processor's fold order."""

    cohort: str
    event: Event | None
    ts: int
    partition: int
    via: LogRecord
    tick: tuple[int, int] | None = None  # (now_ms, grace_ms) of a clock tick (event is None)

    @property
    def where(self) -> str:
        return _where(self.via)


def _where(rec: LogRecord) -> str:
    return f"{rec.topic}[{rec.partition}]@{rec.offset}"


def _values_differ(expected: dict[str, Any], found: dict[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for k in sorted(set(expected) | set(found)):
        if k == "type" and not prefix:
            continue  # the decoder names the record type; the records themselves have no such field
        e, f = expected.get(k), found.get(k)
        if isinstance(e, dict) and isinstance(f, dict):
            out.extend(_values_differ(e, f, f"{prefix}{k}."))
        elif e != f:
            out.append((f"{prefix}{k}", e, f))
    return out


class Auditor:
    def __init__(self, log: AuditLog, config: Config | None = None, trusted_keys: Any = None,
                 codec: Codec | None = None, cut: bool = False,
                 progress: Callable[[str, int, int], None] | None = None) -> None:
        self.log = log
        self.config = config or Config()
        self.trusted = trusted_keys
        self.codec = codec or codec_for(log)
        self.cut = cut or bool(log.meta.get("until"))
        self.progress = progress
        self.checks = {name: Check(name) for name in CHECKS}
        self.checks["commitments"].trusted = trusted_keys is not None
        # events position -> (record, event or None, error)
        self.by_origin: dict[tuple[int, int], tuple[LogRecord, Event | None, str | None]] = {}
        self.items: list[_Item] = []
        self.dead: set[tuple[int, int]] = set()
        #: id(event) -> its canonical bytes (computed once for the chain check, reused by the fold;
        #: the events are kept alive by by_origin, so their ids are stable)
        self.canonical: dict[int, Any] = {}

    # ------------------------------------------------------------------ run

    def run(self) -> AuditReport:
        t0 = time.perf_counter()
        self._dead_letters()
        self._chains()
        self._input()
        expected, at_end, referee = self._replay()
        self._compare_control(expected["control"], at_end)
        self._compare_manifests(expected["manifests"])
        report = AuditReport(self.log.source, [self.checks[c] for c in CHECKS], len(self.items))
        report.final_state = referee.final_state()
        report.recomputed = {t: [(em.key, em.record, self.codec.encode_record(em.record, em.value))
                                 for em, _cause in v] for t, v in expected.items()}
        report.seconds = time.perf_counter() - t0
        report.meta = {"cut": self.cut, "has_input": self.log.has_input,
                       "records": {t: len(v) for t, v in self.log.records.items()}}
        return report

    def _decoded(self, topic: str, chk: Check, what: str):
        """The records of ``topic`` decoded: (record, name, value); an undecodable one fails
        ``chk``; tombstones are skipped."""
        for rec in self.log.topic(topic):
            if rec.value is None:
                continue
            try:
                name, value = self.codec.decode_record(rec.value)
            except DecodeError as exc:
                chk.fail(Finding(f"undecodable {what}: {exc}", job_id=rec.key if topic == "control" else None,
                                 where=_where(rec)))
                continue
            yield rec, name, value

    def _tick(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)

    # ------------------------------------------------------------------ dead letters

    def _dead_letters(self) -> None:
        events_topic = (self.log.meta.get("topics") or {}).get("events")
        for rec in self.log.topic("dlq"):
            try:
                _name, d = self.codec.decode_record(rec.value or b"")
            except DecodeError:
                continue
            if events_topic is None or d.get("original_topic") in (events_topic, None) or \
                    str(d.get("original_topic", "")).endswith("events"):
                self.dead.add((d["original_partition"], d["original_offset"]))

    # ------------------------------------------------------------------ chains

    def _chains(self) -> None:
        chk = self.checks["chains"]
        recs = self.log.topic("events")
        total = len(recs)
        heads: dict[str, tuple[int, str | None]] = {}  # job -> (next seq, head hash)
        seen: dict[tuple[str, int], Event] = {}
        unhashed = 0
        for moved in self.log.disorder:
            chk.fail(Finding("the archive holds this record out of offset order (records moved in the file)",
                             where=moved))
        for i, rec in enumerate(recs):
            if i % 5000 == 0:
                self._tick("chains", i, total)
            try:
                ev = parse_event(self.codec.decode_event(rec.value or b""))
            except (DecodeError, InvalidEvent) as exc:
                self.by_origin[(rec.partition, rec.offset)] = (rec, None, str(exc))
                if (rec.partition, rec.offset) in self.dead:
                    chk.counts["undecodable, dead-lettered"] = chk.counts.get("undecodable, dead-lettered", 0) + 1
                elif self.log.topic("dlq") or self.log.has_input:
                    chk.fail(Finding(f"undecodable record that is not in the dead-letter topic: {exc}",
                                     job_id=rec.key, where=_where(rec)))
                else:
                    chk.warn(Finding(f"undecodable record: {exc}", job_id=rec.key, where=_where(rec)))
                continue
            canonical = canonical_with_nulls(ev)
            self.canonical[id(ev)] = canonical
            self.by_origin[(rec.partition, rec.offset)] = (rec, ev, None)
            chk.checked += 1
            job, seq = ev.job_id, ev.seq
            if ev.hash is None:
                unhashed += 1
            prev = seen.get((job, seq))
            if prev is not None:
                if prev != ev and canonical_bytes(prev) != canonical_bytes(ev):
                    chk.fail(Finding("conflicting duplicate: a different event with the same seq",
                                     job_id=job, seq=seq, where=_where(rec),
                                     field=_first_diff(prev, ev)[0], expected=_first_diff(prev, ev)[1],
                                     found=_first_diff(prev, ev)[2]))
                continue
            seen[(job, seq)] = ev
            nxt, head = heads.get(job, (0, GENESIS))
            if seq != nxt:
                what = (f"seq gap: expected seq {nxt}, found {seq}" if seq > nxt
                        else f"out of order: seq {seq} after seq {nxt - 1}")
                chk.fail(Finding(what, job_id=job, seq=seq, where=_where(rec), field="seq", expected=nxt, found=seq))
                head = None  # the link to a missing predecessor cannot be checked
            if seq == 0 and not isinstance(ev, JobStarted):
                chk.fail(Finding("seq 0 is not a JobStarted", job_id=job, seq=seq, where=_where(rec)))
            problem = verify_link(ev, head if head is not None else None, canonical[0])
            if problem is not None:
                chk.fail(Finding(f"hash chain broken: {problem}", job_id=job, seq=seq, where=_where(rec)))
            heads[job] = (max(nxt, seq + 1), ev.hash)
        self._tick("chains", total, total)
        if unhashed:
            chk.counts["unhashed events"] = unhashed
        chk.counts["jobs"] = len(heads)

    # ------------------------------------------------------------------ input

    def _input(self) -> None:
        chk = self.checks["input"]
        if not self.log.has_input:
            chk.skipped = True
            chk.notes.append("the log has no processor input (lineage.by-cohort): the fold order is the "
                             "events' own order, so only decisions that do not depend on the interleaving "
                             "of jobs can be expected to match")
            router = CohortRouter()
            for (p, o), (rec, ev, _err) in sorted(self.by_origin.items()):
                if ev is not None:
                    self.items.append(_Item(router.route(ev), ev, rec.timestamp, 0, rec))
            return
        routed: set[tuple[int, int]] = set()
        last_of_job: dict[str, int] = {}
        folded_seqs: dict[str, set[int]] = {}
        recs = self.log.topic("input")
        for i, rec in enumerate(recs):
            if i % 200 == 0:
                self._tick("input", i, len(recs))
            try:
                batch = read_batch(self.codec, rec.value)
            except BadBatch as exc:
                chk.fail(Finding(f"undecodable input batch: {exc.__cause__}", where=_where(rec)))
                continue
            cohort = batch.cohort
            if batch.tick is not None:  # the processor's clock, recorded in its input
                self.items.append(_Item(cohort, None, rec.timestamp, rec.partition, rec, batch.tick))
                continue
            for r in batch.events:
                chk.checked += 1
                origin = (r["partition"], r["offset"])
                have = self.by_origin.get(origin)
                if have is None:
                    ev = _try_parse(self.codec, r["value"])
                    chk.fail(Finding(f"the processor folded an event that is not on the events log "
                                     f"(events[{origin[0]}]@{origin[1]}, via {_where(rec)})",
                                     job_id=ev.job_id if ev else None, seq=ev.seq if ev else None, where=f"events[{origin[0]}]@{origin[1]}"))
                    continue
                orec, ev, err = have
                if orec.value != r["value"] or ev is None:
                    folded = _try_parse(self.codec, r["value"])
                    job = (folded or ev).job_id if (folded or ev) else orec.key
                    seq = (folded or ev).seq if (folded or ev) else None
                    f, e, g = _first_diff(folded, ev) if folded is not None and ev is not None else ("value", None, None)
                    chk.fail(Finding(f"the events log holds different bytes than the processor folded "
                                     f"(via {_where(rec)})", job_id=job, seq=seq, where=f"events[{origin[0]}]@{origin[1]}",
                                     field=f, expected=e, found=g))
                    if folded is None:
                        continue
                    ev = folded
                if origin not in routed:  # (a redelivered batch is folded again: the fold drops it)
                    routed.add(origin)
                    last = last_of_job.get(ev.job_id)
                    seqs = folded_seqs.setdefault(ev.job_id, set())
                    # a seq already folded (an identical redelivery, which the fold drops, or a
                    # conflicting duplicate, which it dead-letters) is no reordering
                    if last is not None and ev.seq < last and ev.seq not in seqs:
                        chk.fail(Finding(f"folded out of order: seq {ev.seq} after seq {last} "
                                         f"(via {_where(rec)})", job_id=ev.job_id, seq=ev.seq,
                                         where=f"events[{origin[0]}]@{origin[1]}"))
                    seqs.add(ev.seq)
                    last_of_job[ev.job_id] = max(ev.seq, last if last is not None else -1)
                self.items.append(_Item(cohort, ev, rec.timestamp, rec.partition, rec))
        self._tick("input", len(recs), len(recs))
        last_input_ts = max((r.timestamp for r in recs), default=0)
        for origin, (rec, ev, _err) in sorted(self.by_origin.items()):
            if ev is None or origin in routed or origin in self.dead:
                continue
            f = Finding("a valid event the processor never folded (and did not dead-letter)",
                        job_id=ev.job_id, seq=ev.seq, where=_where(rec))
            if self.cut or rec.timestamp >= last_input_ts:
                f.what = "not yet folded when the log was read or cut"
                chk.warn(f)
            else:
                chk.fail(f)

    # ------------------------------------------------------------------ replay

    def _replay(self) -> tuple[dict[str, list[tuple[R.Emission, _Item | None]]], list[R.Emission], Referee]:
        referee = Referee(self.config)
        expected: dict[str, list[tuple[R.Emission, _Item | None]]] = {"control": [], "manifests": [], "commitments": []}
        chk = self.checks["commitments"]
        pending = self._commitment_targets()
        # cohort -> (items folded, events accepted)
        counts: dict[str, list[int]] = {}
        for cohort in list(pending):
            self._check_commitments(referee, cohort, pending, ("i", 0), expected)
            self._check_commitments(referee, cohort, pending, ("a", 0), expected)
        total = len(self.items)
        items = self.items
        for n, item in enumerate(items):
            if n % 5000 == 0:
                self._tick("replay", n, total)
            if item.event is None:  # a clock tick of the processor, in its input
                emissions = referee.clock_tick(item.cohort, item.tick[0], item.tick[1], partition=item.partition)
                accepted = False
            else:
                handled = referee.handle(item.cohort, item.event, item.ts, partition=item.partition, publish=True,
                                         canonical=self.canonical.get(id(item.event)))
                emissions, accepted = handled.emissions, handled.result.accepted
            for em in emissions:
                if em.topic in expected:
                    expected[em.topic].append((em, item))
            c = counts.setdefault(item.cohort, [0, 0])
            if item.event is not None:
                c[0] += 1
                c[1] += accepted
            if item.cohort in pending:
                if item.event is not None:
                    self._check_commitments(referee, item.cohort, pending, ("i", c[0]), expected)
                    if accepted:
                        self._check_commitments(referee, item.cohort, pending, ("a", c[1]), expected)
                if n + 1 == total or items[n + 1].via is not item.via:  # the input record is folded
                    referee.note_input(item.cohort, item.via.partition, item.via.offset)
                    self._check_commitments(referee, item.cohort, pending,
                                            ("o", item.via.partition, item.via.offset), expected)
        self._tick("replay", total, total)
        for cohort, targets in pending.items():
            for _key, lst in targets.items():
                for rec, value in lst:
                    chk.fail(Finding("commits to a fold position the log does not reach "
                                     f"(log_size {value.get('log_size')}, {len(value.get('heads') or [])} heads)",
                                     where=_where(rec)))
        at_end: list[R.Emission] = []
        for cohort in sorted(referee.engines):
            for d in referee.engines[cohort].finish_input():
                if isinstance(d, HaltIssued):
                    at_end.append(R.halt_emission(d, 0))
        return expected, at_end, referee

    def _commitment_targets(self) -> dict[str, dict[tuple[str, int], list[tuple[LogRecord, dict[str, Any]]]]]:
        """Published commitments, by cohort and by the fold position they cover: ("a", n) after the
        n-th accepted event (``log_size``), or ("i", k) after the k-th folded item (from the heads)."""
        chk = self.checks["commitments"]
        out: dict[str, dict[tuple[str, int], list[tuple[LogRecord, dict[str, Any]]]]] = {}
        first_index: dict[tuple[str, int], int] = {}
        per_cohort: dict[str, int] = {}
        recs = self.log.topic("commitments")
        if not recs:
            chk.skipped = True
            chk.notes.append("the log has no commitments")
            return out
        need_heads = False
        decoded = []
        for rec, _name, value in self._decoded("commitments", chk, "commitment"):
            decoded.append((rec, value))
            if value.get("log_size") is None:
                need_heads = True
        if need_heads:
            for item in self.items:
                if item.event is None:
                    continue
                k = per_cohort[item.cohort] = per_cohort.get(item.cohort, 0) + 1
                first_index.setdefault((item.event.job_id, item.event.seq), k)
        for rec, value in decoded:
            chk.checked += 1
            self._check_signature(rec, value)
            cohort = value["cohort_id"]
            if value.get("input_offset") is not None:
                key = ("o", value.get("input_partition"), int(value["input_offset"]))
            elif value.get("log_size") is not None:
                key = ("a", int(value["log_size"]))
            else:
                pos = 0
                for h in value.get("heads") or []:
                    k = first_index.get((h["job_id"], h["seq"]))
                    if k is None:
                        chk.fail(Finding("commits to a head the log does not have", job_id=h["job_id"],
                                         seq=h["seq"], where=_where(rec)))
                        pos = -1
                        break
                    pos = max(pos, k)
                if pos < 0:
                    continue
                key = ("i", pos)
            out.setdefault(cohort, {}).setdefault(key, []).append((rec, value))
        return out

    def _check_commitments(self, referee: Referee, cohort: str, pending, key, expected) -> None:
        targets = pending.get(cohort)
        if not targets or key not in targets:
            return
        chk = self.checks["commitments"]
        lin = referee.engine(cohort)
        for rec, value in targets.pop(key):
            mine = build_commitment(cohort, lin, value["ts"])
            pos = referee.position.get(cohort) if value.get("input_offset") is not None else None
            mine["input_partition"], mine["input_offset"] = pos if pos is not None else (None, None)
            for k in ("signature", "key_id"):
                mine[k] = value.get(k)
            expected["commitments"].append((R.Emission("commitments", cohort, "LineageCommitment", mine), None))
            diffs = _values_differ(_plain(mine), _plain(value))
            chk.count("differ" if diffs else "recompute")
            for f, e, g in diffs[:5]:
                chk.fail(Finding(f"commitment of cohort {cohort!r} differs from the recomputed one",
                                 where=_where(rec), field=f, expected=e, found=g))
        if not targets:
            pending.pop(cohort, None)

    def _check_signature(self, rec: LogRecord, value: dict[str, Any]) -> None:
        chk = self.checks["commitments"]
        sig = value.get("signature")
        signed = sig is not None and sig != b"" and sig != ""
        chk.count("signed" if signed else "unsigned")
        if self.trusted is None:
            note = ("signatures NOT checked: no trusted keys given (--trusted-keys), so no signature "
                    "was verified" if signed else
                    "commitments without a signature (a worker without a signing key): nothing to verify them by")
            if note not in chk.notes:
                chk.notes.append(note)
            return
        from streams.signing import verify_commitment

        ok, reason = verify_commitment(value, self.trusted)
        chk.count("verified" if ok else "rejected")
        if not ok:
            chk.count(f"rejected:{reason}")
            chk.fail(Finding(f"signature rejected: {reason}", where=_where(rec), field="signature",
                             expected="a valid signature by a trusted key", found=value.get("key_id")))

    # ------------------------------------------------------------------ control

    def _present(self, topic: str) -> bool:
        return topic in self.log.records or topic in (self.log.meta.get("topics") or {})

    def _compare_control(self, expected: list[tuple[R.Emission, _Item | None]], at_end: list[R.Emission]) -> None:
        chk = self.checks["commands"]
        if not self._present("control"):
            chk.skipped = True
            chk.notes.append("the log has no control topic: commands recomputed, none to compare")
            chk.counts["recomputed"] = len(expected)
            return
        want: dict[str, tuple[R.Emission, _Item | None]] = {}
        order_of_job: dict[str, list[str]] = {}
        for em, cause in expected:
            want[em.value["command_id"]] = (em, cause)
            if em.record != "HaltCommand":  # the job's plan records, each superseding the one before
                order_of_job.setdefault(em.value["job_id"], []).append(em.value["command_id"])
        end_halts = {em.value["command_id"]: em for em in at_end}
        last_index: dict[str, tuple[int, str, str]] = {}  # job -> (chain index, command id, where)
        got: dict[str, dict[str, Any]] = {}
        operator = 0
        for rec, name, value in self._decoded("control", chk, "control record"):
            if name == "HaltCommand" and value.get("reason") == "RELEASE":
                operator += 1
                continue
            chk.checked += 1
            cid = value.get("command_id")
            where = _where(rec)
            prev = got.get(cid)
            if prev is not None and prev == value:
                continue  # re-published identically (a recovering worker, a redelivery)
            got.setdefault(cid, value)
            hit = want.get(cid)
            if hit is None:
                chk.fail(Finding(f"extra {name}: nothing in the log implies command {cid[:12]}",
                                 job_id=value.get("job_id"), where=where,
                                 field="action" if "action" in value else "reason",
                                 expected=None, found=value.get("action") or value.get("reason")))
                continue
            em, cause = hit
            if em.record != name:
                chk.fail(Finding(f"command {cid[:12]} is a {name}, the log implies a {em.record}",
                                 job_id=value.get("job_id"), where=where))
                continue
            chain = order_of_job.get(em.value["job_id"], [])
            if cid in chain:  # plan records must come out in the order they supersede each other
                idx = chain.index(cid)
                last = last_index.get(em.value["job_id"])
                if last is not None and idx < last[0]:
                    chk.fail(Finding(f"{name} {cid[:12]} published after {last[1][:12]}, which supersedes it: "
                                     "the job's effective plan on the topic is stale",
                                     job_id=em.value["job_id"], where=where, field="order",
                                     expected=f"before {last[2]}", found=where))
                else:
                    last_index[em.value["job_id"]] = (idx, cid, where)
            for f, e, g in _values_differ(em.value, value)[:8]:
                chk.fail(Finding(f"{name} {cid[:12]} differs from what the log implies"
                                 + _after(cause),
                                 job_id=value.get("job_id"), where=where, field=f, expected=e, found=g))
        if operator:
            chk.counts["operator releases (not decisions: not audited)"] = operator
        for cid, (em, cause) in want.items():
            if cid in got:
                continue
            job = em.value["job_id"]
            chain = order_of_job.get(job, [])
            earlier = chain[:chain.index(cid)] if cid in chain else []
            later = chain[chain.index(cid) + 1:] if cid in chain else []
            f = Finding(f"missing {em.record} {cid[:12]}"
                        + (f" ({em.value.get('action') or em.value.get('reason')}"
                           f"{' → ' + str(em.value.get('target_checkpoint_id')) if em.value.get('target_checkpoint_id') else ''})")
                        + _after(cause, "implied"),
                        job_id=job, seq=cause.event.seq if cause and cause.event is not None and cause.event.job_id == job else None,
                        where=cause.where if cause else None)
            if em.record != "HaltCommand" and later:
                # a worker that recovers a partition publishes the plan it ends with, not the
                # ones its replay went through (the job's last plan record is checked on its own)
                f.what += ": superseded before it was published (a recovering worker skips it)"
                chk.warn(f)
            elif em.record == "PlanCleared" and not any(c in got for c in earlier):
                f.what += ": it clears a plan that was never published, so there is nothing to clear"
                chk.warn(f)
            else:
                self._missing(chk, f)
        for cid, em in end_halts.items():
            if cid not in got and cid not in want:
                chk.warn(Finding(f"no HaltCommand yet for an unresolved source ({em.value.get('detail')}): "
                                 "issued on the processor's clock after the grace period",
                                 job_id=em.value["job_id"]))

    # ------------------------------------------------------------------ manifests

    def _compare_manifests(self, expected: list[tuple[R.Emission, _Item | None]]) -> None:
        chk = self.checks["manifests"]
        if not self._present("manifests"):
            chk.skipped = True
            chk.notes.append("the log has no manifests topic: versions recomputed, none to compare")
            chk.counts["recomputed"] = len(expected)
            return
        want: dict[tuple[str, int], tuple[R.Emission, _Item | None]] = {}
        latest: dict[str, int] = {}
        for em, cause in expected:
            k = (em.value["incident_id"], em.value["version"])
            want[k] = (em, cause)
            latest[k[0]] = max(latest.get(k[0], 0), k[1])
        got: dict[tuple[str, int], dict[str, Any]] = {}
        got_latest: dict[str, int] = {}
        for rec, _name, value in self._decoded("manifests", chk, "manifest"):
            chk.checked += 1
            k = (value["incident_id"], value["version"])
            where = _where(rec)
            root_job = (value.get("root") or {}).get("job_id")
            prev = got.get(k)
            if prev is not None and prev == value:
                continue  # re-published identically (a recovering worker, a redelivery)
            got.setdefault(k, value)
            got_latest[k[0]] = max(got_latest.get(k[0], 0), k[1])
            hit = want.get(k)
            if hit is None:
                chk.fail(Finding(f"extra manifest {k[0][:12]} v{k[1]}: the log implies no such version",
                                 job_id=root_job, where=where))
                continue
            em, cause = hit
            for f, e, g in _values_differ(em.value, value)[:8]:
                chk.fail(Finding(f"manifest {k[0][:12]} v{k[1]} differs from what the log implies"
                                 + _after(cause),
                                 job_id=root_job, where=where, field=f, expected=e, found=g))
        for k, (em, cause) in want.items():
            if k in got:
                continue
            f = Finding(f"missing manifest {k[0][:12]} v{k[1]}"
                        + _after(cause, "implied"),
                        job_id=em.value["root"]["job_id"], where=cause.where if cause else None)
            if got_latest.get(k[0], 0) > k[1]:
                f.what += ": a later version is present (the topic is compacted)"
                chk.warn(f)
            else:
                self._missing(chk, f)

    def _missing(self, chk: Check, f: Finding) -> None:
        """A record the log implies and the topic lacks: a failure, unless the log was cut
        (``--until``) before it could be published."""
        if self.cut:
            f.what += ": not yet published when the log was read or cut"
            chk.warn(f)
        else:
            chk.fail(f)


def _after(cause: _Item | None, verb: str = "decided") -> str:
    if cause is None:
        return ""
    if cause.event is None:
        return f" ({verb} at the processor's clock tick {cause.where})"
    return f" ({verb} after {cause.event.job_id} seq {cause.event.seq}, {cause.where})"


def _plain(v: dict[str, Any]) -> dict[str, Any]:
    """A commitment as a comparable dict (lists of records as dicts keyed by position)."""
    out: dict[str, Any] = {}
    for k, x in v.items():
        if isinstance(x, list):
            out[k] = {str(i): (dict(y) if isinstance(y, dict) else y) for i, y in enumerate(x)}
        else:
            out[k] = x
    return out


def _try_parse(codec: Codec, value: bytes | None) -> Event | None:
    try:
        return parse_event(codec.decode_event(value or b""))
    except (DecodeError, InvalidEvent):
        return None


def _first_diff(a: Event | None, b: Event | None) -> tuple[str | None, Any, Any]:
    if a is None or b is None:
        return None, None, None
    if type(a) is not type(b):
        return "type", type(a).__name__, type(b).__name__
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if x != y and not (x != x and y != y):  # NaN equals NaN here
            return name, x, y
    return None, None, None


def audit(log: AuditLog, config: Config | None = None, trusted_keys: Any = None, cut: bool = False,
          progress: Callable[[str, int, int], None] | None = None, workers: int | None = None) -> AuditReport:
    """Audit ``log``. Cohorts are independent (SPEC §2: the lineage is folded per cohort), so a
    large log is split by cohort into ``workers`` shards (default: the CPUs, at most 4) audited
    by forked processes, and their reports merged; a log that cannot be split cleanly (a job
    routed to cohorts of two shards) is audited in one process. Either way the verdicts, the
    findings and the recomputed records are the same."""
    with no_gc():
        return _audit(log, config, trusted_keys, cut, progress, workers)


def _audit(log: AuditLog, config, trusted_keys, cut, progress, workers) -> AuditReport:
    n = workers if workers is not None else min(4, os.cpu_count() or 1)
    if n > 1 and len(log.topic("events")) >= PARALLEL_MIN_EVENTS and "fork" in mp.get_all_start_methods():
        t0 = time.perf_counter()
        shards = split_by_cohort(log, n)
        if shards is not None:
            return _audit_shards(log, shards, config, trusted_keys, cut, progress, t0)
    return Auditor(log, config, trusted_keys, cut=cut, progress=progress).run()


PARALLEL_MIN_EVENTS = 20_000
_SHARDS: list[AuditLog] = []
_SHARD_ARGS: tuple[Any, ...] = ()


def _shard_of(key: str, n: int) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % n


def split_by_cohort(log: AuditLog, n: int, codec: Codec | None = None) -> list[AuditLog] | None:
    """``log`` as ``n`` logs, each holding whole cohorts: their processor input, their jobs'
    events and commands, their manifests and commitments (the dead letters go to every shard).
    None when a job was routed to cohorts of two shards, or the log has no processor input."""
    codec = codec or codec_for(log)
    if not log.has_input:
        return None
    events_at = {(r.partition, r.offset): r for r in log.topic("events")}
    size: dict[str, int] = {}
    job_cohorts: dict[str, set[str]] = {}
    for rec in log.topic("input"):
        if rec.key is None:
            return None
        try:
            _name, batch = codec.decode_record(rec.value or b"")
        except DecodeError:
            continue  # the shard's audit reports it
        size[rec.key] = size.get(rec.key, 0) + len(batch["events"])
        for r in batch["events"]:
            ev = events_at.get((r["partition"], r["offset"]))
            if ev is not None and ev.key is not None:
                job_cohorts.setdefault(ev.key, set()).add(rec.key)
    # whole cohorts, largest first, each to the least loaded shard (ties: the lower index)
    cohort_shard: dict[str, int] = {}
    load = [0] * n
    for cohort in sorted(size, key=lambda c: (-size[c], c)):
        k = min(range(n), key=lambda i: (load[i], i))
        cohort_shard[cohort] = k
        load[k] += size[cohort]

    def shard_of_cohort(cohort: str) -> int:
        k = cohort_shard.get(cohort)
        return k if k is not None else _shard_of(cohort, n)

    job_shard: dict[str, int] = {}
    for job, cohorts in job_cohorts.items():
        ks = {shard_of_cohort(c) for c in cohorts}
        if len(ks) > 1:
            return None
        job_shard[job] = ks.pop()
    shards = [AuditLog(meta=log.meta, source=log.source) for _ in range(n)]
    for rec in log.topic("input"):
        shards[shard_of_cohort(rec.key or "")].add(rec)
    for rec in log.topic("events"):
        shards[job_shard.get(rec.key) if rec.key in job_shard else _shard_of(rec.key or "", n)].add(rec)
    for rec in log.topic("control"):
        shards[job_shard.get(rec.key) if rec.key in job_shard else _shard_of(rec.key or "", n)].add(rec)
    for rec in log.topic("manifests"):
        try:
            _name, v = codec.decode_record(rec.value or b"")
            cohort = v.get("cohort_id") or ""
        except DecodeError:
            cohort = ""
        shards[shard_of_cohort(cohort)].add(rec)
    for rec in log.topic("commitments"):
        shards[shard_of_cohort(rec.key or "")].add(rec)
    for shard in shards:
        for t in ("events", "input", "control", "manifests", "commitments", "dlq"):
            if t in log.records or t in (log.meta.get("topics") or {}):
                shard.records.setdefault(t, [])
        shard.records["dlq"] = list(log.topic("dlq"))
    shards[0].disorder = list(log.disorder)
    shards = [sh for sh in shards if sh.has_input]  # fewer cohorts than processes
    return shards if len(shards) > 1 else None


def _run_shard(i: int) -> AuditReport:
    config, trusted, cut = _SHARD_ARGS
    return Auditor(_SHARDS[i], config, trusted, cut=cut).run()


def _audit_shards(log: AuditLog, shards: list[AuditLog], config, trusted, cut, progress, t0) -> AuditReport:
    global _SHARDS, _SHARD_ARGS
    _SHARDS, _SHARD_ARGS = shards, (config, trusted, cut)
    if progress is not None:
        progress(f"audit ({len(shards)} processes)", 0, len(shards))
    try:
        # shards 1..n-1 in forked workers, shard 0 here meanwhile
        with mp.get_context("fork").Pool(len(shards) - 1) as pool:
            pending = pool.map_async(_run_shard, range(1, len(shards)))
            parts = [_run_shard(0)]
            if progress is not None:
                progress(f"audit ({len(shards)} processes)", 1, len(shards))
            parts.extend(pending.get())
            if progress is not None:
                progress(f"audit ({len(shards)} processes)", len(shards), len(shards))
    finally:
        _SHARDS, _SHARD_ARGS = [], ()
    checks = []
    for name in CHECKS:
        mine = [p.check(name) for p in parts]
        c = Check(name, skipped=all(m.skipped for m in mine), trusted=mine[0].trusted)
        for m in mine:
            for k, v in m.tally.items():
                c.count(k, v)
            c.checked += m.checked
            c.failed += m.failed
            c.warned += m.warned
            c.failures.extend(m.failures)
            c.warnings.extend(m.warnings)
            c.notes.extend(x for x in m.notes if x not in c.notes)
            for k, v in m.counts.items():
                c.counts[k] = c.counts.get(k, 0) + v
        c.failures, c.warnings = c.failures[:MAX_LISTED], c.warnings[:MAX_LISTED]
        checks.append(c)
    from streams.core.cohorts import merge_final_states

    report = AuditReport(log.source, checks, sum(p.events for p in parts))
    report.final_state = merge_final_states((f"shard{i}", p.final_state) for i, p in enumerate(parts))
    report.recomputed = {t: [x for p in parts for x in p.recomputed.get(t, [])] for t in parts[0].recomputed}
    report.meta = {**parts[0].meta, "records": {t: len(v) for t, v in log.records.items()}, "processes": len(shards)}
    report.seconds = time.perf_counter() - t0
    return report


def recomputed_digest(report: AuditReport, topics: Iterable[str] = ("manifests", "commitments")) -> str:
    """SHA-256 over the recomputed records of ``topics``, in order: equal digests mean
    byte-identical replays."""
    import hashlib

    h = hashlib.sha256()
    for t in topics:  # in a canonical order: how the audit was split must not matter
        for key, name, data in sorted(report.recomputed.get(t, [])):
            h.update(f"{t}\x00{key}\x00{name}\x00{len(data)}\x00".encode())
            h.update(data)
    return h.hexdigest()
