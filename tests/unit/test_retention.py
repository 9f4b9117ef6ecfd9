"""Retention (SPEC §13; streams.core.retention): which checkpoints may be deleted.

The property the section promises: when every event and every divergence keeps the settle
horizon ``H``, no plan ever targets a checkpoint marked deletable earlier. Checked on every
shared vector and on random generated cohorts, with ``H`` the smallest horizon the log keeps
(measured by an oracle over the log), at many points of the fold."""

from __future__ import annotations

import functools
import random

import pytest

from streams.core.decide import Lineage, PlanChanged
from streams.core.events import parse_event
from streams.core.retention import (BASE, LATEST, NEEDED, NOT_SETTLED, SUPERSEDED, TAINTED, deletable,
                                    job_retention, retention)
from streams.testing.cohort import generate_cohorts, interleave_cohorts
from streams.testing.horizon import kept_horizon

from .vectors import load_lines, vector_names

T0 = 1_000_000


def ev(type_, job, seq, ts, inc=0, **f):
    base = {"type": type_, "job_id": job, "seq": seq, "incarnation": inc, "ts": T0 + ts, "prev_hash": None,
            "hash": None}
    return parse_event({**base, **f})


def start(job, ts, base=None):
    return ev("JobStarted", job, 0, ts, cohort_id="c", base_model="m", base_checkpoint_id=base, config_hash=None)


def ckpt(job, seq, ts, step, inc=0):
    return ev("CheckpointWritten", job, seq, ts, inc, checkpoint_id=f"{job}-{step}", step=step, epoch=0,
              content_hash=f"h-{job}-{step}", uri=f"file:///{job}/{step}")


def fold(events):
    lin = Lineage()
    for e in events:
        lin.apply(e)
    return lin.state


def reasons(state, job, w, h):
    return {r.checkpoint_id: r.reason for r in job_retention(state, job, T0 + w, h)}


def test_without_a_horizon_every_checkpoint_is_kept():
    state = fold([start("A", 0), ckpt("A", 1, 10, 10), ckpt("A", 2, 20, 20)])
    assert reasons(state, "A", 10_000, None) == {"A-10": NOT_SETTLED, "A-20": NOT_SETTLED}
    assert deletable(state, T0 + 10_000, None) == set()


def test_a_settled_clean_checkpoint_supersedes_the_older_ones_but_the_latest_is_kept():
    state = fold([start("A", 0), ckpt("A", 1, 10, 10), ckpt("A", 2, 20, 20), ckpt("A", 3, 30, 30)])
    # W = 35, H = 10: are settled (W > ts + H), A-30 is not
    assert reasons(state, "A", 35, 10) == {"A-10": SUPERSEDED, "A-20": NEEDED, "A-30": NOT_SETTLED}
    assert reasons(state, "A", 100, 10) == {"A-10": SUPERSEDED, "A-20": SUPERSEDED, "A-30": LATEST}
    (r,) = [r for r in job_retention(state, "A", T0 + 100, 10) if r.checkpoint_id == "A-10"]
    assert r.by == "A-30" and r.deletable and r.settled and not r.tainted


def test_a_tainted_checkpoint_is_deletable_once_settled():
    state = fold([start("A", 0), ckpt("A", 1, 10, 10), ckpt("A", 2, 20, 20), ckpt("A", 3, 30, 30),
                  ev("DivergenceReported", "A", 4, 40, onset_step=15, detector="x", reason="y")])
    got = reasons(state, "A", 100, 10)
    assert got == {"A-10": NEEDED, "A-20": TAINTED, "A-30": LATEST}


def test_the_base_of_an_incarnation_without_a_settled_clean_checkpoint_of_its_own_is_pinned():
    events = [start("A", 0), ckpt("A", 1, 10, 10), ckpt("A", 2, 20, 20), ckpt("A", 3, 30, 30),
              start("B", 31, base="A-10")]
    state = fold(events)
    assert reasons(state, "A", 100, 10)["A-10"] == BASE
    (r,) = [r for r in job_retention(state, "A", T0 + 100, 10) if r.checkpoint_id == "A-10"]
    assert r.by == "B/0"
    state = fold(events + [ckpt("B", 1, 40, 5)])
    assert reasons(state, "A", 100, 10)["A-10"] == SUPERSEDED  # B has a settled clean one now


