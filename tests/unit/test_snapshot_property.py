"""A restored snapshot folds on exactly like the engine it was taken from (issue 14).

For random cohorts — divergences, rollbacks, consumptions across jobs, aliased content, jobs
interleaved so consumptions arrive before the checkpoints they name (unresolved), identical
redeliveries, consumptions of checkpoints nobody writes, sealed jobs with events held at the
cut and forgeries refused after it, grace ticks at random points — the fold is run the way the
referee runs it (``fold`` then ``decide`` after each event), snapshotted at random cuts,
restored, and the rest is folded into both the restored and the uninterrupted engine: every
fold result and every decision after the cut, the final state, the commitment root and the
final snapshot bytes must be equal. The SPEC vectors are restored at every event boundary.
"""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from streams.core.commitment import commitment_root
from streams.core.decide import Lineage
from streams.core.events import parse_event
from streams.core.snapshot import dump_lineage, load_lineage
from streams.core.state import Config
from streams.testing.cohort import chain_events, generate_cohorts, interleave_jobs, seal_events

from .vectors import comparable, load_expected, load_lines, mismatches, vector_names

CASES = 36


def _ghost_consumptions(dicts: list[dict], rng: random.Random, n: int) -> list[dict]:
    """Insert ``n`` consumptions of checkpoints nobody writes, renumbering each job's seq."""
    dicts = [dict(d) for d in dicts]
    started = {}
    for i, d in enumerate(dicts):
        started.setdefault(d["job_id"], i)
    for k in range(n):
        job = rng.choice(sorted(started))
        at = rng.randrange(started[job] + 1, len(dicts) + 1)
        prev = next(d for d in reversed(dicts[:at]) if d["job_id"] == job)
        dicts.insert(at, {"type": "CheckpointConsumed", "job_id": job, "seq": 0,
                          "incarnation": prev["incarnation"], "ts": prev["ts"],
                          "source_checkpoint_id": f"ghost-{k}", "step": 0, "mode": "MERGE"})
    seqs: dict[str, int] = defaultdict(int)
    for d in dicts:
        d["seq"] = seqs[d["job_id"]]
        seqs[d["job_id"]] += 1
    return dicts


def _forgeries(events: list, rng: random.Random, rate: float) -> list:
    """After some unsealed Progress events of keyed jobs, a copy with other content and the
    genuine hash (held, then refused as forged when the job's seal comes)."""
    from dataclasses import replace

    out = []
    for ev in events:
        out.append(ev)
        if type(ev).__name__ == "Progress" and ev.signature is None and ev.hash and rng.random() < rate:
            out.append(replace(ev, loss=ev.loss + 1.0 if ev.loss == ev.loss else 1.0))
    return out


def _ops(seed: int) -> list[tuple]:
    """The operations of one case: ("fold", event, ref, now) and ("tick", now, grace)."""
    rng = random.Random(seed)
    jobs = rng.randrange(3, 9)
    dicts = list(generate_cohorts(jobs=jobs, cohort_size=jobs, steps=rng.choice((120, 200, 300)), seed=seed,
                                  divergence_rate=rng.choice((0.3, 0.6)), exploit_every=rng.choice((10, 20)),
                                  exploit_prob=0.8, alias_prob=0.2, ckpt_every=rng.choice((20, 50))))
    dicts = _ghost_consumptions(dicts, rng, rng.randrange(0, 3))
    kind = seed % 3
    if kind == 1:
        dicts = list(chain_events(dicts))
    elif kind == 2:
        dicts = list(seal_events(dicts, every=rng.randrange(3, 12), seed=seed))
    events = [parse_event(d) for d in dicts]
    if kind == 2:
        events = _forgeries(events, rng, 0.05)
    events = interleave_jobs(events, rng, rng.choice((0.0, 0.03)))
    ops: list[tuple] = []
    now = 1_000
    for i, ev in enumerate(events):
        now += rng.randrange(0, 20)
        ops.append(("fold", ev, ("ref", i), now))
        if rng.random() < 0.03:
            ops.append(("tick", now, rng.choice((0, 50, 400))))
    return ops


