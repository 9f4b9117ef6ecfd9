"""Merkle proofs over a traintrace log, as self-contained JSON documents, and their verification.

Three kinds of proof, each about one cohort (see ``docs/keys-and-proofs.md``):

``head-inclusion``
    a job's chain head ``(job_id, seq, hash)`` is leaf ``index`` of the heads tree of a
    ``LineageCommitment`` (``root``, ``tree_size``): RFC 9162 §2.1.3 inclusion.
``event-inclusion``
    one event ``(job_id, seq, hash)`` is leaf ``index`` of the cohort's fold log of
    ``tree_size`` leaves (the commitment's ``log_root``/``log_size``).
``log-consistency``
    the fold log of ``old_size`` leaves (``old_root``) is a prefix of the one of ``new_size``
    leaves (``new_root``): RFC 9162 §2.1.4 consistency.

A document names the commitment each root belongs to: the one published on
``lineage.commitments`` when the log has it (``"commitment_source": "published"``; signed if
the processor signs), else one recomputed from the log here (``"recomputed"``, unsigned).
:func:`verify_proof` needs only the document (and the trusted keys, to check signatures).

Building: :func:`replay` folds a log (:func:`streams.audit.log.load`) per cohort through
:class:`~streams.core.decide.Lineage` in the processor's fold order and keeps every accepted
event's leaf; :func:`prove_head`, :func:`prove_event`, :func:`prove_consistency` make the
documents; :func:`recompute_commitment` rebuilds the commitment a cohort had at a fold log size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from streams.core import merkle
from streams.core.commitment import build_commitment, check_heads, event_leaf, head_inclusion_proof, head_leaf
from streams.core.decide import Lineage
from streams.core.events import Event
from streams.core.state import Config
from streams.audit.errors import AuditError

__all__ = [
    "BUNDLE",
    "CONSISTENCY",
    "EVENT",
    "FORMAT",
    "HEAD",
    "CohortLog",
    "LeafEntry",
    "ProofError",
    "ProofSource",
    "ProofVerdict",
    "commitment_from_json",
    "commitment_to_json",
    "make_bundle",
    "prove_consistency",
    "prove_event",
    "prove_head",
    "recompute_commitment",
    "replay",
    "replay_events",
    "verify_proof",
]

FORMAT = "traintrace-proof/1"
HEAD = "head-inclusion"
EVENT = "event-inclusion"
CONSISTENCY = "log-consistency"
PUBLISHED = "published"
RECOMPUTED = "recomputed"

_COMMITMENT_FIELDS = ("cohort_id", "root", "tree_size", "heads", "snapshot", "ts", "signature", "key_id",
                      "log_root", "log_size")


class ProofError(AuditError):
    """A proof cannot be built from this log (what is missing, and where)."""


# ---------------------------------------------------------------------------- the replay


@dataclass(frozen=True, slots=True)
class LeafEntry:
    """One leaf of a cohort's fold log: an accepted event."""

    index: int
    job_id: str
    seq: int
    hash: str | None
    origin: tuple[int, int]   # (partition, offset) on lineage.events
    ts: int                   # the processor's time of the event (its input record's timestamp)

    @property
    def leaf(self) -> bytes:
        return head_leaf(self.job_id, self.seq, self.hash)


@dataclass
class CohortLog:
    """A cohort's fold log as the processor folded it, with what is needed to rebuild its
    state at any size."""

    cohort: str
    entries: list[LeafEntry] = field(default_factory=list)
    leaves: list[bytes] = field(default_factory=list)
    #: (job_id, seq) -> leaf index
    index: dict[tuple[str, int], int] = field(default_factory=dict)
    #: every event folded into the cohort, in order: (event, ts, input record id, how many events
    #: its fold appended to the log: 0 or 1, more when its seal released held ones)
    folded: list[tuple[Event, int, tuple[str, int, int], int]] = field(default_factory=list)
    #: the input record of each event held for its seal (by ``id``), while it is held
    via_of: dict[int, Any] = field(default_factory=dict)
    lineage: Lineage | None = None

    @property
    def size(self) -> int:
        return len(self.leaves)

    def root(self, size: int | None = None) -> bytes:
        n = self.size if size is None else size
        if not 0 <= n <= self.size:
            raise ProofError(f"cohort {self.cohort!r}: size {n} is out of range (its fold log has {self.size} leaves)")
        return merkle.root(self.leaves[:n])


