"""The lineage commitment of SPEC §9 (streams.core.commitment)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from pathlib import Path

import pytest

from streams.core import merkle
from streams.core.chain import GENESIS, chain_hash
from streams.core.cohorts import CohortLineage
from streams.core.commitment import (
    build_commitment,
    build_commitments,
    check_heads,
    commitment_root,
    concurrency_snapshot,
    event_leaf,
    head_inclusion_proof,
    head_leaf,
    heads,
    verify_head_inclusion,
)
from streams.core.decide import Lineage
from streams.core.state import fold_all

from .core_builders import Cohort, by_jobs, with_chain

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "v3" / "LineageCommitment.avsc"
TS = 1_760_000_999_000


def lineage_of(events) -> Lineage:
    lin = Lineage()
    lin.apply_many(events)
    return lin


def cohort_events() -> list:
    """A: diverges at 500, rolls back (incarnation 1) and finishes; B: consumes A-480, still
    running; C: finished; D: only started."""
    c = Cohort()
    (c.start("A").start("B").start("C").start("D")
     .progress("A", 480).ckpt("A", "A-480", 480)
     .consume("B", "A-480", 10).progress("B", 20)
     .progress("C", 100).ckpt("C", "C-100", 100).finish("C", final="C-100")
     .progress("A", 500, loss=float("nan")).ckpt("A", "A-500", 500)
     .rollback("A", "A-480", 480).progress("A", 490).finish("A", final=None))
    return with_chain(c.events)


def sha_parts(*parts) -> bytes:
    """SPEC §10 parts, written independently of the module."""
    return b"".join(("" if p is None else str(p)).encode() + b"\x00" for p in parts)


def naive_root(leaves: list[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while 2 * k < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + naive_root(leaves[:k]) + naive_root(leaves[k:])).digest()


# ---------------------------------------------------------------------- the leaf

def test_head_leaf_is_the_spec_10_part_encoding():
    h = "ab" * 32
    assert head_leaf("A", 5, h) == b"A\x005\x00" + h.encode() + b"\x00"
    assert head_leaf("A", 5, h) == sha_parts("A", 5, h)
    assert head_leaf("A", 0, None) == b"A\x000\x00\x00" == head_leaf("A", 0, "")
    assert head_leaf("jöb", 12, "") == "jöb".encode() + b"\x0012\x00\x00"


@pytest.mark.parametrize("args", [
    ("", 0, ""),            # empty job_id
    (None, 0, ""),
    ("A", -1, ""),
    ("A", 1.0, ""),
    ("A", True, ""),
    ("A", "1", ""),
    ("A", 1, 5),
    ("A\x00B", 1, ""),      # would collide with other heads
    ("A", 1, "x\x00y"),
])
def test_head_leaf_rejects(args):
    with pytest.raises(ValueError):
        head_leaf(*args)


# ---------------------------------------------------------------------- heads and snapshot

def test_heads_are_the_last_folded_seq_and_hash_sorted_by_job():
    events = cohort_events()
    lin = lineage_of(events)
    last = {}
    for ev in events:
        last[ev.job_id] = ev
    assert heads(lin) == [{"job_id": j, "seq": last[j].seq, "hash": last[j].hash} for j in "ABCD"]
    assert heads(lin) == heads(lin.state)  # a LineageState does as well
    a = last["A"]
    assert a.hash == chain_hash(a.prev_hash, dataclasses.replace(a, hash=None))


def test_heads_without_hashes_use_the_empty_string():
    c = Cohort().start("B").progress("B", 1).start("A")
    hs = heads(lineage_of(c.events))
    assert hs == [{"job_id": "A", "seq": 0, "hash": ""}, {"job_id": "B", "seq": 1, "hash": ""}]


def test_snapshot_incarnation_last_step_status():
    lin = lineage_of(cohort_events())
    assert concurrency_snapshot(lin) == [
        {"job_id": "A", "incarnation": 1, "last_step": 490, "status": "FINISHED"},
        {"job_id": "B", "incarnation": 0, "last_step": 20, "status": "RUNNING"},
        {"job_id": "C", "incarnation": 0, "last_step": 100, "status": "FINISHED"},
        {"job_id": "D", "incarnation": 0, "last_step": None, "status": "RUNNING"},
    ]


def test_snapshot_after_a_rollback_is_running_again():
    c = Cohort().start("A").progress("A", 10).ckpt("A", "A-10", 10).finish("A")
    c.rollback("A", "A-10", 10)
    snap = concurrency_snapshot(lineage_of(with_chain(c.events)))
    assert snap == [{"job_id": "A", "incarnation": 1, "last_step": None, "status": "RUNNING"}]


def test_snapshot_of_halted_jobs():
    c = Cohort().start("A").progress("A", 1).start("B").progress("B", 5).start("G")
    c.skip("A").progress("A", 3)                       # A: LEDGER_GAP
    c.consume("G", "nowhere", 7)                       # G: UNTRACEABLE_SOURCE at end of input
    events = with_chain(c.events)
    # B: a broken chain (its Progress carries a hash that does not match)
    events = [dataclasses.replace(e, hash="f" * 64) if (e.job_id, e.seq) == ("B", 1) else e
              for e in events]
    lin = lineage_of(events)
    lin.finish_input()
    snap = {s["job_id"]: s for s in concurrency_snapshot(lin)}
    assert snap["A"]["status"] == "HALTED:LEDGER_GAP"
    assert snap["A"]["last_step"] == 3
    assert snap["B"]["status"] == "HALTED:CHAIN_BROKEN"
    assert snap["G"]["status"] == "HALTED:UNTRACEABLE_SOURCE"
    # the broken head is committed as it was received
    assert {h["job_id"]: h["hash"] for h in heads(lin)}["B"] == "f" * 64


def test_unregistered_job_in_the_unregistered_bucket():
    c = Cohort().progress("X", 42, seq=3)
    cl = CohortLineage()
    cl.apply_many(c.events)
    (com,) = build_commitments(cl, TS)
    assert com["cohort_id"] == ""
    assert com["snapshot"] == [{"job_id": "X", "incarnation": 0, "last_step": 42,
                                "status": "HALTED:UNREGISTERED"}]
    assert com["heads"] == [{"job_id": "X", "seq": 3, "hash": ""}]


def test_halt_reason_is_the_first_in_spec_order():
    c = Cohort().start("A")
    c.skip("A").progress("A", 1, incarnation=2)        # LEDGER_GAP twice, no other reason
    events = with_chain(c.events)
    events[-1] = dataclasses.replace(events[-1], hash="0" * 64)  # and CHAIN_BROKEN
    lin = lineage_of(events)
    assert set(lin.state.jobs["A"].halt_reasons) == {"LEDGER_GAP", "CHAIN_BROKEN"}
    assert concurrency_snapshot(lin)[0]["status"] == "HALTED:LEDGER_GAP"


# ---------------------------------------------------------------------- the record

def test_build_commitment_record():
    lin = lineage_of(cohort_events())
    com = build_commitment("c1", lin, TS)
    hs = heads(lin)
    leaves = [sha_parts(h["job_id"], h["seq"], h["hash"]) for h in hs]
    assert com == {
        "cohort_id": "c1",
        "root": naive_root(leaves).hex(),
        "tree_size": 4,
        "heads": hs,
        "snapshot": concurrency_snapshot(lin),
        "ts": TS,
        "signature": None,
        "key_id": None,
        "log_root": merkle.root([sha_parts(e.job_id, e.seq, e.hash) for e in cohort_events()]).hex(),
        "log_size": len(cohort_events()),
        "input_partition": None,  # filled in by the referee
        "input_offset": None,
    }
    assert commitment_root(lin) == com["root"] == merkle.root(leaves).hex()
    assert len(com["root"]) == 64 and com["root"] == com["root"].lower()


def test_the_record_matches_the_avro_schema():
    fastavro = pytest.importorskip("fastavro")
    raw = json.loads(SCHEMA.read_text())
    schema = fastavro.parse_schema(raw)
    com = build_commitment("c1", lineage_of(cohort_events()), TS)
    assert list(com) == [f["name"] for f in raw["fields"]]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, com)
    buf.seek(0)
    assert fastavro.schemaless_reader(buf, schema) == com


def test_empty_lineage_commits_to_the_empty_tree():
    com = build_commitment("c0", Lineage(), TS)
    assert com["root"] == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert com["tree_size"] == 0 and com["heads"] == [] and com["snapshot"] == []
    with pytest.raises(ValueError, match="no head"):
        head_inclusion_proof(com, "A")


@pytest.mark.parametrize("args", [(1, Lineage(), TS), ("c", Lineage(), "1"), ("c", Lineage(), True),
                                  ("c", object(), TS), ("c", None, TS)])
def test_build_commitment_argument_errors(args):
    with pytest.raises(ValueError):
        build_commitment(*args)


def test_build_commitments_per_cohort():
    a, b = Cohort("c1"), Cohort("c2")
    a.start("A").progress("A", 1)
    b.start("B").progress("B", 2).start("C")
    cl = CohortLineage()
    cl.apply_many(with_chain(sorted(a.events + b.events, key=lambda e: e.ts)))
    coms = build_commitments(cl, TS)
    assert [c["cohort_id"] for c in coms] == ["c1", "c2"]
    assert [h["job_id"] for h in coms[1]["heads"]] == ["B", "C"]
    assert coms[0]["root"] == commitment_root(cl.cohorts["c1"])
    assert build_commitments(cl.cohorts, TS) == coms


# ---------------------------------------------------------------------- determinism

def _but_log_root(com):
    return {k: v for k, v in com.items() if k != "log_root"}


def test_same_events_in_another_interleaving_same_commitment():
    """Everything but the fold log's root: the log records the fold order itself (a replay of
    the processor's input reproduces it; another interleaving of the same events does not)."""
    events = cohort_events()
    ref = build_commitment("c1", lineage_of(events), TS)
    for order in (["A", "B", "C", "D"], ["D", "C", "B", "A"], ["B", "D", "A", "C"]):
        again = by_jobs(events, order)
        assert again != events
        assert _but_log_root(build_commitment("c1", lineage_of(again), TS)) == _but_log_root(ref), order
    # one at a time through apply, and through the plain fold
    inc = Lineage()
    for ev in by_jobs(events, ["D", "C", "B", "A"]):
        inc.apply(ev)
    assert _but_log_root(build_commitment("c1", inc, TS)) == _but_log_root(ref)
    assert commitment_root(fold_all(events)) == ref["root"]
    # the same order, one at a time: the very same record
    inc = Lineage()
    for ev in events:
        inc.apply(ev)
    assert build_commitment("c1", inc, TS) == ref


