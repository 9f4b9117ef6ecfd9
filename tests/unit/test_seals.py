"""The seal gate (streams.core.seals): a keyed job's record grows only by what its key vouches for."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.core.chain import chain_hash
from streams.core.decide import HaltIssued, Lineage, PlanChanged
from streams.core.events import (
    CheckpointWritten,
    DivergenceReported,
    JobStarted,
    Progress,
)
from streams.core.seals import FORGED, KEY_NOT_ISSUED, UNSIGNED_JOB, SealPolicy, public_key_hex, seal
from streams.core.state import Config
from streams.testing.sealed import SealedJob


Job = SealedJob


def fold_all(lin: Lineage, events, refs=None):
    results = []
    for i, ev in enumerate(events):
        results.append(lin.fold(ev, ev.ts, ref=(refs[i] if refs else i)))
    return results


def refused(results):
    return [(ref, kind) for r in results for ref, _ev, kind, _why in r.refused]


def test_a_job_without_a_key_folds_as_before():
    lin = Lineage()
    j = Job()
    evs = [j.start(sealed=False, declare=None), j.progress(1), j.progress(2)]
    rs = fold_all(lin, evs)
    assert all(r.accepted for r in rs) and lin.log.size == 3 and lin.seals.holding == 0


def test_unsealed_events_wait_for_the_seal_that_covers_them_then_fold_in_order():
    lin = Lineage()
    j = Job()
    evs = [j.start(), j.progress(1), j.progress(2), j.progress(3), j.checkpoint(3)]
    rs = fold_all(lin, evs)
    assert rs[0].accepted
    assert [r.held for r in rs[1:4]] == [True, True, True]
    assert rs[4].accepted and [e.seq for e in rs[4].released] == [1, 2, 3]
    assert lin.log.size == 5 and lin.seals.holding == 0
    assert lin.state.jobs["A"].next_seq == 5 and not lin.state.jobs["A"].halt_reasons


def test_a_seal_record_releases_the_run_and_is_then_a_duplicate():
    lin = Lineage()
    j = Job()
    start, p1 = j.start(), j.progress(1)
    p2 = j.progress(2)
    again = replace(p2, signature=seal(p2.hash, j.key))  # the idle client's seal record
    rs = fold_all(lin, [start, p1, p2, again])
    assert rs[3].accepted and [e.seq for e in rs[3].released] == [1]
    assert lin.log.size == 3 and lin.seals.holding == 0 and not refused(rs)
    assert not lin.state.jobs["A"].halt_reasons


def test_a_forged_divergence_before_the_genuine_event_is_refused_and_triggers_nothing():
    """The issue's scenario: another producer extends the chain with a DivergenceReported."""
    lin = Lineage()
    j = Job()
    evs = [j.start(), j.progress(1), j.checkpoint(1)]
    fold_all(lin, evs)
    forged = j.diverged(0, sealed=False, advance=False)  # correct chain, no seal
    genuine = j.progress(2, sealed=True)
    rs = fold_all(lin, [forged, genuine], refs=["forged", "genuine"])
    decisions = lin.decide()
    assert rs[0].held and rs[1].accepted
    assert refused(rs) == [("forged", FORGED)]
    assert not lin.state.jobs["A"].halt_reasons and not lin.state.diverged
    assert not any(isinstance(d, (PlanChanged, HaltIssued)) for d in decisions)


def test_a_forgery_signed_by_another_key_is_refused_at_once():
    lin = Lineage()
    j = Job()
    fold_all(lin, [j.start(), j.progress(1, sealed=True)])
    wrong_key = j.diverged(0, sealed=True, key=Ed25519PrivateKey.generate(), advance=False)
    r = lin.fold(wrong_key, 0, ref="wrong-key")
    assert refused([r]) == [("wrong-key", FORGED)] and "does not verify" in r.refused[0][3]
    assert lin.state.jobs["A"].next_seq == 2 and not lin.state.jobs["A"].halt_reasons
    assert lin.seals.holding == 0


def test_other_content_at_a_sealed_seq_is_refused_unless_the_job_sealed_it():
    lin = Lineage()
    j = Job()
    start, p1 = j.start(), j.progress(1, sealed=True)
    fold_all(lin, [start, p1])
    j.seq, j.head = 1, start.hash
    forged = j.diverged(0, sealed=False, advance=False)
    r = lin.fold(forged, 0, ref="f")
    assert refused([r]) == [("f", FORGED)] and not lin.state.jobs["A"].halt_reasons
    own = j.diverged(0, sealed=True, advance=False)  # the job itself signed two events at seq 1
    r = lin.fold(own, 0, ref="own")
    assert not r.refused and lin.state.jobs["A"].halt_reason == "CONFLICTING_DUPLICATE"