@dataclass
class ProofSource:
    """A replayed log: each cohort's fold log and the commitments published for it."""

    cohorts: dict[str, CohortLog]
    #: cohort -> published LineageCommitment records (dicts without "type"), in log order
    commitments: dict[str, list[dict[str, Any]]]
    config: Config = field(default_factory=Config)
    undecodable_commitments: int = 0
    source: str = ""

    def cohort(self, cohort: str) -> CohortLog:
        c = self.cohorts.get(cohort)
        if c is None:
            known = ", ".join(repr(x) for x in sorted(self.cohorts)) or "none"
            raise ProofError(f"no cohort {cohort!r} in the log (cohorts: {known})")
        return c

    def latest_commitment(self, cohort: str) -> dict[str, Any] | None:
        coms = self.commitments.get(cohort)
        return coms[-1] if coms else None

    def commitment_at(self, cohort: str, log_size: int) -> dict[str, Any] | None:
        """The last published commitment of ``cohort`` whose ``log_size`` is ``log_size``."""
        for com in reversed(self.commitments.get(cohort, [])):
            if com.get("log_size") == log_size:
                return com
        return None


def replay(log: Any, config: Config | None = None, codec: Any = None) -> ProofSource:
    """Fold an :class:`~streams.audit.log.AuditLog` in the processor's fold order and
    collect each cohort's fold log and published commitments."""
    from streams.codec import Codec, DecodeError
    from streams.audit.log import fold_order

    codec = codec or Codec()
    items = ((f.cohort, f.event, f.ts, (f.via.topic, f.via.partition, f.via.offset))
             for f in fold_order(log, codec) if f.event is not None)
    src = replay_events(items, config)
    src.source = getattr(log, "source", "")
    for rec in log.topic("commitments"):
        try:
            name, record = codec.decode_record(rec.value or b"")
        except DecodeError:
            src.undecodable_commitments += 1
            continue
        if name != "LineageCommitment":
            src.undecodable_commitments += 1
            continue
        com = _plain_commitment(record)
        src.commitments.setdefault(com["cohort_id"], []).append(com)
    return src


def replay_events(items: Iterable[tuple[str, Event, int, Any]], config: Config | None = None) -> ProofSource:
    """:func:`replay` of ``(cohort, event, ts, input record id)`` in fold order (no published
    commitments)."""
    config = config or Config()
    cohorts: dict[str, CohortLog] = {}
    for cohort, event, ts, via in items:
        c = cohorts.get(cohort)
        if c is None:
            c = cohorts[cohort] = CohortLog(cohort, lineage=Lineage(config))
        result = c.lineage.fold(event, ts)
        # the events this fold appended to the log, in order: those its seal released, then itself
        # (streams.core.seals); the origin of a released one is the record it came in
        appended = [*result.released, event] if result.accepted else list(result.released)
        c.folded.append((event, ts, via, len(appended)))
        for ev in appended:
            i = len(c.leaves)
            c.leaves.append(event_leaf(ev))
            c.entries.append(LeafEntry(i, ev.job_id, ev.seq, ev.hash, _origin(c.via_of.pop(id(ev), via)), ts))
            c.index.setdefault((ev.job_id, ev.seq), i)
        if result.held:
            c.via_of[id(event)] = via
    for c in cohorts.values():
        # the lineage's own compact range and the kept leaves are one log
        if c.lineage.log.size != c.size or c.lineage.log.root() != merkle.root(c.leaves):
            raise ProofError(f"cohort {c.cohort!r}: the fold log disagrees with its leaves")  # pragma: no cover
    return ProofSource(cohorts, {}, config)


def _origin(via: Any) -> tuple[int, int]:
    if isinstance(via, tuple) and len(via) == 3:
        return (via[1], via[2])
    return (-1, -1)


