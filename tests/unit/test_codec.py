"""The codec: round trips of every test vector and agent record in both wire formats, every
malformed kind, strict encoding, and decode's totality under fuzzing."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.codec import (
    BAD_BODY,
    BAD_MAGIC,
    CONFLUENT,
    DECODE_REASONS,
    EMPTY,
    EVENT_TYPES,
    SINGLE_OBJECT,
    TRUNCATED,
    UNKNOWN_FINGERPRINT,
    UNKNOWN_SCHEMA_ID,
    Codec,
    DecodeError,
    EncodeError,
    SchemaRegistryUnavailable,
    decode_event,
    default_schema_set,
    encode_event,
)
from streams.codec.examples import example_events, example_records
from tests.unit.vectors import scenarios_dir

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = scenarios_dir()


def _scenario_files() -> list[Path]:
    files = sorted(SCENARIOS.glob("*.jsonl"))
    assert files, f"no test vectors under {SCENARIOS}"
    return files


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def same(a, b) -> bool:
    """Deep equality where NaN equals NaN (and 2 == 2.0 as usual)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and a == b
    )


def as_decoded(event: dict) -> dict:
    """What decoding an encoded event gives back: the hash fields and ``signature`` (schemas
    v6) present, None when absent; ``RolledBack.from_scratch`` (schemas v4) present, false when
    absent; ``JobStarted.public_key`` (v6) present, None when absent."""
    out = {"prev_hash": None, "hash": None, "signature": None, **event}
    if event.get("type") == "RolledBack":
        out.setdefault("from_scratch", False)
    if event.get("type") == "JobStarted":
        out.setdefault("public_key", None)
    return out


# -- codecs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry_url() -> str:
    return f"mock://test-codec-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def single() -> Codec:
    return Codec(wire_format=SINGLE_OBJECT, registry_url="")


@pytest.fixture(scope="module")
def confluent(registry_url) -> Codec:
    return Codec(registry_url=registry_url)


@pytest.fixture(scope="module", params=[SINGLE_OBJECT, CONFLUENT])
def codec(request, single, confluent) -> Codec:
    return single if request.param == SINGLE_OBJECT else confluent


def test_wire_format_choice(single, confluent, registry_url):
    assert single.wire_format == SINGLE_OBJECT
    assert confluent.wire_format == CONFLUENT
    assert Codec(registry_url=registry_url, wire_format=SINGLE_OBJECT).wire_format == SINGLE_OBJECT
    with pytest.raises(ValueError):
        Codec(wire_format=CONFLUENT, registry_url="")
    with pytest.raises(ValueError):
        Codec(wire_format="json")


def test_registry_url_from_environment(monkeypatch):
    monkeypatch.setenv("TRAINTRACE_SCHEMA_REGISTRY_URL", f"mock://env-{uuid.uuid4().hex}")
    assert Codec().wire_format == CONFLUENT
    monkeypatch.setenv("TRAINTRACE_SCHEMA_REGISTRY_URL", "")
    assert Codec().wire_format == SINGLE_OBJECT


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", _scenario_files(), ids=lambda p: p.stem)
def test_every_test_vector_line_round_trips(codec, path):
    events = _lines(path)
    assert events
    for event in events:
        data = codec.encode_event(event)
        back = codec.decode_event(data)
        assert same(back, as_decoded(event)), (event, back)
        # The generic entry points agree.
        assert same(codec.decode(codec.encode(event)), back)


def test_headers(single, confluent):
    event = example_events()[1]
    info = default_schema_set().reader("LineageEvent")
    data = single.encode_event(event)
    assert data[:2] == b"\xc3\x01" and data[2:10] == info.fingerprint
    data = confluent.encode_event(event)
    sid = confluent.registry.schema_id(info)
    assert data[:1] == b"\x00" and int.from_bytes(data[1:5], "big") == sid
    # Same Avro body after the header, whatever the framing.
    assert single.encode_event(event)[10:] == data[5:]


def test_decoder_reads_both_formats_whatever_it_writes(single, confluent, registry_url):
    event = example_events()[0]
    reader = Codec(registry_url=registry_url, wire_format=SINGLE_OBJECT)
    assert same(reader.decode_event(confluent.encode_event(event)), as_decoded(event))
    assert same(confluent.decode_event(single.encode_event(event)), as_decoded(event))
    # A codec with a fresh registry client of the same URL learns the id from the registry.
    other = Codec(registry_url=registry_url)
    other._by_id.clear()
    assert same(other.decode_event(confluent.encode_event(event)), as_decoded(event))


