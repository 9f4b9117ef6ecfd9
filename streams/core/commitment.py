"""The lineage commitment of SPEC §9: what the processor publishes per cohort.

A ``LineageCommitment`` (``schemas/v3/LineageCommitment.avsc``) commits to the heads of every
job's hash chain in one cohort and carries the concurrency snapshot those heads cover:

``heads``
    every job of the cohort with at least one folded event, sorted by ``job_id`` (Python string
    order, i.e. by Unicode code point, which is also the order of the UTF-8 bytes):
    ``{"job_id", "seq", "hash"}`` where ``seq`` is the last folded seq (``job.next_seq - 1``)
    and ``hash`` the chain hash that event carried (lower-case hex), or ``""`` when it carried
    none (a job that does not chain its events).
``root`` / ``tree_size``
    the RFC 6962 Merkle Tree Hash (:mod:`streams.core.merkle`, SHA-256) over the heads in that
    order, as lower-case hex, and the number of heads. No heads: the empty tree,
    ``e3b0c442…b855`` (SHA-256 of nothing), size 0.
``snapshot``
    per job, sorted by ``job_id``: ``{"job_id", "incarnation", "last_step", "status"}`` — the
    current incarnation, its last step (None before any step), and ``HALTED:<REASON>`` when the
    guard halted the job (the first reason in SPEC §8 order), else ``FINISHED`` when the current
    incarnation reported ``JobFinished``, else ``RUNNING``.
``log_root`` / ``log_size`` (schema v3; None when the lineage keeps no fold log)
    the root (lower-case hex) and size of the cohort's *fold log*: the append-only RFC 6962
    log with one leaf :func:`event_leaf` per event the cohort's lineage accepted (duplicates and
    refused events are not in it), in the order it folded them. See "The fold log" below.
``signature`` / ``key_id``
    None here; :mod:`streams.signing` fills them.

The leaf of one head (:func:`head_leaf`) is the SPEC §10 part encoding of
``(job_id, seq, hash)``: each part as UTF-8 text — ``seq`` in decimal, a missing hash as the
empty string — followed by one 0x00 byte::

    head_leaf("A", 5, "9f…")  ==  b"A\\x005\\x009f…\\x00"

(the leaf is the raw input of the tree; the tree hashes it as SHA-256(0x00 || leaf)). A part
must not itself contain 0x00: that would make two different heads encode alike, so
:func:`head_leaf` refuses it.

The root depends only on each job's own events (its last seq and the chain hash there), never on
how the jobs' events interleaved, so a replay in any interleaving commits to the same root; the
snapshot's status likewise, except where the guard's verdict itself depends on other jobs
(a checkpoint id written by two jobs, a consumption nobody wrote yet).

What the root proves, and what not
----------------------------------
An inclusion proof (:func:`head_inclusion_proof`, RFC 9162 §2.1.3) shows that one head
``(job_id, seq, hash)`` is in a commitment with a given root and size; the head's hash in turn
commits, through the job's chain, to every event of that job up to ``seq``.

The tree is over the *current* heads, so it is **not** an append-only log in the RFC 6962 sense:
when a job folds another event its leaf changes in place, and a new job whose id sorts before an
existing one inserts a leaf in the middle. An RFC 6962 consistency proof between two commitments
therefore only exists when the older head list is a prefix of the newer one (no existing head
changed, new jobs sort after all of them) — rare in a live cohort. That a later commitment
extends an earlier one is shown per job instead: the earlier head ``(seq, hash)`` is an ancestor
in the later head's chain (the chain events between them re-hash from one to the other).

The fold log
------------
The fold log is what makes commitments comparable over time. Its leaf for an event is the same
encoding as a head's, ``event_leaf(ev) == head_leaf(ev.job_id, ev.seq, ev.hash)``, appended when
the cohort's :class:`~streams.core.decide.Lineage` accepts the event; it never changes a leaf,
so the log of an earlier commitment (``log_size`` m) is a prefix of every later one's (n >= m)
and an RFC 6962 consistency proof between their ``log_root`` values exists. An inclusion proof
in it shows that one event ``(job_id, seq, hash)`` was folded, as the ``index``-th accepted event
of the cohort, before the commitment. The log depends on the interleaving of the jobs' events
(unlike ``root``): it records the order the processor folded them in, which a replay of the
processor's input topic reproduces.
"""

from __future__ import annotations

from typing import Any, Mapping

from streams.core import merkle
from streams.core.state import LineageState

__all__ = [
    "build_commitment",
    "build_commitments",
    "check_heads",
    "commitment_root",
    "concurrency_snapshot",
    "event_leaf",
    "head_inclusion_proof",
    "head_leaf",
    "heads",
    "verify_head_inclusion",
]