def recompute_commitment(source: ProofSource, cohort: str, log_size: int | None = None,
                         ts: int | None = None) -> dict[str, Any]:
    """The unsigned commitment ``cohort`` had when its fold log had ``log_size`` leaves
    (default: the state at the end of the log), with ``ts`` (default: the processor's time of
    the last event folded).

    The state is the one after the input record that holds the ``log_size``-th accepted event
    (the processor commits between input records): the events of that record after it, which
    were not accepted, are folded too. ``root``, ``tree_size``, ``heads``, ``log_root`` and
    ``log_size`` depend only on the accepted events and are exact; the snapshot's status can
    differ from a published one when a later record held only refused events, or when the
    processor's clock halted a job (an unresolved source past its grace period) before it
    committed.
    """
    c = source.cohort(cohort)
    n = c.size if log_size is None else log_size
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= c.size:
        raise ProofError(f"cohort {cohort!r}: log size {log_size} is out of range "
                         f"(its fold log has {c.size} leaves)")
    end = len(c.folded) if log_size is None else _end_of(c, n)
    if end == len(c.folded) and c.lineage is not None:
        lin = c.lineage
    else:
        lin = Lineage(source.config)
        for event, t, _via, _acc in c.folded[:end]:
            lin.fold(event, t)
    if ts is None:
        ts = c.folded[end - 1][1] if end else 0
    record = build_commitment(cohort, lin, ts)
    if record["log_size"] != n:  # pragma: no cover - the fold is deterministic
        raise ProofError(f"cohort {cohort!r}: refolding gave a log of {record['log_size']} leaves, not {n}")
    return record


def _end_of(c: CohortLog, n: int) -> int:
    """How many folded events of ``c`` the state at log size ``n`` includes."""
    if n == 0:
        return 0
    seen = 0
    for i, (_ev, _t, via, accepted) in enumerate(c.folded):
        if accepted:
            seen += accepted
            if seen >= n:
                end = i + 1
                while end < len(c.folded) and c.folded[end][2] == via and not c.folded[end][3]:
                    end += 1
                return end
    return len(c.folded)  # pragma: no cover - n <= size


# ---------------------------------------------------------------------------- documents


def _plain_commitment(record: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: record.get(k) for k in _COMMITMENT_FIELDS}
    for k, v in record.items():
        if k not in out and k != "type":
            out[k] = v
    return out