def test_example_events_round_trip_with_non_finite_floats_and_hashes(codec):
    for event in example_events():
        back = codec.decode_event(codec.encode_event(event))
        assert same(back, as_decoded(event))
    nan_event = next(e for e in example_events() if e["type"] == "Progress" and e["lr"] is None)
    back = codec.decode_event(codec.encode_event(nan_event))
    assert math.isnan(back["loss"]) and back["grad_norm"] == math.inf
    neg = {**nan_event, "loss": -math.inf}
    assert codec.decode_event(codec.encode_event(neg))["loss"] == -math.inf


def test_optional_fields_may_be_left_out(codec):
    event = {"type": "Progress", "job_id": "A", "seq": 1, "incarnation": 0, "ts": 5,
             "step": 10, "epoch": 0, "loss": 1.0}
    back = codec.decode_event(codec.encode_event(event))
    assert back == {**event, "grad_norm": None, "lr": None, "hash": None, "prev_hash": None, "signature": None}
    started = {"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": 1,
               "cohort_id": "c1", "base_model": "m"}
    back = codec.decode_event(codec.encode_event(started))
    assert back["base_checkpoint_id"] is None and back["config_hash"] is None and back["public_key"] is None


@pytest.mark.parametrize("record", example_records(), ids=lambda r: r["type"])
def test_every_agent_record_round_trips(codec, record):
    name = record["type"]
    data = codec.encode_record(name, record)
    got_name, back = codec.decode_record(data)
    assert got_name == name
    assert same(back, record)
    # "type" is optional on encode_record; encode() dispatches on it.
    without = {k: v for k, v in record.items() if k != "type"}
    assert codec.encode_record(name, without) == data
    assert codec.encode(record) == data
    assert same(codec.decode(data), record)


def test_every_record_type_has_an_example(single):
    assert {r["type"] for r in example_records()} == set(single.record_names)
    assert {e["type"] for e in example_events()} == set(EVENT_TYPES) == set(single.event_types)


def test_module_level_functions_use_the_default_codec():
    event = example_events()[3]
    assert same(decode_event(encode_event(event)), as_decoded(event))


# -- malformed input --------------------------------------------------------------------------


def _reason(codec: Codec, data) -> str:
    with pytest.raises(DecodeError) as info:
        codec.decode_event(data)
    assert info.value.reason in DECODE_REASONS
    assert isinstance(info.value, ValueError) and str(info.value)
    return info.value.reason


def test_empty(codec):
    assert _reason(codec, b"") == EMPTY
    assert _reason(codec, None) == EMPTY


def test_bad_magic(codec, single):
    good = single.encode_event(example_events()[1])
    assert _reason(codec, b"\x01" + good[1:]) == BAD_MAGIC
    assert _reason(codec, b"{\"job_id\": 1}") == BAD_MAGIC
    assert _reason(codec, b"\xc3\x02" + good[2:]) == BAD_MAGIC
    assert _reason(codec, b"\xc3\x00") == BAD_MAGIC


def test_unknown_fingerprint(codec, single):
    good = single.encode_event(example_events()[1])
    assert _reason(codec, good[:2] + b"\x00" * 8 + good[10:]) == UNKNOWN_FINGERPRINT
    # A known fingerprint of another record is not an event.
    alert = single.encode_record("Alert", example_records()[5])
    assert _reason(codec, alert) == UNKNOWN_FINGERPRINT
    with pytest.raises(DecodeError) as info:
        codec.decode_record(good)
    assert info.value.reason == UNKNOWN_FINGERPRINT


def test_unknown_schema_id(codec, single, confluent):
    body = single.encode_event(example_events()[1])[10:]
    assert _reason(codec, b"\x00" + (987654).to_bytes(4, "big") + body) == UNKNOWN_SCHEMA_ID
    # Without any registry, Confluent framing cannot be read.
    assert _reason(single, confluent.encode_event(example_events()[1])) == UNKNOWN_SCHEMA_ID
    # The id of another record is not an event.
    alert = confluent.encode_record("Alert", example_records()[5])
    assert _reason(confluent, alert) == UNKNOWN_SCHEMA_ID


