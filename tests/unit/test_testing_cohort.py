"""The test-data helpers of streams.testing.cohort model a job client faithfully."""

from streams.testing.cohort import generate_cohorts, interleave_cohorts, seal_events


def release_positions(events):
    """For each event, the position of the seal that releases it (its job's next sealed event)."""
    pending: dict[str, list[int]] = {}
    out = [None] * len(events)
    for i, d in enumerate(events):
        pending.setdefault(d["job_id"], []).append(i)
        if d.get("signature"):
            for k in pending.pop(d["job_id"]):
                out[k] = i
    return out


def test_seal_within_bounds_how_long_an_event_waits_for_its_seal():
    events = interleave_cohorts(list(generate_cohorts(jobs=40, cohort_size=10, steps=120, seed=4)), seed=4)
    loose = list(seal_events(events, every=16))
    tight = list(seal_events(events, every=16, within=50))
    assert all(r is not None for r in release_positions(tight))  # every event is sealed at last
    assert max(r - i for i, r in enumerate(release_positions(loose))) > 50  # the case it is for
    assert max(r - i for i, r in enumerate(release_positions(tight))) <= 50
    assert [d["hash"] for d in loose] == [d["hash"] for d in tight]  # only the seals differ
