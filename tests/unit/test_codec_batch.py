"""The hand writer of EventBatch (streams.codec.batch) writes the generic path's bytes, and
leaves to it everything it cannot write plainly."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.codec import Codec, EncodeError
from streams.codec.batch import batch_writer

CODEC = Codec()

routed = st.fixed_dictionaries({
    "partition": st.integers(0, 2**31 - 1),
    "offset": st.integers(0, 2**63 - 1),
    "value": st.binary(max_size=300),
})


def generic(codec: Codec, cohort, events) -> bytes:
    return codec.encode_record("EventBatch", {"cohort_id": cohort, "events": events})


@settings(max_examples=300, deadline=None)
@given(cohort=st.text(max_size=40), events=st.lists(routed, max_size=70))
def test_the_hand_writer_writes_the_generic_bytes(cohort, events) -> None:
    assert CODEC.encode_event_batch(cohort, events) == generic(CODEC, cohort, events)
    assert CODEC.decode_record(CODEC.encode_event_batch(cohort, events))[1]["events"] == events


def test_positions_around_the_varint_boundaries() -> None:
    for n in (0, 1, 63, 64, 127, 128, 8191, 8192, 2**31 - 1, 2**35, 2**63 - 1):
        events = [{"partition": min(n, 2**31 - 1), "offset": n, "value": b"x" * (n % 300)}]
        assert CODEC.encode_event_batch("c", events) == generic(CODEC, "c", events)
    many = [{"partition": 1, "offset": i, "value": b""} for i in range(200)]
    assert CODEC.encode_event_batch("c", many) == generic(CODEC, "c", many)


@pytest.mark.parametrize("bad", [
    {"partition": -1, "offset": 0, "value": b""},
    {"partition": 2**31, "offset": 0, "value": b""},
    {"partition": 0, "offset": -5, "value": b""},
    {"partition": 0, "offset": 2**63, "value": b""},
    {"partition": True, "offset": 0, "value": b""},
    {"partition": 0, "offset": 0, "value": "text"},
    {"partition": 0, "offset": 0},
    {"partition": 0, "offset": 0, "value": b"", "extra": 1},
])
def test_what_it_cannot_write_plainly_gets_the_generic_answer(bad) -> None:
    events = [{"partition": 0, "offset": 1, "value": b"ok"}, bad]
    try:
        expected: bytes | type[Exception] = generic(CODEC, "c", copy.deepcopy(events))
    except EncodeError:
        expected = EncodeError
    if expected is EncodeError:
        with pytest.raises(EncodeError):
            CODEC.encode_event_batch("c", events)
    else:  # e.g. a negative offset is a valid long
        assert CODEC.encode_event_batch("c", events) == expected
    with pytest.raises(EncodeError):
        CODEC.encode_event_batch(7, [])  # type: ignore[arg-type]


def test_another_layout_gets_no_hand_writer() -> None:
    raw = copy.deepcopy(dict(CODEC.schemas.reader("EventBatch").raw))
    assert batch_writer(raw, b"") is not None
    raw["fields"] = raw["fields"][:-1]  # an older EventBatch, without settle_horizon_ms
    assert batch_writer(raw, b"") is None
    raw = copy.deepcopy(dict(CODEC.schemas.reader("EventBatch").raw))
    raw["fields"][1]["type"]["items"]["fields"][0]["type"] = "long"
    assert batch_writer(raw, b"") is None