def test_truncated_at_every_length(codec):
    for event in example_events() + _lines(_scenario_files()[0])[:5]:
        data = codec.encode_event(event)
        for n in range(1, len(data)):
            assert _reason(codec, data[:n]) == TRUNCATED, (n, data[:n])
    for record in example_records():
        data = codec.encode_record(record["type"], record)
        for n in range(1, len(data)):
            with pytest.raises(DecodeError) as info:
                codec.decode_record(data[:n])
            assert info.value.reason == TRUNCATED


def test_trailing_bytes_and_bad_bodies(codec, single):
    good = codec.encode_event(example_events()[1])
    assert _reason(codec, good + b"\x00") == BAD_BODY
    header = single.encode_event(example_events()[1])[:10]
    # job_id "A", seq 1, incarnation 0, ts 1, hash/prev_hash null, then a payload union index 9 (>6).
    env = b"\x02A\x02\x00\x02\x00\x00"
    assert _reason(single, header + env + b"\x12" + b"\x02x" * 3) == BAD_BODY
    # (The same bad index as the very last byte reads as the end of the data: TRUNCATED.)
    assert _reason(single, header + env + b"\x12") in (BAD_BODY, TRUNCATED)
    # Invalid UTF-8 in job_id.
    assert _reason(single, header + b"\x04\xff\xfe" + env[3:] + b"\x00") == BAD_BODY
    # CheckpointConsumed (branch 3) with an enum index out of range.
    consumed = env + b"\x06" + b"\x02x" + b"\x02" + b"\x40"
    assert _reason(single, header + consumed + b"\x00") == BAD_BODY
    # Negative string length.
    assert _reason(single, header + b"\x03A") in (BAD_BODY, TRUNCATED)


def test_non_bytes_input_is_a_decode_error(codec):
    data = codec.encode_event(example_events()[1])
    assert codec.decode_event(bytearray(data)) == codec.decode_event(memoryview(data)) == codec.decode_event(data)
    assert _reason(codec, "not bytes") == BAD_BODY
    assert _reason(codec, 12) == BAD_BODY


def test_unreachable_registry_is_not_a_decode_error(single):
    # A real client pointed at a closed port: the record may be valid, so no DecodeError.
    codec = Codec(registry_url="http://127.0.0.1:9", registry_config={"max.retries": 0,
                                                                     "timeout": 2},
                  wire_format=SINGLE_OBJECT)
    body = single.encode_event(example_events()[1])[10:]
    with pytest.raises(SchemaRegistryUnavailable):
        codec.decode_event(b"\x00\x00\x00\x00\x07" + body)


# -- strict encoding --------------------------------------------------------------------------


def _field(codec: Codec, event: dict) -> str:
    with pytest.raises(EncodeError) as info:
        codec.encode_event(event)
    assert isinstance(info.value, ValueError)
    return info.value.field


@pytest.fixture
def progress() -> dict:
    return dict(example_events()[1])


def test_encode_missing_and_unknown_type(codec, progress):
    assert _field(codec, {k: v for k, v in progress.items() if k != "type"}) == "type"
    assert _field(codec, {**progress, "type": "Nope"}) == "type"
    assert _field(codec, {**progress, "type": None}) == "type"
    assert _field(codec, {**progress, "type": ["Progress"]}) == "type"


def test_encode_missing_field(codec, progress):
    for key in ("job_id", "seq", "incarnation", "ts", "step", "epoch"):
        assert _field(codec, {k: v for k, v in progress.items() if k != key}) == key
    # a Progress without a loss (schemas v8): null, like the other nullable fields
    back = codec.decode_event(codec.encode_event({k: v for k, v in progress.items() if k != "loss"}))
    assert back["loss"] is None and back["step"] == progress["step"]