def test_redelivered_duplicates_do_not_change_the_commitment():
    events = cohort_events()
    ref = build_commitment("c1", lineage_of(events), TS)
    assert build_commitment("c1", lineage_of(events + events[:5]), TS) == ref


def test_root_changes_when_any_head_changes():
    events = cohort_events()
    base = commitment_root(lineage_of(events))
    assert commitment_root(lineage_of(events[:-1])) != base          # A one event behind
    # the same events with one hash chain rewritten (a different past for B)
    c = Cohort()
    (c.start("A").start("B").start("C").start("D")
     .progress("A", 480).ckpt("A", "A-480", 480)
     .consume("B", "A-480", 10).progress("B", 21)
     .progress("C", 100).ckpt("C", "C-100", 100).finish("C", final="C-100")
     .progress("A", 500, loss=float("nan")).ckpt("A", "A-500", 500)
     .rollback("A", "A-480", 480).progress("A", 490).finish("A", final=None))
    assert commitment_root(lineage_of(with_chain(c.events))) != base


# ---------------------------------------------------------------------- inclusion proofs

def test_every_head_has_an_inclusion_proof_that_verifies():
    com = build_commitment("c1", lineage_of(cohort_events()), TS)
    root = bytes.fromhex(com["root"])
    for i, h in enumerate(com["heads"]):
        p = head_inclusion_proof(com, h["job_id"])
        assert p["index"] == i and p["tree_size"] == com["tree_size"] == 4
        assert (p["job_id"], p["seq"], p["hash"]) == (h["job_id"], h["seq"], h["hash"])
        assert p["leaf"] == head_leaf(h["job_id"], h["seq"], h["hash"]).hex()
        assert p["root"] == com["root"]
        assert merkle.verify_inclusion(bytes.fromhex(p["leaf"]), p["index"], p["tree_size"],
                                       [bytes.fromhex(x) for x in p["proof"]], root)
        assert verify_head_inclusion(p)
        assert verify_head_inclusion(p, com["root"], com["tree_size"])
        assert not verify_head_inclusion(p, com["root"], com["tree_size"] * 2)