def _run(lin: Lineage, op: tuple) -> tuple:
    """Apply one operation the referee's way; what it returned, comparable across engines
    (events by repr: a NaN loss is not equal to itself)."""
    if op[0] == "tick":
        return ("tick", lin.tick(op[1], op[2]))
    _, ev, ref, now = op
    res = lin.fold(ev, now, None, ref)
    decisions = lin.decide()
    return (res.accepted, res.duplicate, res.held, list(res.guard), [repr(e) for e in res.released],
            [(r, repr(e), k, why) for r, e, k, why in res.refused], decisions)


@pytest.mark.parametrize("seed", range(CASES))
def test_restore_at_random_cuts_folds_on_identically(seed):
    ops = _ops(seed)
    cuts = set(random.Random(1000 + seed).sample(range(len(ops) + 1), 2))
    config = Config()
    lin = Lineage(config)
    engines: list[tuple[int, Lineage]] = []
    for i in range(len(ops) + 1):
        if i in cuts:
            snap = dump_lineage(lin)
            restored = load_lineage(snap, config)
            assert dump_lineage(restored) == snap, f"seed {seed}: dump -> load -> dump changed the bytes"
            engines.append((i, restored))
        if i == len(ops):
            break
        want = _run(lin, ops[i])
        for cut, restored in engines:
            got = _run(restored, ops[i])
            assert got == want, f"seed {seed} op {i} (restored at {cut}): {got!r} != {want!r}"
    final = dump_lineage(lin)
    for cut, restored in engines:
        assert restored.final_state() == lin.final_state(), f"seed {seed} (restored at {cut})"
        assert commitment_root(restored) == commitment_root(lin)
        assert restored.log.size == lin.log.size
        assert dump_lineage(restored) == final, f"seed {seed}: final snapshots differ (restored at {cut})"
    # the end of an offline log: held events refused, unresolved sources halt, alike
    want_unsealed = [repr(x) for x in lin.unsealed()]
    want_finish = lin.finish_input()
    for _cut, restored in engines:
        assert [repr(x) for x in restored.unsealed()] == want_unsealed
        assert restored.finish_input() == want_finish
        assert restored.final_state() == lin.final_state()


def test_cuts_cover_held_events_and_unresolved_consumptions():
    """The cases above really snapshot held events and unresolved consumptions."""
    held = unresolved = 0
    for seed in range(CASES):
        ops = _ops(seed)
        lin = Lineage()
        for op in ops[: len(ops) // 2]:
            _run(lin, op)
        held += lin.seals.holding > 0
        unresolved += bool(lin.state.unresolved)
    assert held >= 3 and unresolved >= 3, (held, unresolved)


@pytest.mark.parametrize("name", vector_names())
def test_vectors_restored_at_every_event_boundary(name):
    events = [parse_event(d) for d in load_lines(name)]
    config = Config()
    expected = load_expected(name)
    whole = Lineage(config)
    for ev in events:
        whole.apply(ev)
    whole.finish_input()
    want = whole.final_state()
    # every boundary; a long vector (14_pbt_cohort) every few, to keep this linear-ish
    stride = max(1, len(events) // 80)
    prefix = Lineage(config)
    for cut in range(len(events) + 1):
        if cut:
            prefix.apply(events[cut - 1])
        if cut % stride and cut != len(events):
            continue
        restored = load_lineage(dump_lineage(prefix), config)
        for ev in events[cut:]:
            restored.apply(ev)
        restored.finish_input()
        got = restored.final_state()
        assert got == want, f"{name}: restored after {cut} event(s) differs"
        assert not mismatches(expected, comparable(got))
        assert commitment_root(restored) == commitment_root(whole)