def commitment_to_json(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A commitment record as JSON: ``signature`` as lower-case hex."""
    if record is None:
        return None
    out = _plain_commitment(record)
    sig = out.get("signature")
    if isinstance(sig, (bytes, bytearray, memoryview)):
        out["signature"] = bytes(sig).hex()
    return out


def commitment_from_json(doc: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The inverse of :func:`commitment_to_json` (``signature`` back to bytes)."""
    if doc is None:
        return None
    out = dict(doc)
    sig = out.get("signature")
    if isinstance(sig, str):
        out["signature"] = bytes.fromhex(sig)
    return out


def _anchor(source: ProofSource, cohort: str, log_size: int) -> tuple[dict[str, Any], str]:
    com = source.commitment_at(cohort, log_size)
    if com is not None:
        return com, PUBLISHED
    return recompute_commitment(source, cohort, log_size), RECOMPUTED


def _cohort_of_job(source: ProofSource, job_id: str, cohort: str | None) -> str:
    if cohort is not None:
        c = source.cohort(cohort)
        if c.lineage is None or job_id not in c.lineage.state.jobs:
            raise ProofError(f"job {job_id!r} has no event in cohort {cohort!r}")
        return cohort
    found = sorted(c for c, log in source.cohorts.items()
                   if log.lineage is not None and job_id in log.lineage.state.jobs)
    if not found:
        raise ProofError(f"job {job_id!r} has no event in the log")
    registered = [c for c in found if c]
    return registered[0] if registered else found[0]


def prove_head(source: ProofSource, job_id: str, cohort: str | None = None,
               recompute: bool = False) -> dict[str, Any]:
    """A ``head-inclusion`` document: ``job_id``'s head in the cohort's latest published
    commitment, or in one recomputed from the end of the log (``recompute``, or when none was
    published)."""
    cohort = _cohort_of_job(source, job_id, cohort)
    com = None if recompute else source.latest_commitment(cohort)
    kind = PUBLISHED
    if com is None:
        com, kind = recompute_commitment(source, cohort), RECOMPUTED
    try:
        p = head_inclusion_proof(com, job_id)
    except ValueError as exc:
        hint = "" if kind == RECOMPUTED else " (prove against the log's end with --recompute)"
        raise ProofError(f"cohort {cohort!r}, {kind} commitment at ts {com.get('ts')}: {exc}{hint}") from exc
    return {
        "format": FORMAT,
        "type": HEAD,
        "cohort": cohort,
        "leaf": {"job_id": p["job_id"], "seq": p["seq"], "hash": p["hash"]},
        "leaf_hex": p["leaf"],
        "index": p["index"],
        "tree_size": p["tree_size"],
        "root": p["root"],
        "proof": p["proof"],
        "commitment": commitment_to_json(com),
        "commitment_source": kind,
    }


def prove_event(source: ProofSource, job_id: str, seq: int, size: int | None = None,
                cohort: str | None = None) -> dict[str, Any]:
    """An ``event-inclusion`` document: event ``(job_id, seq)`` in the cohort's fold log of
    ``size`` leaves (default: the latest published commitment's ``log_size``, else the whole
    log)."""
    candidates = [cohort] if cohort is not None else sorted(source.cohorts, key=lambda c: (c == "", c))
    c = None
    for name in candidates:
        log = source.cohort(name)
        if (job_id, seq) in log.index:
            c = log
            break
    if c is None:
        where = f"cohort {cohort!r}" if cohort is not None else "the log"
        raise ProofError(f"no accepted event ({job_id!r}, seq {seq}) in {where}")
    index = c.index[(job_id, seq)]
    if size is None:
        latest = source.latest_commitment(c.cohort)
        size = latest["log_size"] if latest is not None and latest.get("log_size") is not None else c.size
    if not 0 <= size <= c.size:
        raise ProofError(f"cohort {c.cohort!r}: size {size} is out of range (its fold log has {c.size} leaves)")
    if index >= size:
        raise ProofError(f"event ({job_id!r}, seq {seq}) is leaf {index} of cohort {c.cohort!r}: "
                         f"not in its fold log of size {size}")
    leaves = c.leaves[:size]
    com, kind = _anchor(source, c.cohort, size)
    e = c.entries[index]
    return {
        "format": FORMAT,
        "type": EVENT,
        "cohort": c.cohort,
        "event": {"job_id": e.job_id, "seq": e.seq, "hash": e.hash or ""},
        "leaf_hex": leaves[index].hex(),
        "index": index,
        "tree_size": size,
        "root": merkle.root(leaves).hex(),
        "proof": [h.hex() for h in merkle.inclusion_proof(leaves, index)],
        "origin": {"partition": e.origin[0], "offset": e.origin[1], "ts": e.ts},
        "commitment": commitment_to_json(com),
        "commitment_source": kind,
    }


#: what a bundle adds to an event-inclusion document (issue 28)
BUNDLE = "traintrace-bundle/1"


def make_bundle(doc: Mapping[str, Any]) -> dict[str, Any]:
    """An offline proof bundle of an ``event-inclusion`` document: the document itself (the
    event, its leaf, its inclusion proof, the commitment) and, at the top level in the names an
    outside verifier reads, the commitment's signed C2SP checkpoint note (with any witness
    cosignatures), the leaf, its index and its inclusion proof. Checked by ``verify-proof``, and
    for its Merkle and signature parts by any tlog tool (tests/go/tlogverify)."""
    if doc.get("type") != EVENT:
        raise ProofError("a bundle is made of an event proof (--event JOB:SEQ)")
    com = doc.get("commitment") or {}
    note = com.get("checkpoint")
    if not note:
        raise ProofError(f"cohort {doc.get('cohort')!r}: the commitment at size {doc.get('tree_size')} carries no "
                         "checkpoint note (a worker without --signing-key, a recomputed commitment, or one "
                         "published before schemas v10): no bundle")
    return {**doc, "bundle": BUNDLE, "checkpoint": note, "leaf": doc["leaf_hex"], "leaf_index": doc["index"],
            "inclusion_proof": list(doc["proof"])}


def prove_consistency(source: ProofSource, cohort: str, old_size: int, new_size: int | None = None) -> dict[str, Any]:
    """A ``log-consistency`` document: the cohort's fold log at ``old_size`` is a prefix of the
    one at ``new_size`` (default: the whole log)."""
    c = source.cohort(cohort)
    if new_size is None:
        new_size = c.size
    if not 0 <= old_size <= new_size <= c.size:
        raise ProofError(f"cohort {cohort!r}: want 0 <= old size ({old_size}) <= new size ({new_size}) "
                         f"<= {c.size} (its fold log)")
    leaves = c.leaves[:new_size]
    old_com, old_kind = _anchor(source, cohort, old_size)
    new_com, new_kind = _anchor(source, cohort, new_size)
    return {
        "format": FORMAT,
        "type": CONSISTENCY,
        "cohort": cohort,
        "old_size": old_size,
        "new_size": new_size,
        "old_root": merkle.root(leaves[:old_size]).hex(),
        "new_root": merkle.root(leaves).hex(),
        "proof": [h.hex() for h in merkle.consistency_proof(leaves, old_size)],
        "commitments": {"old": commitment_to_json(old_com), "new": commitment_to_json(new_com)},
        "commitment_sources": {"old": old_kind, "new": new_kind},
    }


# ---------------------------------------------------------------------------- verification


@dataclass
class ProofVerdict:
    ok: bool
    reason: str                       # "VALID …" or why not
    type: str | None = None
    cohort: str | None = None
    #: per attached commitment: {"which", "source", "key_id", "signature": OK/UNSIGNED/…/"NOT_CHECKED"}
    commitments: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.ok, "reason": self.reason, "type": self.type, "cohort": self.cohort,
                "commitments": self.commitments}


