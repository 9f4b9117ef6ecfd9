"""SPEC §8, the guard: UNREGISTERED, LEDGER_GAP, UNTRACEABLE_SOURCE, CHAIN_BROKEN,
CONFLICTING_DUPLICATE; one halt per job; halted jobs still folded."""

from __future__ import annotations

import dataclasses

import pytest

from streams.core.chain import chain_hash
from streams.core.decide import HaltIssued, Lineage
from streams.core.state import Config

from .core_builders import (IA, Cohort, analyze, by_jobs, contaminated, decisions, halts, iid, roots, seed,
                            with_chain)

NAN = float("nan")


def halts_of(events):
    return halts(analyze(events))


# ---------------------------------------------------------------------- UNREGISTERED / LEDGER_GAP

def test_unregistered():
    c = Cohort().start("A").progress("X", 10)
    assert halts_of(c.events) == [("X", "UNREGISTERED")]


def test_unregistered_comes_before_ledger_gap():
    """X's first event has seq 3 (a gap too): the first reason in SPEC order wins."""
    c = Cohort().progress("X", 10, seq=3)
    assert halts_of(c.events) == [("X", "UNREGISTERED")]


def test_ledger_gap_seq_skip():
    c = Cohort().start("A").progress("A", 10).skip("A").progress("A", 30)
    assert halts_of(c.events) == [("A", "LEDGER_GAP")]


def test_ledger_gap_wrong_incarnation():
    c = Cohort().start("A").progress("A", 10, incarnation=1)
    assert halts_of(c.events) == [("A", "LEDGER_GAP")]


def test_ledger_gap_rollback_skipping_an_incarnation():
    c = Cohort().start("A").rollback("A", None, incarnation=2)
    assert halts_of(c.events) == [("A", "LEDGER_GAP")]


def test_ledger_gap_event_keeps_its_own_incarnation():
    """A diverged at 500 in incarnation 0; A-600 claims incarnation 1 with no RolledBack: halt,
    and A-600 belongs to incarnation 1, which did not diverge, so it is clean."""
    c = Cohort().start("A").progress("A", 500, loss=NAN).ckpt("A", "A-600", 600, incarnation=1)
    out = analyze(c.events)
    assert halts(out) == [("A", "LEDGER_GAP")]
    assert out["tainted_checkpoints"] == []


def test_correct_incarnations_across_rollbacks_are_no_gap():
    c = Cohort().start("A").ckpt("A", "A-1", 1).rollback("A", "A-1").rollback("A", None).progress("A", 5)
    assert halts_of(c.events) == []


# ---------------------------------------------------------------------- UNTRACEABLE_SOURCE

@pytest.mark.parametrize("how", ["base", "restore", "merge", "eval_only"])
def test_untraceable_source_offline_only_at_end_of_input(how):
    c = Cohort()
    if how == "base":
        c.start("B", base="X-missing")
    else:
        c.start("B")
    if how == "restore":
        c.rollback("B", "X-missing")
    if how in ("merge", "eval_only"):
        c.consume("B", "X-missing", 10, mode="EVAL_ONLY" if how == "eval_only" else "MERGE")
    lin = Lineage(Config())
    lin.apply_many(c.events)
    assert lin.final_state()["halts"] == []
    lin.finish_input()
    assert halts(lin.final_state()) == [("B", "UNTRACEABLE_SOURCE")]
    assert halts_of(c.events) == [("B", "UNTRACEABLE_SOURCE")]


def test_source_written_later_in_the_log_is_traceable():
    c = seed().start("B").consume("B", "A-480", 400)
    assert halts_of(by_jobs(c.events, ["B", "A"])) == []


