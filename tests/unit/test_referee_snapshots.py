"""A cohort's snapshot at the referee's level (streams.referee.snapshots): restored at any point,
then fed the rest, a referee decides and holds exactly what an uninterrupted one does."""

from __future__ import annotations

import random

import pytest

from streams.core.events import parse_event
from streams.core.state import Config
from streams.referee import snapshots as images
from streams.referee.referee import Referee
from streams.testing.cohort import generate_cohorts, seal_events

from .vectors import load_lines


def routed(dicts):
    cohort_of: dict[str, str] = {}
    for d in dicts:
        if d["type"] == "JobStarted":
            cohort_of.setdefault(d["job_id"], d["cohort_id"])
        yield cohort_of.get(d["job_id"], ""), parse_event(d)


def feed(referee: Referee, pairs, t0: int, publish=True):
    out = []
    for i, (cohort, ev) in enumerate(pairs):
        out.extend(referee.handle(cohort, ev, t0 + i, partition=0, publish=publish).emissions)
    return out


def cohort_events(seed: int, sealed: bool):
    dicts = list(generate_cohorts(jobs=12, cohort_size=6, steps=160, seed=seed, divergence_rate=0.25,
                                  exploit_every=20, exploit_prob=0.7, alias_prob=0.1))
    if sealed:
        dicts = list(seal_events(dicts, every=5, seed=seed))
    return list(routed(dicts))


def restored_copy(referee: Referee, cohorts) -> Referee:
    other = Referee(referee.config)
    other.published = set(referee.published)
    for c in cohorts:
        images.restore(other, c, 0, images.encode(referee, c))
    return other


@pytest.mark.parametrize("seed,sealed", [(1, False), (2, False), (3, True), (4, True)])
def test_restore_at_random_points_equals_the_uninterrupted_referee(seed, sealed):
    pairs = cohort_events(seed, sealed)
    rng = random.Random(seed)
    for cut in sorted(rng.sample(range(1, len(pairs)), 4)):
        whole = Referee()
        feed(whole, pairs[:cut], 1_000)
        cohorts = sorted(whole.engines)
        encoded = {c: images.encode(whole, c) for c in cohorts}
        again = restored_copy(whole, cohorts)
        assert {c: images.encode(again, c) for c in cohorts} == encoded  # load -> dump: the same bytes
        rest_whole = feed(whole, pairs[cut:], 1_000 + cut)
        rest_again = feed(again, pairs[cut:], 1_000 + cut)
        assert rest_again == rest_whole, f"cut {cut}: the decisions after the restore differ"
        assert again.final_state() == whole.final_state()
        for c in sorted(whole.engines):
            assert images.encode(again, c) == images.encode(whole, c), f"cut {cut}: cohort {c}"


def test_a_restored_cohort_reconciles_what_the_control_topic_lacks():
    lines = load_lines("14_pbt_cohort")
    pairs = list(routed(lines))
    whole = Referee()
    out = feed(whole, pairs, 1_000)
    published = {em.command_id for em in out if em.command_id}
    again = Referee()
    for c in whole.engines:
        images.restore(again, c, 0, images.encode(whole, c))
    again.published = set(published)
    assert [em for em in again.reconcile(0, {}, 0) if em.command_id] == []
    again.published = set()
    assert {em.command_id for em in again.reconcile(0, {}, 0) if em.command_id} >= {
        whole.decided_plan[j].command_id for j in whole.decided_plan if whole.decided_plan[j].record != "PlanCleared"}


def test_a_settled_cohort_leaves_memory_and_comes_back_on_its_next_input():
    pairs = cohort_events(5, False)
    last_of = {}
    for i, (c, ev) in enumerate(pairs):
        last_of[c] = i
    whole, lazy = Referee(), Referee()
    stored: dict[str, bytes] = {}
    lazy.restorer = lambda c: c in stored and images.restore(lazy, c, 0, stored.pop(c)) is not None
    for i, (cohort, ev) in enumerate(pairs):
        a = whole.handle(cohort, ev, 1_000 + i, partition=0).emissions
        b = lazy.handle(cohort, ev, 1_000 + i, partition=0).emissions
        assert a == b
        for c in list(lazy.engines):  # every settled cohort leaves memory at once
            if images.settled(lazy.engines[c]):
                stored[c] = images.encode(lazy, c)
                lazy.forget_cohorts([c])
    for c in list(stored):
        lazy.engine(c)
    assert lazy.final_state() == whole.final_state()


def test_settled_means_finished_and_acknowledged():
    pairs = cohort_events(6, False)
    ref = Referee()
    feed(ref, pairs, 1_000)
    for c, lin in ref.engines.items():
        finished = all(j.current is not None and j.current.finished for j in lin.state.jobs.values())
        if not finished:
            assert not images.settled(lin)


def test_a_tampered_image_is_refused():
    pairs = cohort_events(7, False)
    ref = Referee()
    feed(ref, pairs, 1_000)
    c = sorted(ref.engines)[0]
    enc = images.encode(ref, c)
    assert images.verify(enc, images.digest(enc)) == enc
    with pytest.raises(images.SnapshotRejected):
        images.verify(enc, images.digest(enc + b"x"))
    with pytest.raises(images.SnapshotRejected):
        images.verify(enc[:-1], images.digest(enc))
    with pytest.raises(images.SnapshotRejected):
        images.restore(Referee(), "another cohort", 0, enc)
    with pytest.raises(images.SnapshotRejected):
        images.restore(Referee(), c, 0, enc[: len(enc) // 2])


def test_the_config_is_the_restoring_referees():
    pairs = cohort_events(8, False)
    ref = Referee(Config(window=7))
    feed(ref, pairs, 1_000)
    c = sorted(ref.engines)[0]
    other = Referee(Config(window=7))
    lin = images.restore(other, c, 0, images.encode(ref, c))
    assert lin.config is other.config


def test_other_tunables_are_refused():
    pairs = cohort_events(9, False)
    ref = Referee(Config(window=7))
    feed(ref, pairs, 1_000)
    c = sorted(ref.engines)[0]
    with pytest.raises(images.SnapshotRejected, match="tunables"):
        images.restore(Referee(Config(window=8)), c, 0, images.encode(ref, c))


def test_the_bytes_do_not_depend_on_whether_redelivered_events_are_one_object_or_two():
    """The audit hands the fold one event object per logged record, so a redelivered copy is
    the same object; a worker decodes each copy anew. Held events (sealed jobs) keep them:
    the snapshot must not tell the two apart (events are written as values)."""
    dicts = list(seal_events(generate_cohorts(jobs=6, cohort_size=6, steps=80, seed=11), every=7, seed=11))
    pairs = list(routed(dicts))
    shared, fresh = Referee(), Referee()
    for i, (c, ev) in enumerate(pairs):
        again = pairs[max(0, i - 3)][1]  # a redelivery of an event three back, now and then
        for r, e in ((shared, ev), (fresh, ev)):
            r.handle(c, e, 1_000 + i, partition=0)
        if i % 5 == 0:
            shared.handle(c, again, 1_000 + i, partition=0)
            fresh.handle(c, parse_event(dicts[max(0, i - 3)]), 1_000 + i, partition=0)
        if i % 9 == 0:
            for cohort in shared.engines:
                assert images.encode(shared, cohort) == images.encode(fresh, cohort), (i, cohort)