def test_inclusion_proofs_in_larger_cohorts():
    c = Cohort()
    jobs = [f"job-{i:02d}" for i in range(13)]
    for j in jobs:
        c.start(j)
    for step in range(3):
        for j in jobs[: 5 + step * 3]:
            c.progress(j, step)
    com = build_commitment("c1", lineage_of(with_chain(c.events)), TS)
    assert com["tree_size"] == 13
    assert [h["job_id"] for h in com["heads"]] == jobs
    for j in jobs:
        assert verify_head_inclusion(head_inclusion_proof(com, j))


def test_tampered_head_proofs_fail():
    events = cohort_events()
    com = build_commitment("c1", lineage_of(events), TS)
    p = head_inclusion_proof(com, "B")
    other = build_commitment("c1", lineage_of(events[:-1]), TS)
    assert not verify_head_inclusion(p, other["root"])                  # another commitment
    assert not verify_head_inclusion({**p, "seq": p["seq"] + 1})          # claims a later head
    assert not verify_head_inclusion({**p, "hash": "0" * 64})
    assert not verify_head_inclusion({**p, "job_id": "A"})
    leaf = head_leaf("B", p["seq"] + 1, p["hash"]).hex()
    assert not verify_head_inclusion({**p, "seq": p["seq"] + 1, "leaf": leaf})
    assert not verify_head_inclusion({**p, "index": p["index"] + 1})
    assert not verify_head_inclusion({**p, "tree_size": 9})
    assert not verify_head_inclusion({**p, "proof": p["proof"][:-1]})
    assert not verify_head_inclusion({**p, "proof": p["proof"] + [com["root"]]})
    flipped = list(p["proof"])
    flipped[0] = ("0" if flipped[0][0] != "0" else "1") + flipped[0][1:]
    assert not verify_head_inclusion({**p, "proof": flipped})
    # malformed input never raises
    for bad in ({}, {**p, "proof": ["zz"]}, {**p, "seq": "1"}, {**p, "root": None},
                {**p, "proof": None}, {**p, "index": None}):
        assert verify_head_inclusion(bad) is False