def test_untraceable_source_live_respects_the_grace_period():
    """Processor clock: B consumes X-missing and C consumes Y-late at 1000; grace 5000. At 5999
    nobody is halted; D then writes Y-late; at 6001 B (and only B) is halted."""
    ev = (Cohort().start("B").consume("B", "X-missing", 10).start("C").consume("C", "Y-late", 10)
          .start("D").ckpt("D", "Y-late", 10)).events
    lin = Lineage(Config())
    got = [d for e in ev[:4] for d in lin.apply(e, now_ms=1_000)]
    got += lin.tick(5_999, grace_ms=5_000)
    assert [d for d in got if isinstance(d, HaltIssued)] == []
    got += [d for e in ev[4:] for d in lin.apply(e, now_ms=5_999)]
    got += lin.tick(6_001, grace_ms=5_000)
    assert [(d.job_id, d.reason) for d in got if isinstance(d, HaltIssued)] == [("B", "UNTRACEABLE_SOURCE")]
    assert halts(lin.final_state()) == [("B", "UNTRACEABLE_SOURCE")]


# ---------------------------------------------------------------------- CHAIN_BROKEN

def _chained():
    return with_chain(seed().start("B").consume("B", "A-480", 400).ckpt("B", "B-500", 500).events)


def test_valid_chain_verifies():
    assert halts_of(_chained()) == []


def test_tampered_event_breaks_the_chain():
    """A's Progress at seq 1 is edited after hashing (loss 1.0 → 0.5), its hash kept."""
    events = _chained()
    i = next(k for k, e in enumerate(events) if e.job_id == "A" and e.seq == 1)
    events[i] = dataclasses.replace(events[i], loss=0.5)
    assert halts_of(events) == [("A", "CHAIN_BROKEN")]


def test_relinked_event_breaks_the_chain():
    """B-500 is self-consistent (its hash matches its prev_hash) but points at the genesis."""
    events = _chained()
    i = next(k for k, e in enumerate(events) if e.job_id == "B" and e.seq == 2)
    forged = dataclasses.replace(events[i], prev_hash="0" * 64, hash=None)
    events[i] = dataclasses.replace(forged, hash=chain_hash("0" * 64, forged))
    assert halts_of(events) == [("B", "CHAIN_BROKEN")]


# ---------------------------------------------------------------------- duplicates

def test_identical_duplicates_are_dropped_silently():
    events = seed().start("B").consume("B", "A-520", 520).ckpt("B", "B-540", 540).events
    redelivered = events + events[2:5] + events[-2:]
    assert analyze(redelivered) == analyze(events)
    assert halts_of(redelivered) == []


def test_conflicting_duplicate_same_job_seq_first_seen_counts():
    """Two different events claim (A, 1): halt; the first seen counts (a NaN second is ignored,
    a NaN first is the onset)."""
    ok = Cohort().start("A").progress("A", 100).last
    bad = dataclasses.replace(ok, loss=NAN)
    start = Cohort().start("A").events[0]
    out = analyze([start, ok, bad])
    assert (halts(out), roots(out)) == ([("A", "CONFLICTING_DUPLICATE")], [])
    out = analyze([start, bad, ok])
    assert (halts(out), roots(out)) == ([("A", "CONFLICTING_DUPLICATE")], [("A", 0, 100, "INTERNAL")])


def _written_twice() -> Cohort:
    """A writes X at step 520 (after its onset 500: tainted if A's write counts); later B
    writes X too (clean content); C merges X and writes C-600."""
    return (seed().ckpt("A", "X", 520).start("B").ckpt("B", "X", 100).start("C").consume("C", "X", 600)
            .ckpt("C", "C-600", 600))


@pytest.mark.parametrize("order", [["A", "B", "C"], ["B", "C", "A"]])
def test_checkpoint_written_twice_halts_the_later_writer(order):
    assert halts_of(by_jobs(_written_twice().events, order)) == [("B", "CONFLICTING_DUPLICATE")]


def test_checkpoint_written_twice_earliest_write_counts_in_arrival_order():
    out = analyze(_written_twice().events)
    assert "X" in out["tainted_checkpoints"] and "C-600" in out["tainted_checkpoints"]
    assert ("C", 0, "X") in contaminated(out, IA)


