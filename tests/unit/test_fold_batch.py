"""``fold_batch`` decodes a record's events first and then folds them (issue 27: the two loops
apart cost less than interleaved). What it folds, publishes and rejects, and the order it tells
the rejects in, must be exactly those of one event at a time: decode, then fold, event by event."""

from __future__ import annotations

from streams.codec import Codec, DecodeError
from streams.core.errors import InvalidEvent
from streams.referee.input import ParsedEvents, fold_batch
from streams.referee.referee import Referee
from streams.testing.cohort import generate_cohorts

CODEC = Codec()
T0 = 1_760_000_000_000


def one_at_a_time(values: list[bytes]) -> tuple[list, list]:
    """The oracle: each routed event decoded and folded before the next is decoded."""
    referee, published, rejects = Referee(), [], []
    for k, value in enumerate(values):
        _name, batch = CODEC.decode_record(value)
        for routed in batch["events"]:
            try:
                event = CODEC.decode_event_typed(routed["value"])
            except (DecodeError, InvalidEvent) as exc:
                rejects.append((routed["offset"], "INVALID_EVENT", str(exc)))
                continue
            handled = referee.handle(batch["cohort_id"], event, T0 + k, 0, True, None, routed)
            result = handled.result
            if not (result.accepted or result.duplicate or result.held) and \
                    not any(r[1] is event for r in result.refused):
                reasons = "; ".join(f"{r}: {d}" for r, d in result.guard) or "rejected by the fold"
                rejects.append((routed["offset"], result.guard[0][0] if result.guard else "REJECTED", reasons))
            for ref, _event, kind, reason in result.refused:
                rejects.append((ref["offset"], kind, reason))
            published.extend(handled.emissions)
        referee.note_input(batch["cohort_id"], 0, k)
    return published, rejects


def batched(values: list[bytes], parsed: ParsedEvents | None = None) -> tuple[list, list]:
    referee, published, rejects = Referee(), [], []
    for k, value in enumerate(values):
        _n, out = fold_batch(CODEC, referee, value, 0, k, T0 + k, True,
                             lambda routed, reason, kind: rejects.append((routed["offset"], kind, reason)), parsed)
        published.extend(out)
    return published, rejects


def damaged_log() -> list[bytes]:
    """EventBatch records of a generated cohort (with its divergences and rollbacks), with bad
    events among the good ones: bytes that do not decode, an event ``parse_event`` refuses, an
    event of a job never started, a conflicting redelivery (refused by the fold), an identical one."""
    dicts = list(generate_cohorts(jobs=12, cohort_size=6, steps=300, seed=5, prefix="f", t0=T0))
    values = [CODEC.encode_event(d) for d in dicts]
    progress = next(d for d in dicts if d["type"] == "Progress")
    bad = [
        b"\x00\x01not an event",
        CODEC.encode_event({**progress, "job_id": "never-started", "seq": 1}),
        CODEC.encode_event({**progress, "loss": 123.0}),  # the same (job, seq), other content
        b"",
    ]
    for i, b in enumerate(bad):
        values.insert(40 + 97 * i, b)
    values.insert(300, values[200])  # an identical redelivery: dropped, not rejected
    values.insert(500, CODEC.encode_event({**progress, "seq": -1}))  # Avro, but parse_event refuses it
    records, offset = [], 0
    for start in range(0, len(values), 64):
        chunk = values[start:start + 64]
        events = [{"partition": 0, "offset": offset + i, "value": v} for i, v in enumerate(chunk)]
        offset += len(chunk)
        records.append(CODEC.encode_record("EventBatch", {"cohort_id": "c-f", "events": events}))
    return records


def test_the_batch_folds_publishes_and_rejects_in_the_order_of_one_event_at_a_time():
    values = damaged_log()
    expected = one_at_a_time(values)
    got = batched(values)
    assert got == expected
    kinds = [kind for _o, kind, _r in expected[1]]
    assert kinds.count("INVALID_EVENT") == 3 and "CONFLICTING_DUPLICATE" in kinds  # undecodable, refused by the fold
    assert any(em.topic == "control" for em in expected[0])


def test_the_same_with_batches_handed_over_by_the_router():
    """Every record whose events all parse handed over with them (as the route stage of the same
    worker writes them), the others read from their bytes: the same calls, records and rejects."""
    values = damaged_log()
    parsed = ParsedEvents()
    handed = 0
    for value in values:
        _name, batch = CODEC.decode_record(value)
        try:
            items = [(r, CODEC.decode_event_typed(r["value"])) for r in batch["events"]]
        except (DecodeError, InvalidEvent):
            continue  # (the router dead-letters such an event: it writes no batch with it)
        parsed.put(value, batch["cohort_id"], items)
        handed += 1
    assert 2 <= handed < len(values)
    assert batched(values, parsed) == one_at_a_time(values)
    assert parsed.hits > 100 and len(parsed) == 0
