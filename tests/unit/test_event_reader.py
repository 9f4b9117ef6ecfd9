"""The hand reader of event bodies (streams.codec.event_reader): ``Codec.decode_event_typed`` is
``parse_event(decode_event(...))`` exactly, whatever the bytes: same event, or the same error."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.codec import CONFLUENT, SINGLE_OBJECT, Codec
from streams.codec.event_reader import event_reader
from streams.codec.schemas import EVENT_RECORD
from streams.core.events import CONSUMPTION_MODES, EVENT_TYPES, FINISH_STATUSES, parse_event
from streams.testing.cohort import generate_cohorts

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def single() -> Codec:
    return Codec(wire_format=SINGLE_OBJECT, registry_url="")


@pytest.fixture(scope="module")
def confluent() -> Codec:
    return Codec(registry_url=f"mock://test-event-reader-{uuid.uuid4().hex}")


def outcome(f, data: bytes):
    """What ``f(data)`` gives: the event, or the error's type and message."""
    try:
        return ("event", repr(f(data)))  # repr: a NaN loss is equal to itself
    except Exception as exc:  # noqa: BLE001
        # (fastavro names the stream it read in its messages: "<_io.BytesIO object at 0x...>")
        return ("error", type(exc).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(exc)), getattr(exc, "reason", None))


def two_steps(codec: Codec):
    return lambda data: parse_event(codec.decode_event(data))


def hand_read(codec: Codec, data: bytes):
    """The hand reader alone (None: it leaves the bytes to the generic way)."""
    try:
        codec.decode_event_typed(data)  # makes the reader
    except Exception:  # noqa: BLE001
        pass
    plan = codec._event_headers[data[:10]] if data[:1] == b"\xc3" else codec._event_headers[data[:5]]
    return plan.typed(data, 10 if data[:1] == b"\xc3" else 5)


def test_the_current_schema_gets_a_reader_of_every_event_type(single):
    reader = event_reader(single.schemas.reader(EVENT_RECORD).raw)
    assert reader is not None
    assert "_new(" in reader.source  # built without __init__
    assert reader.source.count("return e") == len(EVENT_TYPES)


def test_no_event_class_has_a_post_init():
    # the reader builds events without __init__: nothing may hang on it
    for cls in EVENT_TYPES.values():
        assert not hasattr(cls, "__post_init__"), cls


@pytest.mark.parametrize("which", [SINGLE_OBJECT, CONFLUENT])
def test_generated_cohorts_read_alike_and_all_by_hand(single, confluent, which):
    codec = single if which == SINGLE_OBJECT else confluent
    events = list(generate_cohorts(12, 4, seed=7))
    assert {e["type"] for e in events} >= {"JobStarted", "Progress", "CheckpointWritten", "CheckpointConsumed",
                                           "JobFinished"}
    for event in events:
        data = codec.encode_event(event)
        got = codec.decode_event_typed(data)
        assert repr(got) == repr(parse_event(codec.decode_event(data)))
        assert hand_read(codec, data) is not None, event["type"]
        for f in dataclasses.fields(got):
            getattr(got, f.name)  # every slot is set


# -- random events of every type, valid and not ---------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10)
#: strings parse_event may refuse: empty, or with a NUL
_id = st.one_of(st.sampled_from(["", "a\x00b", "job-é"]), _text)
_long = st.one_of(st.integers(-3, 3), st.integers(-(2**63), 2**63 - 1), st.sampled_from([2**62, -(2**62), 1 << 35]))
_int = st.integers(-(2**31), 2**31 - 1)
_double = st.floats(allow_nan=True, allow_infinity=True)
_opt = lambda s: st.none() | s  # noqa: E731

_PAYLOADS = {
    "JobStarted": {"cohort_id": _id, "base_model": _id, "base_checkpoint_id": _opt(_id), "config_hash": _opt(_id),
                   "public_key": _opt(_id)},
    "Progress": {"step": _long, "epoch": _int, "loss": _opt(_double), "grad_norm": _opt(_double),
                 "lr": _opt(_double)},
    "CheckpointWritten": {"checkpoint_id": _id, "step": _long, "epoch": _int, "content_hash": _id, "uri": _id},
    "CheckpointConsumed": {"source_checkpoint_id": _id, "step": _long, "mode": st.sampled_from(CONSUMPTION_MODES)},
    "DivergenceReported": {"onset_step": _long, "detector": _id, "reason": _id},
    "RolledBack": {"restored_checkpoint_id": _opt(_id), "resumed_step": _long, "command_id": _opt(_id),
                   "from_scratch": st.booleans()},
    "JobFinished": {"status": st.sampled_from(FINISH_STATUSES), "final_checkpoint_id": _opt(_id)},
    "CheckpointDeleted": {"checkpoint_id": _id},
}


def test_the_strategy_covers_every_event_type():
    assert set(_PAYLOADS) == set(EVENT_TYPES)


@st.composite
def events(draw):
    t = draw(st.sampled_from(sorted(_PAYLOADS)))
    ev = {"type": t, "job_id": draw(_id), "seq": draw(_long), "incarnation": draw(_int), "ts": draw(_long),
          "prev_hash": draw(_opt(_id)), "hash": draw(_opt(_id)), "signature": draw(_opt(_id))}
    for k, s in _PAYLOADS[t].items():
        ev[k] = draw(s)
    return ev


_FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(event=events(), which=st.sampled_from([SINGLE_OBJECT, CONFLUENT]))
def test_random_events_read_alike(single, confluent, event, which):
    codec = single if which == SINGLE_OBJECT else confluent
    data = codec.encode_event(event)
    assert outcome(codec.decode_event_typed, data) == outcome(two_steps(codec), data)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    event=events(),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), max_size=3),
    cut=st.integers(0, 10_000),
    how=st.sampled_from(["flip", "truncate", "insert", "append", "byte"]),
    junk=st.binary(min_size=1, max_size=8),
)
def test_damaged_bytes_read_alike(single, event, flips, cut, how, junk):
    data = bytearray(single.encode_event(event))
    body = range(10, len(data))  # keep the frame header: the hand reader is behind it
    if how == "flip":
        for pos, bit in flips:
            data[body[pos % len(body)]] ^= 1 << bit
    elif how == "truncate":
        data = data[: 10 + cut % (len(data) - 9)]
    elif how == "insert":
        pos = body[cut % len(body)]
        data = data[:pos] + junk + data[pos:]
    elif how == "append":
        data += junk
    else:
        data[body[cut % len(body)]] = junk[0]
    data = bytes(data)
    assert outcome(single.decode_event_typed, data) == outcome(two_steps(single), data)


@pytest.mark.parametrize("data", [
    b"\xc3\x01" + b"\x00" * 8 + b"\x02a",  # unknown fingerprint
    b"",
    b"\x01",
    b"\x00\x00\x00\x00\x07",
])
def test_what_the_hand_reader_never_sees_raises_as_before(single, data):
    assert outcome(single.decode_event_typed, data) == outcome(two_steps(single), data)
    assert outcome(single.decode_event_typed, data)[0] == "error"


def test_unusual_encodings_go_the_generic_way(single):
    event = {"type": "RolledBack", "job_id": "j", "seq": 3, "incarnation": 1, "ts": 5, "prev_hash": None,
             "hash": None, "restored_checkpoint_id": None, "resumed_step": 2, "command_id": None,
             "from_scratch": True}
    data = single.encode_event(event)
    assert hand_read(single, data) is not None
    # the boolean written as 2: fastavro's business, not the hand reader's
    at = data.rindex(b"\x01")
    odd = data[:at] + b"\x02" + data[at + 1:]
    assert hand_read(single, odd) is None
    assert outcome(single.decode_event_typed, odd) == outcome(two_steps(single), odd)
    # an overlong varint (seq 3 in two bytes)
    seq_at = 10 + 1 + 1  # header, len("j") varint, "j"
    assert data[seq_at] == 6
    long_seq = data[:seq_at] + b"\x86\x00" + data[seq_at + 1:]
    assert outcome(single.decode_event_typed, long_seq) == outcome(two_steps(single), long_seq)
    # parse_event's refusals: the hand reader leaves them to it
    for bad in ({**event, "job_id": ""}, {**event, "seq": -1}, {**event, "restored_checkpoint_id": "c"},
                {**event, "command_id": "a\x00"}):
        data = single.encode_event(bad)
        assert hand_read(single, data) is None
        assert outcome(single.decode_event_typed, data)[0] == "error"
        assert outcome(single.decode_event_typed, data) == outcome(two_steps(single), data)


def test_older_writers_are_read_the_generic_way(single):
    """An event written with an older schema is resolved against the reader's defaults: fastavro's
    work. Its plan has no hand reader, and the golden bytes of every version still decode alike."""
    seen = 0
    for golden in sorted((REPO / "schemas").glob("v*/golden.jsonl")):
        for line in golden.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("record", EVENT_RECORD) != EVENT_RECORD:
                continue
            data = bytes.fromhex(rec["hex"])
            assert outcome(single.decode_event_typed, data) == outcome(two_steps(single), data)
            seen += 1
    assert seen > 20
    current = single.schemas.reader(EVENT_RECORD)
    for plan in single._by_fp.values():
        if plan.name == EVENT_RECORD and plan.raw is not current.raw:
            assert plan.typed is None


def _schema(**changes) -> dict:
    raw = json.loads(json.dumps(Codec(registry_url="").schemas.reader(EVENT_RECORD).raw))
    for name, new_type in changes.items():
        for f in raw["fields"]:
            if f["name"] == name:
                f["type"] = new_type
    return raw


def test_layouts_it_does_not_read_get_no_reader():
    assert event_reader(_schema(seq={"type": "map", "values": "long"})) is None
    assert event_reader(_schema(prev_hash=["null", "string", "long"])) is None
    raw = _schema()
    raw["fields"] = [f for f in raw["fields"] if f["name"] != "payload"] + [{"name": "extra", "type": "long"}]
    assert event_reader(raw) is None


def test_a_branch_it_does_not_read_goes_the_generic_way():
    raw = _schema()
    payload = next(f for f in raw["fields"] if f["name"] == "payload")
    progress = next(b for b in payload["type"] if b["name"] == "Progress")
    progress["fields"][0]["type"] = "string"  # step as a string: not an int field
    reader = event_reader(raw)
    assert reader is not None
    assert reader.source.count("return e") == len(EVENT_TYPES) - 1