RUNNING = "RUNNING"
FINISHED = "FINISHED"
HALTED_PREFIX = "HALTED:"


def head_leaf(job_id: str, seq: int, hash: str | None) -> bytes:
    """The canonical leaf of one chain head: ``job_id\\0seq\\0hash\\0`` (SPEC §10 parts)."""
    # the valid case in one test (this runs for every folded event); anything else is checked
    # below, which names what is wrong
    h = "" if hash is None else hash
    if (type(job_id) is str and job_id and type(seq) is int and seq >= 0 and type(h) is str
            and "\x00" not in job_id and "\x00" not in h):
        return f"{job_id}\x00{seq}\x00{h}\x00".encode("utf-8")
    if not isinstance(job_id, str) or not job_id:
        raise ValueError(f"job_id must be a non-empty str, not {job_id!r}")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"seq of {job_id!r} must be an int >= 0, not {seq!r}")
    if hash is None:
        hash = ""
    if not isinstance(hash, str):
        raise ValueError(f"hash of {job_id!r} must be a str or None, not {type(hash).__name__}")
    for name, part in (("job_id", job_id), ("hash", hash)):
        if "\x00" in part:
            raise ValueError(f"{name} {part!r} contains a 0x00 byte, which the encoding reserves")
    return b"".join(p.encode("utf-8") + b"\x00" for p in (job_id, str(seq), hash))


def event_leaf(event: Any) -> bytes:
    """The fold log's leaf of one event: :func:`head_leaf` of its ``(job_id, seq, hash)``."""
    return head_leaf(event.job_id, event.seq, event.hash)


def heads(lineage: Any) -> list[dict[str, Any]]:
    """The chain head of every job with at least one folded event, sorted by job_id.

    ``lineage`` is a :class:`~streams.core.decide.Lineage` (one cohort's engine) or its
    :class:`~streams.core.state.LineageState`.
    """
    st = _state(lineage)
    out = []
    for job_id in sorted(st.jobs):
        job = st.jobs[job_id]
        if job.next_seq <= 0:
            continue
        out.append({"job_id": job_id, "seq": job.next_seq - 1, "hash": job.head_hash or ""})
    return out


def concurrency_snapshot(lineage: Any) -> list[dict[str, Any]]:
    """Each job's current incarnation, its last step and status, sorted by job_id."""
    st = _state(lineage)
    out = []
    for job_id in sorted(st.jobs):
        job = st.jobs[job_id]
        if job.next_seq <= 0:
            continue
        inc = job.current
        reason = job.halt_reason
        if reason is not None:
            status = HALTED_PREFIX + reason
        elif inc is not None and inc.finished:
            status = FINISHED
        else:
            status = RUNNING
        out.append({
            "job_id": job_id,
            "incarnation": inc.number if inc is not None else job.rollbacks,
            "last_step": inc.last_step if inc is not None else None,
            "status": status,
        })
    return out


def build_commitment(cohort_id: str, lineage: Any, ts: int) -> dict[str, Any]:
    """The ``LineageCommitment`` record of one cohort, unsigned (``signature``/``key_id`` None).

    ``log_root``/``log_size`` are those of ``lineage.log`` (a :class:`~streams.core.decide.Lineage`);
    None for a bare :class:`~streams.core.state.LineageState`, which keeps no fold log.
    ``input_partition``/``input_offset`` are None here: the referee, which knows which input
    record of ``lineage.by-cohort`` it folded last, fills them in.
    """
    if not isinstance(cohort_id, str):
        raise ValueError(f"cohort_id must be a str, not {type(cohort_id).__name__}")
    if not isinstance(ts, int) or isinstance(ts, bool):
        raise ValueError(f"ts must be an int (epoch milliseconds), not {ts!r}")
    hs = heads(lineage)
    log = getattr(lineage, "log", None)
    fold_log = log if isinstance(log, merkle.CompactRange) else None
    return {
        "cohort_id": cohort_id,
        "root": _root_of(hs).hex(),
        "tree_size": len(hs),
        "heads": hs,
        "snapshot": concurrency_snapshot(lineage),
        "ts": ts,
        "signature": None,
        "key_id": None,
        "log_root": fold_log.root().hex() if fold_log is not None else None,
        "log_size": fold_log.size if fold_log is not None else None,
        # the point of the processor's input covered: the referee knows it, the core does not
        "input_partition": None,
        "input_offset": None,
    }