class _Invalid(Exception):
    pass


def _hex32(x: Any, what: str) -> bytes:
    if not isinstance(x, str):
        raise _Invalid(f"{what} is not a hex string")
    try:
        b = bytes.fromhex(x)
    except ValueError:
        raise _Invalid(f"{what} is not hex") from None
    if len(b) != merkle.HASH_SIZE:
        raise _Invalid(f"{what} is not 32 bytes")
    return b


def _path(doc: Mapping[str, Any]) -> list[bytes]:
    p = doc.get("proof")
    if not isinstance(p, list):
        raise _Invalid("proof is not a list of hashes")
    return [_hex32(h, f"proof[{i}]") for i, h in enumerate(p)]


def _int(doc: Mapping[str, Any], name: str) -> int:
    v = doc.get(name)
    if not isinstance(v, int) or isinstance(v, bool):
        raise _Invalid(f"{name} is not an integer")
    return v


def _leaf_of(d: Any, what: str) -> bytes:
    if not isinstance(d, Mapping):
        raise _Invalid(f"{what} is missing")
    try:
        return head_leaf(d.get("job_id"), d.get("seq"), d.get("hash"))
    except ValueError as exc:
        raise _Invalid(f"{what}: {exc}") from None


def _check_anchor(com: Any, which: str, cohort: Any, expect: dict[str, Any]) -> None:
    """The attached commitment really carries the roots and sizes the proof is about."""
    if com is None:
        return
    if not isinstance(com, Mapping):
        raise _Invalid(f"{which} commitment is not an object")
    if com.get("cohort_id") != cohort:
        raise _Invalid(f"{which} commitment is of cohort {com.get('cohort_id')!r}, the proof of {cohort!r}")
    for k, v in expect.items():
        got = com.get(k)
        if isinstance(got, str) and isinstance(v, str):
            same = got.lower() == v.lower()
        else:
            same = got == v and type(got) is type(v)
        if not same:
            raise _Invalid(f"{which} commitment has {k} {got!r}, the proof {v!r}")
    problem = check_heads(com)
    if problem is not None:
        raise _Invalid(f"{which} commitment: {problem}")