def test_encode_wrong_types(codec, progress):
    assert _field(codec, {**progress, "step": "10"}) == "step"
    assert _field(codec, {**progress, "step": 1.5}) == "step"  # fastavro alone truncates it
    assert _field(codec, {**progress, "step": 10.0}) == "step"
    assert _field(codec, {**progress, "seq": True}) == "seq"
    assert _field(codec, {**progress, "incarnation": 2**31}) == "incarnation"
    assert _field(codec, {**progress, "epoch": -(2**31) - 1}) == "epoch"
    assert _field(codec, {**progress, "ts": 2**63}) == "ts"
    assert _field(codec, {**progress, "loss": "nan"}) == "loss"
    assert _field(codec, {**progress, "loss": [1.0]}) == "loss"
    assert _field(codec, {**progress, "grad_norm": "1"}) == "grad_norm"
    assert _field(codec, {**progress, "job_id": 7}) == "job_id"
    assert _field(codec, {**progress, "hash": b"\x00" * 32}) == "hash"
    consumed = example_events()[4]
    assert _field(codec, {**consumed, "mode": "COPY"}) == "mode"
    assert _field(codec, {**consumed, "mode": "init"}) == "mode"
    finished = example_events()[-1]
    assert _field(codec, {**finished, "status": "DONE"}) == "status"
    # Numbers that are exact: an int for a double is fine.
    assert codec.decode_event(codec.encode_event({**progress, "loss": 2}))["loss"] == 2.0


def test_encode_unknown_field(codec, progress):
    assert _field(codec, {**progress, "checkpoint_id": "x"}) == "checkpoint_id"
    assert _field(codec, {**progress, "Loss": 1.0}) == "Loss"


def test_encode_record_errors(codec):
    records: dict[str, dict] = {}
    for r in example_records():
        records.setdefault(r["type"], r)  # the first, fullest example of each
    manifest = records["DivergenceManifest"]

    def field(name, rec):
        with pytest.raises(EncodeError) as info:
            codec.encode_record(name, rec)
        return info.value.field

    assert field("Nope", manifest) == "type"
    assert field("LineageEvent", example_events()[0]) == "type"
    assert field("Alert", manifest) == "type"  # "type" says DivergenceManifest
    assert field("DivergenceManifest", {**manifest, "root": {**manifest["root"], "onset_step": "5"}}) == "root.onset_step"
    bad_plan = {**manifest["plans"][0], "target_step": 1.5}
    assert field("DivergenceManifest", {**manifest, "plans": [bad_plan]}) == "plans[0].target_step"
    assert field("DivergenceManifest", {**manifest, "verdict": "MAYBE"}) == "verdict"
    assert field("DivergenceManifest", {**manifest, "root": {"job_id": "A"}}) == "root.incarnation"
    assert field("DivergenceManifest", {**manifest, "root": {**manifest["root"], "x": 1}}) == "root.x"
    assert field("RollbackCommand", {**records["RollbackCommand"], "action": "QUARANTINE"}) == "action"
    assert field("RollbackCommand", {**records["RollbackCommand"], "incident_ids": "abc"}) == "incident_ids"
    assert field("RollbackCommand", {**records["RollbackCommand"], "incident_ids": ["a", 1]}) == "incident_ids[1]"
    assert field("Alert", {**records["Alert"], "details": {"k": 1}}) == "details['k']"
    assert field("DeadLetter", {**records["DeadLetter"], "original_value": "text"}) == "original_value"
    assert field("HaltCommand", {k: v for k, v in records["HaltCommand"].items() if k != "detail"}) == "detail"
    with pytest.raises(EncodeError) as info:
        codec.encode({"command_id": "x"})
    assert info.value.field == "type"


# -- property tests ---------------------------------------------------------------------------

_ids = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_long = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_int = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_double = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**53), 2**53)
_opt = lambda s: st.none() | s  # noqa: E731

_PAYLOADS = {
    "JobStarted": {"cohort_id": _ids, "base_model": _ids, "base_checkpoint_id": _opt(_ids), "config_hash": _opt(_ids)},
    "Progress": {"step": _long, "epoch": _int, "loss": _double, "grad_norm": _opt(_double), "lr": _opt(_double)},
    "CheckpointWritten": {"checkpoint_id": _ids, "step": _long, "epoch": _int, "content_hash": _ids, "uri": _ids},
    "CheckpointConsumed": {"source_checkpoint_id": _ids, "step": _long,
                           "mode": st.sampled_from(["INIT", "MERGE", "DISTILL", "PBT_EXPLOIT", "REFERENCE",
                                                    "REPLAY", "EVAL_ONLY", "OTHER"])},
    "DivergenceReported": {"onset_step": _long, "detector": _ids, "reason": _ids},
    "RolledBack": {"restored_checkpoint_id": _opt(_ids), "resumed_step": _long, "command_id": _opt(_ids),
                   "from_scratch": st.booleans()},
    "JobFinished": {"status": st.sampled_from(["SUCCEEDED", "FAILED", "CANCELLED"]), "final_checkpoint_id": _opt(_ids)},
}