def build_commitments(cohorts: Any, ts: int) -> list[dict[str, Any]]:
    """One commitment per cohort of a :class:`~streams.core.cohorts.CohortLineage` (or a
    ``{cohort_id: Lineage}`` mapping), sorted by cohort_id."""
    engines = getattr(cohorts, "cohorts", cohorts)
    return [build_commitment(c, engines[c], ts) for c in sorted(engines)]


def commitment_root(lineage: Any) -> str:
    """The hex root a commitment of ``lineage`` would carry now."""
    return _root_of(heads(lineage)).hex()


def check_heads(commitment: Mapping[str, Any]) -> str | None:
    """Whether a commitment record is self-consistent: None when its ``heads`` hash to its
    ``root`` and ``tree_size`` is their number, else what is wrong. Never raises."""
    try:
        hs = list(commitment["heads"])
        leaves = [head_leaf(h["job_id"], h["seq"], h["hash"]) for h in hs]
        if commitment["tree_size"] != len(leaves):
            return f"tree_size {commitment['tree_size']} but {len(leaves)} heads"
        if merkle.root(leaves).hex() != str(commitment["root"]).lower():
            return f"the heads do not hash to the root {commitment['root']}"
        return None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"malformed commitment: {exc!r}"


def head_inclusion_proof(commitment: Mapping[str, Any], job_id: str) -> dict[str, Any]:
    """The RFC 9162 inclusion proof of ``job_id``'s head in ``commitment`` (a record dict).

    Returns ``{"job_id", "seq", "hash", "index", "tree_size", "leaf", "proof", "root"}`` with
    ``leaf`` the hex of :func:`head_leaf`, ``proof`` a list of hex node hashes, and ``root`` the
    commitment's root. Check it with :func:`verify_head_inclusion` or directly with
    ``merkle.verify_inclusion(bytes.fromhex(leaf), index, tree_size, [bytes.fromhex(p) ...],
    bytes.fromhex(root))``.

    Raises ValueError when the job has no head in the commitment, or when the commitment is not
    self-consistent (its heads do not hash to its root, or ``tree_size`` is not their number).
    """
    hs = list(commitment["heads"])
    leaves = [head_leaf(h["job_id"], h["seq"], h["hash"]) for h in hs]
    if commitment["tree_size"] != len(leaves):
        raise ValueError(f"commitment tree_size {commitment['tree_size']} but {len(leaves)} heads")
    root_hex = commitment["root"]
    if merkle.root(leaves).hex() != str(root_hex).lower():
        raise ValueError(f"the heads of commitment {commitment.get('cohort_id')!r} do not hash "
                         f"to its root {root_hex}")
    index = next((i for i, h in enumerate(hs) if h["job_id"] == job_id), None)
    if index is None:
        raise ValueError(f"job {job_id!r} has no head in commitment {commitment.get('cohort_id')!r}")
    h = hs[index]
    return {
        "job_id": h["job_id"],
        "seq": h["seq"],
        "hash": h["hash"],
        "index": index,
        "tree_size": len(leaves),
        "leaf": leaves[index].hex(),
        "proof": [p.hex() for p in merkle.inclusion_proof(leaves, index)],
        "root": str(root_hex).lower(),
    }


def verify_head_inclusion(proof: Mapping[str, Any], root: str | None = None,
                          tree_size: int | None = None) -> bool:
    """Check a :func:`head_inclusion_proof` result: its leaf is the encoding of its
    ``(job_id, seq, hash)`` and its path leads to ``root``. Never raises.

    Pass the ``root`` and ``tree_size`` of the commitment you trust (by default the proof's
    own): RFC 9162 verification binds the size only through the root, so both must come from
    the same (signed) commitment.
    """
    try:
        leaf = head_leaf(proof["job_id"], proof["seq"], proof["hash"])
        if leaf.hex() != proof["leaf"]:
            return False
        size = proof["tree_size"] if tree_size is None else tree_size
        if tree_size is not None and proof["tree_size"] != tree_size:
            return False
        path = [bytes.fromhex(p) for p in proof["proof"]]
        want = bytes.fromhex(root if root is not None else proof["root"])
        return merkle.verify_inclusion(leaf, proof["index"], size, path, want)
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


# ---------------------------------------------------------------------- internals

def _state(lineage: Any) -> LineageState:
    st = getattr(lineage, "state", lineage)
    if not isinstance(st, LineageState):
        raise ValueError(f"expected a Lineage or LineageState, not {type(lineage).__name__}")
    return st


def _root_of(hs: list[dict[str, Any]]) -> bytes:
    return merkle.root([head_leaf(h["job_id"], h["seq"], h["hash"]) for h in hs])