def test_checkpoint_written_twice_earliest_write_counts_whatever_the_arrival_order():
    out = analyze(by_jobs(_written_twice().events, ["B", "C", "A"]))
    assert "X" in out["tainted_checkpoints"] and "C-600" in out["tainted_checkpoints"]
    assert ("C", 0, "X") in contaminated(out, IA)


def test_checkpoint_written_twice_same_ts_job_id_breaks_the_tie():
    c = Cohort().start("B").start("A").ckpt("B", "X", 1)
    c.ckpt("A", "X", 1, ts=c.last.ts)
    assert halts_of(c.events) == [("B", "CONFLICTING_DUPLICATE")]


# ---------------------------------------------------------------------- one halt per job

def test_one_halt_per_job_first_reason_in_spec_order():
    """A: CHAIN_BROKEN (seq 1 tampered) and UNTRACEABLE_SOURCE → UNTRACEABLE_SOURCE.
    B: CONFLICTING_DUPLICATE then LEDGER_GAP → LEDGER_GAP. One HaltIssued per job."""
    events = with_chain(Cohort().start("A").progress("A", 10).consume("A", "X-missing", 20).events)
    events[1] = dataclasses.replace(events[1], loss=0.5)
    b = Cohort().start("B").progress("B", 10)
    events += b.events + [dataclasses.replace(b.last, loss=2.0)]
    events += b.skip("B").progress("B", 30).events[-1:]
    assert halts_of(events) == [("A", "UNTRACEABLE_SOURCE"), ("B", "LEDGER_GAP")]
    lin = Lineage(Config())
    issued = [d for ev in events for d in lin.apply(ev) if isinstance(d, HaltIssued)]
    issued += [d for d in lin.finish_input() if isinstance(d, HaltIssued)]
    assert sorted(d.job_id for d in issued) == ["A", "B"]


def test_halted_jobs_events_are_still_folded():
    """A has a seq gap and is halted; its later NaN still opens the incident and taints A-520;
    unregistered X's NaN is folded too."""
    c = (Cohort().start("A").progress("A", 480).ckpt("A", "A-480", 480).skip("A")
         .progress("A", 500, loss=NAN).ckpt("A", "A-520", 520).progress("X", 100, loss=NAN))
    out = analyze(c.events)
    assert halts(out) == [("A", "LEDGER_GAP"), ("X", "UNREGISTERED")]
    assert roots(out) == [("A", 0, 500, "INTERNAL"), ("X", 0, 100, "INTERNAL")]
    assert out["tainted_checkpoints"] == ["A-520"]
    assert sorted(i["incident_id"] for i in out["incidents"]) == sorted([IA, iid("X", 0, 100)])


def test_decisions_one_halt_issued_per_job_with_two_reasons():
    c = Cohort().progress("X", 10, seq=0).skip("X").progress("X", 30)
    issued = [d for ds in decisions(c.events) for d in ds if isinstance(d, HaltIssued)]
    assert [(d.job_id, d.reason) for d in issued] == [("X", "UNREGISTERED")]


def test_late_event_after_a_gap_is_rejected_not_folded():
    """A's seq 2 (A-520) arrives before seq 1 (NaN at 500). SPEC §3 guarantees a job's events
    arrive in seq order, so this is a broken producer. Reading: the job is halted (LEDGER_GAP),
    the gap stays a gap, and the late event is *rejected* by the fold (not silently: the fold
    result says why, and the live worker routes it to the dead-letter topic). Folding it would
    rewrite the job's past (its detector window, its taint thresholds) non-monotonically."""
    e = Cohort().start("A").progress("A", 500, loss=NAN).ckpt("A", "A-520", 520).events
    lin = Lineage(Config())
    lin.fold(e[0])
    lin.fold(e[2])
    late = lin.fold(e[1])
    assert not late.accepted and not late.duplicate
    assert [reason for reason, _ in late.guard] == ["LEDGER_GAP"]
    out = analyze([e[0], e[2], e[1]])
    assert halts(out) == [("A", "LEDGER_GAP")]
    assert out["tainted_checkpoints"] == []