def test_head_inclusion_proof_checks_the_commitment():
    com = build_commitment("c1", lineage_of(cohort_events()), TS)
    with pytest.raises(ValueError, match="no head"):
        head_inclusion_proof(com, "Z")
    with pytest.raises(ValueError, match="do not hash to its root"):
        head_inclusion_proof({**com, "root": "00" * 32}, "A")
    forged = [dict(h) for h in com["heads"]]
    forged[1]["seq"] += 1
    with pytest.raises(ValueError, match="do not hash to its root"):
        head_inclusion_proof({**com, "heads": forged}, "A")
    with pytest.raises(ValueError, match="tree_size"):
        head_inclusion_proof({**com, "tree_size": 5}, "A")
    # upper-case hex root is accepted and normalised
    assert head_inclusion_proof({**com, "root": com["root"].upper()}, "A")["root"] == com["root"]


# ---------------------------------------------------------------------- consistency between commitments

def _leaves(com):
    return [head_leaf(h["job_id"], h["seq"], h["hash"]) for h in com["heads"]]


def test_consistency_only_when_the_old_heads_are_a_prefix():
    c = Cohort().start("A").start("B").progress("A", 1)
    first = build_commitment("c1", lineage_of(with_chain(c.events)), TS)
    # a new job sorting after every existing one, no existing head moved: an RFC 6962 extension
    c.start("C")
    grown = build_commitment("c1", lineage_of(with_chain(c.events)), TS + 1)
    proof = merkle.consistency_proof(_leaves(grown), first["tree_size"])
    assert merkle.verify_consistency(first["tree_size"], grown["tree_size"],
                                     bytes.fromhex(first["root"]), bytes.fromhex(grown["root"]), proof)
    # an existing head advanced: no consistency proof exists (the leaf changed in place)
    c.progress("A", 2)
    moved = build_commitment("c1", lineage_of(with_chain(c.events)), TS + 2)
    proof = merkle.consistency_proof(_leaves(moved), grown["tree_size"])
    assert not merkle.verify_consistency(grown["tree_size"], moved["tree_size"],
                                         bytes.fromhex(grown["root"]), bytes.fromhex(moved["root"]), proof)
    # a new job sorting first shifts every leaf: no consistency proof either
    c.start("0-first")
    shifted = build_commitment("c1", lineage_of(with_chain(c.events)), TS + 3)
    proof = merkle.consistency_proof(_leaves(shifted), moved["tree_size"])
    assert not merkle.verify_consistency(moved["tree_size"], shifted["tree_size"],
                                         bytes.fromhex(moved["root"]), bytes.fromhex(shifted["root"]), proof)


