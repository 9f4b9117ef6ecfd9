"""The route stage hands the events it parsed to the fold stage of the same worker
(streams.referee.input.ParsedEvents, issue 27): an event is decoded once, and what the fold
decides is exactly what it decides after decoding the routed bytes itself (as a replay does)."""

from __future__ import annotations

from streams.codec import Codec
from streams.core.events import parse_event
from streams.referee.input import ParsedEvents, fold_batch
from streams.referee.referee import Referee
from streams.testing.cohort import generate_cohorts
from streams.worker.router import RawRecord, Router

CODEC = Codec()
T0 = 1_760_000_000_000


def routed_batches(parsed: ParsedEvents | None, jobs: int = 60) -> list[bytes]:
    """The EventBatch records a router makes of a generated cohort log, a batch per 50 records."""
    router = Router(CODEC, {}, parsed)
    raws = [RawRecord("lineage.events", 0, i, d["job_id"].encode(), CODEC.encode_event(d))
            for i, d in enumerate(generate_cohorts(jobs=jobs, cohort_size=6, steps=400, seed=3, prefix="p", t0=T0))]
    out = []
    for i in range(0, len(raws), 50):
        routed = router.route(raws[i:i + 50], T0)
        for cohort, events in routed.batches.items():
            out.append(CODEC.encode_record("EventBatch", {"cohort_id": cohort, "events": events}))
    return out


def fold_all(values: list[bytes], parsed: ParsedEvents | None) -> list:
    referee, out = Referee(), []
    for k, value in enumerate(values):
        _n, emissions = fold_batch(CODEC, referee, value, 0, k, T0 + k, True, parsed=parsed)
        out.extend(emissions)
    return out


def test_the_fold_decides_the_same_with_the_routers_parsed_events():
    parsed = ParsedEvents(limit=1_000_000)
    with_handoff = routed_batches(parsed)
    events = len(parsed)
    assert events > 1000
    decided = fold_all(with_handoff, parsed)
    assert parsed.hits == events and parsed.misses == 0 and len(parsed) == 0
    replayed = fold_all(routed_batches(None), None)
    assert decided == replayed and any(em.topic == "control" for em in decided)


def test_an_entry_is_taken_only_for_the_same_bytes():
    parsed = ParsedEvents()
    a = {"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": T0, "cohort_id": "c",
         "base_model": "m", "base_checkpoint_id": None, "config_hash": None}
    b = {**a, "job_id": "B"}
    va, vb = CODEC.encode_event(a), CODEC.encode_event(b)
    parsed.put(0, 5, va, parse_event(a))
    # another record at that position (a partition rewritten, another cluster): decoded from its bytes
    assert parsed.take({"partition": 0, "offset": 5, "value": vb}) is None
    assert parsed.misses == 1 and len(parsed) == 0
    parsed.put(0, 5, va, parse_event(a))
    assert parsed.take({"partition": 1, "offset": 5, "value": va}) is None  # another partition
    assert parsed.take({"partition": 0, "offset": 5, "value": bytes(va)}).job_id == "A"
    assert parsed.take({"partition": 0, "offset": 5, "value": va}) is None  # taken once


def test_the_hand_off_holds_at_most_its_limit_oldest_dropped_first():
    parsed = ParsedEvents(limit=3)
    ev = parse_event({"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": T0,
                      "cohort_id": "c", "base_model": "m", "base_checkpoint_id": None, "config_hash": None})
    for offset in range(5):
        parsed.put(0, offset, b"v", ev)
    assert len(parsed) == 3
    assert parsed.take({"partition": 0, "offset": 1, "value": b"v"}) is None
    assert parsed.take({"partition": 0, "offset": 2, "value": b"v"}) is ev


def test_untaken_entries_are_dropped_a_quarter_at_a_time_newest_kept():
    """Events routed for cohorts another worker folds are never taken: the oldest quarter goes
    at once (one by one, each drop walked past every slot freed before it)."""
    parsed = ParsedEvents(limit=100)
    ev = parse_event({"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": T0,
                      "cohort_id": "c", "base_model": "m", "base_checkpoint_id": None, "config_hash": None})
    for offset in range(1000):
        parsed.put(0, offset, b"v", ev)
        assert 75 <= len(parsed) <= 100 or offset < 100
    assert parsed.take({"partition": 0, "offset": 999, "value": b"v"}) is ev
    assert parsed.take({"partition": 0, "offset": 850, "value": b"v"}) is None