# -- the property: with the horizon kept, no plan targets what was marked deletable -----------------


def check_no_plan_targets_a_deleted_checkpoint(events, points: int, rng: random.Random,
                                               horizon: int | None = None) -> int:
    """Fold ``events``, marking what is deletable at ``points`` random events with the horizon
    the log keeps (``horizon``: that horizon, measured already); assert that no plan targets a
    checkpoint marked before. Returns how many plans with a target were made."""
    if horizon is None:
        horizon = kept_horizon(events)
    marks = set(rng.sample(range(len(events)), min(points, len(events))))
    lin = Lineage()
    w = None
    gone: dict[str, int] = {}  # checkpoint -> the event index after which it was deletable
    targets = 0
    for i, e in enumerate(events):
        for d in lin.apply(e):
            if isinstance(d, PlanChanged) and d.plan is not None and d.plan.get("target_checkpoint_id"):
                targets += 1
                t = d.plan["target_checkpoint_id"]
                assert t not in gone, (f"the plan of {d.job_id} targets {t}, deletable since event {gone[t]} "
                                       f"(H = {horizon} ms)")
        w = e.ts if w is None else max(w, e.ts)
        if i in marks:
            for ck in deletable(lin.state, w, horizon):
                gone.setdefault(ck, i)
    for d in lin.finish_input():
        if isinstance(d, PlanChanged) and d.plan is not None:
            assert d.plan.get("target_checkpoint_id") not in gone
    return targets


@pytest.mark.parametrize("name", vector_names())
def test_no_plan_targets_a_checkpoint_deletable_before_on_the_vectors(name):
    events = [parse_event(d) for d in load_lines(name)]
    check_no_plan_targets_a_deleted_checkpoint(events, len(events), random.Random(0))


def caught(make, seeds, points: int) -> bool:
    """Whether the property fails on one of the cohorts ``make(seed)`` (for the checks with
    teeth): stops at the first that fails. ``make`` is cached (``make.horizon(seed)``: the
    horizon its log keeps, measured once a process), as the cohorts are shared with the checks
    that pass."""
    for seed in seeds:
        try:
            check_no_plan_targets_a_deleted_checkpoint(make(seed), points, random.Random(seed), make.horizon(seed))
        except AssertionError:
            return True
    return False


def cached_cohorts(make):
    """``make(seed)`` once a process, as a tuple of events, with ``.horizon(seed)``: the horizon
    its log keeps (:func:`~streams.testing.horizon.kept_horizon`, a fold of its own), also once.
    Several checks here and in ``test_retention_live.py`` run over the same generated cohorts."""
    cohort = functools.cache(lambda seed: tuple(make(seed)))
    cohort.horizon = functools.cache(lambda seed: kept_horizon(cohort(seed)))  # type: ignore[attr-defined]
    functools.update_wrapper(cohort, make)
    return cohort


def late_cohort(seed: int) -> list:
    """A generated cohort whose reported divergences are found late: each ``DivergenceReported``
    names an onset up to 300 steps back, so what the job wrote and others consumed meanwhile
    turns tainted long after it was written (what retention must survive)."""
    rng = random.Random(seed)
    raw = list(generate_cohorts(jobs=rng.randint(4, 12), cohort_size=rng.randint(3, 12), steps=rng.randint(400, 1200),
                                seed=seed, divergence_rate=rng.choice([0.2, 0.4, 0.6]), ckpt_every=rng.choice([20, 50]),
                                exploit_every=rng.choice([20, 40]), exploit_prob=0.7, alias_prob=0.05))
    for d in raw:
        if d["type"] == "DivergenceReported":
            d["onset_step"] = max(10, d["onset_step"] - rng.choice([20, 50, 100, 300]))
    if rng.random() < 0.5:
        raw = interleave_cohorts(raw, seed=seed)
    return [parse_event(d) for d in raw]


