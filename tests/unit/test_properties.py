"""The final state depends only on which events exist (SPEC §5, §6; DESIGN 'a core that partitions').

Random interleavings that keep each job's own order, random identical redeliveries, and
deciding after every event or once per batch must all give the same output.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.core.decide import Lineage
from streams.core.events import parse_event
from streams.core.project import final_state
from streams.core.state import fold_all
from streams.testing.cohort import generate_cohorts
from streams.testing.cohort import interleave_jobs as interleave

from .vectors import load_lines, vector_names

VECTORS = {name: [parse_event(d) for d in load_lines(name)] for name in vector_names()}
REFERENCE = {name: final_state(fold_all(evs)) for name, evs in VECTORS.items()}

GENERATED = {
    seed: [parse_event(d) for d in generate_cohorts(jobs=12, cohort_size=6, steps=300, seed=seed,
                                                    divergence_rate=0.4, exploit_every=20,
                                                    exploit_prob=0.7, alias_prob=0.15)]
    for seed in range(6)
}
GENERATED_REF = {seed: final_state(fold_all(evs)) for seed, evs in GENERATED.items()}


def run(events, per_event: bool):
    lin = Lineage()
    if per_event:
        for ev in events:
            lin.apply(ev)
    else:
        lin.apply_many(events)
    lin.finish_input()
    return lin.final_state()


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(name=st.sampled_from(sorted(VECTORS)), seed=st.integers(0, 2**32 - 1),
       redeliver=st.sampled_from([0.0, 0.05, 0.3]), per_event=st.booleans())
def test_vectors_any_interleaving_same_answer(name, seed, redeliver, per_event):
    events = interleave(VECTORS[name], random.Random(seed), redeliver)
    assert run(events, per_event) == REFERENCE[name]


@SETTINGS
@given(cohort=st.sampled_from(sorted(GENERATED)), seed=st.integers(0, 2**32 - 1),
       redeliver=st.sampled_from([0.0, 0.1]), per_event=st.booleans())
def test_generated_cohorts_any_interleaving_same_answer(cohort, seed, redeliver, per_event):
    events = interleave(GENERATED[cohort], random.Random(seed), redeliver)
    assert run(events, per_event) == GENERATED_REF[cohort]


@SETTINGS
@given(cohort=st.sampled_from(sorted(GENERATED)), cut=st.floats(0.05, 0.95))
def test_incremental_decisions_match_from_scratch_midway(cohort, cut):
    """After any prefix, the cached projections equal a from-scratch projection of that prefix."""
    events = GENERATED[cohort][: int(len(GENERATED[cohort]) * cut)]
    lin = Lineage()
    for ev in events:
        lin.apply(ev)
    lin.finish_input()
    assert lin.final_state() == final_state(fold_all(events))


def test_generated_cohorts_are_interesting():
    """The generated cohorts exercise incidents, plans and T3 aliases, or the properties say little."""
    incidents = sum(len(r["incidents"]) for r in GENERATED_REF.values())
    plans = sum(len(r["plans"]) for r in GENERATED_REF.values())
    contaminated = sum(len(i["contaminated"]) for r in GENERATED_REF.values() for i in r["incidents"])
    assert incidents >= 6 and plans >= 6 and contaminated >= 3, (incidents, plans, contaminated)