def test_a_later_head_extends_the_earlier_one_through_the_chain():
    """What replaces consistency per job: re-hashing the events between two heads."""
    c = Cohort().start("A").progress("A", 1)
    early_events = with_chain(c.events)
    early = head_inclusion_proof(build_commitment("c1", lineage_of(early_events), TS), "A")
    c.progress("A", 2).ckpt("A", "A-2", 2)
    events = with_chain(c.events)
    late = head_inclusion_proof(build_commitment("c1", lineage_of(events), TS + 1), "A")
    h = early["hash"]
    for ev in events[early["seq"] + 1: late["seq"] + 1]:
        assert ev.prev_hash == h
        h = chain_hash(h, dataclasses.replace(ev, hash=None))
    assert h == late["hash"]
    assert events[0].prev_hash == GENESIS


# ---------------------------------------------------------------------- the fold log

def test_the_fold_log_holds_every_accepted_event_in_fold_order():
    events = cohort_events()
    lin = Lineage()
    leaves = []
    for ev in by_jobs(events, ["D", "B", "A", "C"]):
        result = lin.fold(ev)
        assert result.accepted
        leaves.append(sha_parts(ev.job_id, ev.seq, ev.hash))
        assert event_leaf(ev) == leaves[-1]
        assert lin.log.size == len(leaves)
    assert lin.log.root() == naive_root(leaves)
    com = build_commitment("c1", lin, TS)
    assert (com["log_root"], com["log_size"]) == (naive_root(leaves).hex(), len(events))


def test_duplicates_and_refused_events_are_not_in_the_fold_log():
    events = cohort_events()
    lin = lineage_of(events)
    size, root = lin.log.size, lin.log.root()
    lin.apply_many(events[:5])                                      # redelivered duplicates
    conflicting = dataclasses.replace(events[4], hash="0" * 64)     # same (job, seq), other bytes
    assert not lin.fold(conflicting).accepted
    assert (lin.log.size, lin.log.root()) == (size, root)


def test_the_fold_log_is_append_only_across_commitments():
    events = cohort_events()
    lin = Lineage()
    coms = []
    for i, ev in enumerate(events):
        lin.apply(ev)
        if i % 4 == 3 or i == len(events) - 1:
            coms.append(build_commitment("c1", lin, TS + i))
    leaves = [event_leaf(e) for e in events]
    for old in coms:
        for new in coms:
            if old["log_size"] > new["log_size"]:
                continue
            proof = merkle.consistency_proof(leaves[:new["log_size"]], old["log_size"])
            assert merkle.verify_consistency(old["log_size"], new["log_size"], bytes.fromhex(old["log_root"]),
                                             bytes.fromhex(new["log_root"]), proof)


def test_the_fold_log_depends_on_the_interleaving_the_heads_root_does_not():
    events = cohort_events()
    a, b = lineage_of(events), lineage_of(by_jobs(events, ["D", "C", "B", "A"]))
    assert commitment_root(a) == commitment_root(b)
    assert a.log.size == b.log.size and a.log.root() != b.log.root()


def test_a_bare_state_has_no_fold_log():
    com = build_commitment("c1", fold_all(cohort_events()), TS)
    assert com["log_root"] is None and com["log_size"] is None
    empty = build_commitment("c0", Lineage(), TS)
    assert empty["log_root"] == merkle.EMPTY_ROOT.hex() and empty["log_size"] == 0


def test_check_heads():
    com = build_commitment("c1", lineage_of(cohort_events()), TS)
    assert check_heads(com) is None
    assert "tree_size" in check_heads({**com, "tree_size": 3})
    assert "do not hash" in check_heads({**com, "root": "00" * 32})
    forged = [dict(h) for h in com["heads"]]
    forged[0]["seq"] += 1
    assert "do not hash" in check_heads({**com, "heads": forged})
    assert "malformed" in check_heads({})