def verify_proof(doc: Any, trusted: Mapping[str, Any] | None = None, witnesses: Iterable[Any] = (),
                 witnesses_required: int = 0) -> ProofVerdict:
    """Check a proof document on its own (and the signatures of its commitments against
    ``trusted`` = ``{key_id: public key}`` when given: then every root must be anchored in a
    commitment signed by a trusted key). A bundle's checkpoint note must say the proven fold
    log and, with trusted keys, be signed by the commitment's key; with ``witnesses_required``
    N, N of the ``witnesses`` (cosignature verifier keys) must have cosigned it. Never raises."""
    if not isinstance(doc, Mapping):
        return ProofVerdict(False, "not a proof document (not a JSON object)")
    kind, cohort = doc.get("type"), doc.get("cohort")
    verdict = ProofVerdict(False, "", kind if isinstance(kind, str) else None,
                           cohort if isinstance(cohort, str) else None)
    try:
        if doc.get("format") != FORMAT:
            raise _Invalid(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
        if not isinstance(cohort, str):
            raise _Invalid("cohort is missing")
        if kind == HEAD:
            summary, anchors = _verify_head(doc)
        elif kind == EVENT:
            summary, anchors = _verify_event(doc)
        elif kind == CONSISTENCY:
            summary, anchors = _verify_consistency(doc)
        else:
            raise _Invalid(f"unknown proof type {kind!r}")
        notes = _signatures(anchors, trusted, verdict)
        if doc.get("bundle") is not None or witnesses_required:
            notes += "; " + _bundle(doc, trusted, list(witnesses), witnesses_required)
    except _Invalid as exc:
        verdict.reason = f"INVALID: {exc}"
        return verdict
    except Exception as exc:  # a malformed document must never crash the verifier
        verdict.reason = f"INVALID: malformed proof document ({type(exc).__name__}: {exc})"
        return verdict
    verdict.ok = True
    verdict.reason = f"VALID {kind}: {summary}; {notes}"
    return verdict


def _verify_head(doc: Mapping[str, Any]) -> tuple[str, list[tuple[str, Any, str]]]:
    leaf = _leaf_of(doc.get("leaf"), "leaf")
    if "leaf_hex" in doc and doc["leaf_hex"] != leaf.hex():
        raise _Invalid("leaf_hex is not the encoding of leaf (job_id, seq, hash)")
    index, size = _int(doc, "index"), _int(doc, "tree_size")
    root = _hex32(doc.get("root"), "root")
    if not merkle.verify_inclusion(leaf, index, size, _path(doc), root):
        raise _Invalid(f"the inclusion path of leaf {index} does not lead to root {root.hex()} of size {size}")
    com = doc.get("commitment")
    _check_anchor(com, "the", doc["cohort"], {"root": root.hex(), "tree_size": size})
    lf = doc["leaf"]
    summary = (f"head of job {lf['job_id']!r} at seq {lf['seq']} (hash {str(lf['hash'])[:16] or '-'}) is leaf "
               f"{index} of {size} under heads root {root.hex()[:16]}… of cohort {doc['cohort']!r}")
    return summary, [("the", com, doc.get("commitment_source", "?"))]


def _verify_event(doc: Mapping[str, Any]) -> tuple[str, list[tuple[str, Any, str]]]:
    leaf = _leaf_of(doc.get("event"), "event")
    if "leaf_hex" in doc and doc["leaf_hex"] != leaf.hex():
        raise _Invalid("leaf_hex is not the encoding of event (job_id, seq, hash)")
    index, size = _int(doc, "index"), _int(doc, "tree_size")
    root = _hex32(doc.get("root"), "root")
    if not merkle.verify_inclusion(leaf, index, size, _path(doc), root):
        raise _Invalid(f"the inclusion path of leaf {index} does not lead to fold log root {root.hex()} "
                       f"of size {size}")
    com = doc.get("commitment")
    _check_anchor(com, "the", doc["cohort"], {"log_root": root.hex(), "log_size": size})
    ev = doc["event"]
    summary = (f"event ({ev['job_id']!r}, seq {ev['seq']}) is leaf {index} of the fold log of cohort "
               f"{doc['cohort']!r} of size {size}, root {root.hex()[:16]}…")
    return summary, [("the", com, doc.get("commitment_source", "?"))]


def _verify_consistency(doc: Mapping[str, Any]) -> tuple[str, list[tuple[str, Any, str]]]:
    old, new = _int(doc, "old_size"), _int(doc, "new_size")
    old_root, new_root = _hex32(doc.get("old_root"), "old_root"), _hex32(doc.get("new_root"), "new_root")
    if not merkle.verify_consistency(old, new, old_root, new_root, _path(doc)):
        raise _Invalid(f"the fold log of size {old} (root {old_root.hex()[:16]}…) is not proven a prefix of "
                       f"size {new} (root {new_root.hex()[:16]}…)")
    coms = doc.get("commitments") or {}
    if not isinstance(coms, Mapping):
        raise _Invalid("commitments is not an object")
    srcs = doc.get("commitment_sources") or {}
    _check_anchor(coms.get("old"), "the old", doc["cohort"], {"log_root": old_root.hex(), "log_size": old})
    _check_anchor(coms.get("new"), "the new", doc["cohort"], {"log_root": new_root.hex(), "log_size": new})
    summary = (f"the fold log of cohort {doc['cohort']!r} at size {old} (root {old_root.hex()[:16]}…) is a "
               f"prefix of size {new} (root {new_root.hex()[:16]}…)")
    return summary, [("the old", coms.get("old"), srcs.get("old", "?")),
                     ("the new", coms.get("new"), srcs.get("new", "?"))]


def _bundle(doc: Mapping[str, Any], trusted: Mapping[str, Any] | None, witnesses: list[Any], required: int) -> str:
    """A bundle's checkpoint note and its top-level copies of the proof (what an outside
    verifier reads) against the document; the witness quorum."""
    from streams.signing.commitments import open_commitment_checkpoint
    from streams.signing.message import public_key_of
    from streams.signing.notes import Checkpoint, NoteError, NotSignedBy, open_note, parse_note

    if doc.get("bundle") != BUNDLE:
        raise _Invalid(f"bundle is {doc.get('bundle')!r}, expected {BUNDLE!r}" if doc.get("bundle") is not None
                       else "--witnesses-required needs a bundle (prove --bundle): this document has no checkpoint")
    if doc.get("type") != EVENT:
        raise _Invalid("a bundle proves an event")
    for mine, theirs in (("leaf_hex", "leaf"), ("index", "leaf_index"), ("proof", "inclusion_proof")):
        if doc.get(theirs) != doc.get(mine):
            raise _Invalid(f"the bundle's {theirs} is not the proof's {mine}")
    note = doc.get("checkpoint")
    com = doc.get("commitment")
    if not isinstance(note, str) or not isinstance(com, Mapping) or com.get("checkpoint") != note:
        raise _Invalid("the bundle's checkpoint is not its commitment's checkpoint note")
    try:
        parsed = parse_note(note)
        cp = Checkpoint.parse(parsed.text)
    except NoteError as exc:
        raise _Invalid(f"checkpoint: {exc}") from None
    if cp.size != doc.get("tree_size") or cp.root.hex() != str(doc.get("root")).lower():
        raise _Invalid(f"the checkpoint says size {cp.size} root {cp.root.hex()[:16]}…, the proof size "
                       f"{doc.get('tree_size')} root {str(doc.get('root'))[:16]}…")
    said = f"checkpoint {cp.origin} at {cp.size}"
    if trusted is not None:
        kid = com.get("key_id")
        key = public_key_of(trusted.get(kid)) if isinstance(kid, str) else None
        if key is None:
            raise _Invalid(f"the checkpoint's key {kid} is not in the trusted keyring")
        try:
            open_commitment_checkpoint(com, key)
        except NoteError as exc:
            raise _Invalid(f"checkpoint: {exc}") from None
        said += " signed by the commitment's key"
    else:
        said += " (its signature not checked: no trusted keys given)"
    if required or witnesses:
        cosigned: list[str] = []
        for w in witnesses:
            try:
                opened = open_note(parsed, [w])
            except NotSignedBy:
                continue  # this witness did not cosign it
            except NoteError as exc:
                raise _Invalid(f"witness {w.name}: {exc}") from None
            cosigned.extend(k.name for k in opened.cosigners())
        if len(cosigned) < required:
            missing = [w.name for w in witnesses if w.name not in cosigned]
            raise _Invalid(f"{len(cosigned)} valid witness cosignature(s) of the {required} required "
                           f"(missing: {', '.join(missing) or 'no witness keys given'})")
        said += f", cosigned by {len(cosigned)} witness(es)" + (f": {', '.join(cosigned)}" if cosigned else "")
    return said


def _signatures(anchors: list[tuple[str, Any, str]], trusted: Mapping[str, Any] | None,
                verdict: ProofVerdict) -> str:
    from streams.signing import check_commitment

    present = [(w, c, s) for w, c, s in anchors if c is not None]
    for which, com, src in present:
        label = "commitment" if which == "the" else which.removeprefix("the ")
        entry = {"which": label, "source": src, "ts": com.get("ts"), "key_id": com.get("key_id"),
                 "signature": "NOT_CHECKED"}
        verdict.commitments.append(entry)
        if trusted is not None:
            chk = check_commitment(com, trusted)
            entry["signature"] = chk.reason
            if not chk.ok:
                raise _Invalid(f"{which} commitment ({src}, ts {com.get('ts')}): {chk}")
    if not present:
        if trusted is not None:
            raise _Invalid("no commitment in the document: nothing signed to check")
        return "the root is not tied to any commitment"
    if trusted is None:
        return (f"tied to {len(present)} commitment(s) ({', '.join(s for _w, _c, s in present)}); "
                "signatures not checked (no trusted keys given)")
    keys = sorted({str(c.get("key_id")) for _w, c, _s in present})
    return f"commitment signature(s) valid, key {', '.join(keys)}"
