"""The route stage hands the batches it writes, with the events it parsed, to the fold stage of
the same worker (streams.referee.input.ParsedEvents, issue 27): an event is decoded once, a
batch is not read back, and what the fold decides is exactly what it decides after reading the
routed bytes itself (as a replay does)."""

from __future__ import annotations

from streams.codec import Codec
from streams.core.events import parse_event
from streams.referee.input import ParsedEvents, fold_batch
from streams.referee.referee import Referee
from streams.testing.cohort import generate_cohorts
from streams.worker.router import RawRecord, Router

CODEC = Codec()
T0 = 1_760_000_000_000
JOB = {"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": T0, "cohort_id": "c",
       "base_model": "m", "base_checkpoint_id": None, "config_hash": None}


def routed_batches(parsed: ParsedEvents | None, jobs: int = 60, per_batch: int = 1000) -> list[bytes]:
    """The EventBatch records a router writes of a generated cohort log, routing 50 records at a
    time, at most ``per_batch`` events a record."""
    router = Router(CODEC, {}, parsed)
    raws = [RawRecord("lineage.events", 0, i, d["job_id"].encode(), CODEC.encode_event(d))
            for i, d in enumerate(generate_cohorts(jobs=jobs, cohort_size=6, steps=400, seed=3, prefix="p", t0=T0))]
    out = []
    for i in range(0, len(raws), 50):
        out.extend(value for _cohort, value in router.encode(router.route(raws[i:i + 50], T0), per_batch))
    return out


def fold_all(values: list[bytes], parsed: ParsedEvents | None) -> list:
    referee, out = Referee(), []
    for k, value in enumerate(values):
        _n, emissions = fold_batch(CODEC, referee, value, 0, k, T0 + k, True, parsed=parsed)
        out.extend(emissions)
    return out


def test_the_router_writes_the_same_bytes_with_or_without_the_hand_off():
    for per_batch in (1000, 7):
        assert routed_batches(ParsedEvents(limit=1_000_000), per_batch=per_batch) == routed_batches(None, per_batch=per_batch)


def test_the_fold_decides_the_same_with_the_routers_batches():
    for per_batch in (1000, 7):  # (7: a cohort's events of one routing cut into several records)
        parsed = ParsedEvents(limit=1_000_000)
        with_handoff = routed_batches(parsed, per_batch=per_batch)
        events = len(parsed)
        assert events > 1000
        decided = fold_all(with_handoff, parsed)
        assert parsed.hits == events and parsed.misses == 0 and len(parsed) == 0
        replayed = fold_all(routed_batches(None, per_batch=per_batch), None)
        assert decided == replayed and any(em.topic == "control" for em in decided)


def test_a_batch_is_taken_only_for_the_same_bytes_and_once():
    parsed = ParsedEvents()
    a, b = parse_event(JOB), parse_event({**JOB, "job_id": "B"})
    va, vb = CODEC.encode_event(JOB), CODEC.encode_event({**JOB, "job_id": "B"})
    ra, rb = {"partition": 0, "offset": 5, "value": va}, {"partition": 0, "offset": 6, "value": vb}
    batch = CODEC.encode_event_batch("c", [ra, rb])
    parsed.put(batch, "c", [(ra, a), (rb, b)])
    assert len(parsed) == 2
    # another record (other events, another cohort): read from its bytes
    assert parsed.take(CODEC.encode_event_batch("c", [ra])) is None
    assert parsed.take(CODEC.encode_event_batch("d", [ra, rb])) is None
    assert parsed.misses == 2 and len(parsed) == 2
    assert parsed.take(bytes(batch)) == ("c", [(ra, a), (rb, b)])  # equal bytes, another object
    assert parsed.take(batch) is None  # taken once
    assert parsed.hits == 2 and len(parsed) == 0


def test_the_same_bytes_put_twice_are_one_entry():
    parsed = ParsedEvents()
    ev, r = parse_event(JOB), {"partition": 0, "offset": 5, "value": CODEC.encode_event(JOB)}
    batch = CODEC.encode_event_batch("c", [r])
    parsed.put(batch, "c", [(r, ev)])
    parsed.put(batch, "c", [(r, ev)])
    assert len(parsed) == 1 and parsed.take(batch) is not None and len(parsed) == 0


def test_untaken_batches_are_dropped_a_quarter_at_a_time_newest_kept():
    """Batches routed for cohorts another worker folds are never taken: at most ``limit`` events
    are held, the oldest quarter of the batches dropped at once."""
    parsed = ParsedEvents(limit=100)
    ev = parse_event(JOB)
    for offset in range(1000):
        r = {"partition": 0, "offset": offset, "value": b"v"}
        parsed.put(CODEC.encode_event_batch("c", [r, r]), "c", [(r, ev), (r, ev)])
        assert 74 <= len(parsed) <= 100 or offset < 50
    newest = {"partition": 0, "offset": 999, "value": b"v"}
    assert parsed.take(CODEC.encode_event_batch("c", [newest, newest])) is not None
    old = {"partition": 0, "offset": 850, "value": b"v"}
    assert parsed.take(CODEC.encode_event_batch("c", [old, old])) is None