def test_a_redelivered_event_is_a_silent_duplicate():
    lin = Lineage()
    j = Job()
    evs = [j.start(), j.progress(1), j.progress(2, sealed=True)]
    fold_all(lin, evs)
    rs = fold_all(lin, [evs[1], evs[2], evs[0]])
    assert all(r.duplicate for r in rs) and not refused(rs) and lin.log.size == 3


def test_a_job_started_not_sealed_by_its_own_key_is_refused():
    lin = Lineage()
    j = Job()
    bad = j.start(sealed=True, key=Ed25519PrivateKey.generate())
    r = lin.fold(bad, 0, ref="s")
    assert refused([r]) == [("s", FORGED)] and "A" not in lin.state.jobs
    unsealed_start = Job("B").start(sealed=False)
    r = lin.fold(unsealed_start, 0, ref="u")
    assert refused([r]) == [("u", FORGED)]


def test_policy_require_sealed_and_issued_keys():
    lenient_job = Job("L")
    issued = Job("I")
    cfg = Config(seals=SealPolicy(require_sealed=True, issued_keys=frozenset({public_key_hex(issued.key)})))
    lin = Lineage(cfg)
    r = lin.fold(lenient_job.start(sealed=False, declare=None), 0, ref="nokey")
    assert refused([r]) == [("nokey", UNSIGNED_JOB)]
    r = lin.fold(Job("X").start(), 0, ref="other")
    assert refused([r]) == [("other", KEY_NOT_ISSUED)]
    r = lin.fold(issued.start(), 0, ref="ok")
    assert r.accepted and not r.refused


def test_a_missing_event_in_the_sealed_run_is_a_ledger_gap():
    lin = Lineage()
    j = Job()
    start, _p1, p2, p3 = j.start(), j.progress(1), j.progress(2), j.progress(3, sealed=True)
    rs = fold_all(lin, [start, p2, p3])  # p1 never arrives
    assert rs[2].accepted and [e.seq for e in rs[2].released] == [2]
    assert lin.state.jobs["A"].halt_reason == "LEDGER_GAP" and not refused(rs)


def test_the_end_of_an_offline_log_refuses_what_was_never_sealed():
    lin = Lineage()
    j = Job()
    fold_all(lin, [j.start(), j.progress(1), j.progress(2)])
    left = lin.unsealed()
    assert [(e.seq, kind) for _ref, e, kind, _why in left] == [(1, FORGED), (2, FORGED)]
    assert lin.seals.holding == 0


def test_held_events_are_bounded_per_job():
    lin = Lineage(Config(seals=SealPolicy(max_held=3)))
    j = Job()
    rs = fold_all(lin, [j.start(), *[j.progress(i) for i in range(1, 6)]])
    assert [r.held for r in rs[1:]] == [True, True, True, False, False]
    assert [k for _r, k in refused(rs)] == [FORGED, FORGED]


def test_the_gate_is_deterministic_in_the_order_of_its_input():
    j = Job()
    j2 = Job("B")
    evs = [j.start(), j2.start(), j.progress(1), j2.progress(1), j.diverged(1, sealed=False, advance=False),
           j.progress(2, sealed=True), j2.checkpoint(1)]
    roots = []
    for _ in range(2):
        lin = Lineage()
        fold_all(lin, evs)
        lin.decide()
        roots.append((lin.log.root(), lin.log.size))
    assert roots[0] == roots[1] and roots[0][1] == 6


@pytest.mark.parametrize("etype", [JobStarted, Progress, CheckpointWritten, DivergenceReported])
def test_the_signature_is_not_hashed_and_the_key_is(etype):
    j = Job()
    ev = {JobStarted: j.start, Progress: lambda: j.progress(1, sealed=True),
          CheckpointWritten: lambda: j.checkpoint(1), DivergenceReported: lambda: j.diverged(1)}[etype]()
    assert chain_hash(ev.prev_hash, replace(ev, signature=None)) == ev.hash
    if etype is JobStarted:
        assert chain_hash(ev.prev_hash, replace(ev, public_key=None)) != ev.hash


def test_a_restored_record_pinning_no_key_refuses_the_jobs_events_instead_of_crashing():
    # only a restored state (a snapshot) can pin what is no key: the gate pins only keys it loaded
    lin = Lineage()
    j = Job()
    assert fold_all(lin, [j.start()])[0].accepted
    lin.state.jobs["A"].public_key = "not a key"
    lin.seals.keys.clear()  # as after a restore: the gate never saw the JobStarted
    rs = fold_all(lin, [j.progress(1), j.checkpoint(1)], refs=["p", "c"])
    assert refused(rs) == [("p", FORGED), ("c", FORGED)]
    assert "not an Ed25519 public key" in rs[0].refused[0][3]
    assert lin.log.size == 1