late_cohort = cached_cohorts(late_cohort)

#: (seeds, the plans with a target they made in all: the property is not vacuous)
LATE_SEEDS = range(24)


def test_no_plan_targets_a_checkpoint_deletable_before_on_random_cohorts_found_late():
    targets = 0
    for seed in LATE_SEEDS:
        targets += check_no_plan_targets_a_deleted_checkpoint(late_cohort(seed), 80, random.Random(seed),
                                                              late_cohort.horizon(seed))
    assert targets > 50


def test_the_property_catches_a_horizon_cut_short(monkeypatch):
    """The property test has teeth: with checkpoints taken for settled at a quarter of the
    horizon the log keeps, some plan targets a checkpoint marked deletable before."""
    from streams.core import retention as R

    real = R.is_settled
    monkeypatch.setattr(R, "is_settled", lambda ck, w, h: real(ck, w, None if h is None else h // 4))
    assert caught(late_cohort, LATE_SEEDS, 80)


def test_retention_deletes_something_on_a_long_clean_run():
    raw = list(generate_cohorts(jobs=6, cohort_size=6, steps=400, seed=3, divergence_rate=0.0, exploit_prob=0.0))
    events = [parse_event(d) for d in raw]
    state = fold(events)
    w = max(e.ts for e in events)
    statuses = retention(state, w, 1)
    kept = [r for r in statuses.values() if not r.deletable]
    assert len(kept) == 6 and {r.reason for r in kept} == {LATEST}  # one resume point a job


def two_waves(seed: int) -> list:
    """A second wave of jobs joins a cohort midway, each from the latest checkpoint then of a
    first-wave job (what a job can load is what is there), and is contaminated by its peers'
    late-found divergences, often before a checkpoint of its own: its plans restart from those
    bases (what the base pin keeps)."""
    rng = random.Random(seed)
    w1 = list(generate_cohorts(jobs=rng.randint(3, 6), cohort_size=6, steps=rng.randint(300, 600), seed=seed,
                               divergence_rate=0.3, ckpt_every=20, exploit_every=20, exploit_prob=0.7, prefix="a"))
    cohort = w1[0]["cohort_id"]
    t_start = w1[len(w1) // 2]["ts"]
    latest = {d["job_id"]: d["checkpoint_id"] for d in w1 if d["type"] == "CheckpointWritten" and d["ts"] <= t_start}
    w2 = list(generate_cohorts(jobs=rng.randint(3, 6), cohort_size=6, steps=rng.randint(300, 600), seed=seed + 1000,
                               divergence_rate=0.5, ckpt_every=rng.choice([20, 50]), exploit_every=10,
                               exploit_prob=0.9, prefix="b"))
    shift = t_start + 1 - min(d["ts"] for d in w2)
    for d in w2:
        d["ts"] += shift
        if d["type"] == "JobStarted":
            d["cohort_id"] = cohort
            d["base_checkpoint_id"] = latest[rng.choice(sorted(latest))]
    for d in w1 + w2:
        if d["type"] == "DivergenceReported":
            d["onset_step"] = max(10, d["onset_step"] - rng.choice([20, 50, 100]))
    return [parse_event(d) for d in sorted(w1 + w2, key=lambda d: d["ts"])]  # stable: each job's order kept


two_waves = cached_cohorts(two_waves)

WAVE_SEEDS = range(30)


def test_no_plan_targets_a_checkpoint_deletable_before_when_jobs_start_from_others_checkpoints():
    targets = sum(check_no_plan_targets_a_deleted_checkpoint(two_waves(seed), 100, random.Random(seed),
                                                             two_waves.horizon(seed))
                  for seed in WAVE_SEEDS)
    assert targets > 100


def test_the_property_catches_a_missing_base_pin(monkeypatch):
    from streams.core import retention as R

    monkeypatch.setattr(R, "_pinned_bases", lambda *a: {})
    assert caught(two_waves, WAVE_SEEDS, 100)