@st.composite
def events(draw):
    t = draw(st.sampled_from(sorted(_PAYLOADS)))
    ev = {"type": t, "job_id": draw(_ids), "seq": draw(_long), "incarnation": draw(_int), "ts": draw(_long)}
    for k, s in _PAYLOADS[t].items():
        ev[k] = draw(s)
    if draw(st.booleans()):
        ev["prev_hash"] = draw(_opt(_ids))
        ev["hash"] = draw(_opt(_ids))
    return ev


_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(event=events())
def test_property_valid_events_round_trip(single, confluent, event):
    for codec in (single, confluent):
        assert same(codec.decode_event(codec.encode_event(event)), as_decoded(event))


def _decodes_or_decode_error(codec: Codec, data: bytes) -> None:
    try:
        out = codec.decode(data)
    except DecodeError as exc:
        assert exc.reason in DECODE_REASONS
    else:
        assert isinstance(out, dict) and "type" in out
    try:
        codec.decode_event(data)
    except DecodeError:
        pass
    try:
        codec.decode_record(data)
    except DecodeError:
        pass


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_fuzz_arbitrary_bytes(single, confluent, data):
    _decodes_or_decode_error(single, data)
    _decodes_or_decode_error(confluent, data)


_SAMPLES = example_events() + example_records()


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sample=st.sampled_from(_SAMPLES),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), max_size=4),
    cut=st.integers(0, 10_000),
    how=st.sampled_from(["flip", "truncate", "both", "insert", "append"]),
    junk=st.binary(max_size=8),
    which=st.sampled_from([SINGLE_OBJECT, CONFLUENT]),
)
def test_fuzz_mangled_valid_encodings(single, confluent, sample, flips, cut, how, junk, which):
    codec = single if which == SINGLE_OBJECT else confluent
    data = bytearray(codec.encode(sample))
    if how in ("flip", "both"):
        for pos, bit in flips:
            data[pos % len(data)] ^= 1 << bit
    if how in ("truncate", "both"):
        data = data[: cut % (len(data) + 1)]
    if how == "insert":
        pos = cut % (len(data) + 1)
        data[pos:pos] = junk
    if how == "append":
        data += junk
    _decodes_or_decode_error(single, bytes(data))
    _decodes_or_decode_error(confluent, bytes(data))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(default_schema_set().readers)), body=st.binary(max_size=300),
       which=st.sampled_from([SINGLE_OBJECT, CONFLUENT]))
def test_fuzz_known_header_random_body(single, confluent, name, body, which):
    """The reader itself on garbage: a real header of every schema, then random bytes."""
    info = default_schema_set().reader(name)
    if which == SINGLE_OBJECT:
        header = b"\xc3\x01" + info.fingerprint
    else:
        header = b"\x00" + confluent.registry.schema_id(info).to_bytes(4, "big")
    _decodes_or_decode_error(single, header + body)
    _decodes_or_decode_error(confluent, header + body)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | st.binary(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


@_FUZZ
@given(event=events(), key=st.text(min_size=1, max_size=20), value=_json_values, drop=st.booleans())
def test_property_encode_is_strict_and_total(single, event, key, value, drop):
    """Any mutation of a valid event either encodes to what decodes back equal, or is an
    EncodeError: never another exception, never silent loss."""
    keys = sorted(event)
    if drop:
        event.pop(keys[hash(key) % len(keys)], None)
    else:
        target = key if len(key) > 3 else keys[len(key) % len(keys)]
        event[target] = value
    try:
        data = single.encode_event(event)
    except EncodeError:
        return
    back = single.decode_event(data)
    assert set(event) <= set(back)
    # Left-out fields are the nullable ones, which come back null, and from_scratch (v4), false.
    defaults = {k: (False if k == "from_scratch" else None) for k in back}
    assert same(back, {**defaults, **event})
