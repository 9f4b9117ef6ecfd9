"""The hand writer of flat records (streams.codec.record_writer): ``Codec.encode_record`` gives
the bytes of the generic path (the shape check, then fastavro) whatever the record, or leaves it
to that path, which raises as before."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.codec import SINGLE_OBJECT, Codec, EncodeError
from streams.codec.examples import example_records
from streams.codec.record_writer import record_writer


@pytest.fixture(scope="module")
def single() -> Codec:
    return Codec(wire_format=SINGLE_OBJECT, registry_url="")


def generic(codec: Codec, name: str, record: dict) -> Any:
    """What the generic path gives: the bytes, or the EncodeError's message."""
    try:
        return codec._write(codec.schemas.reader(name), codec._shapes[name].to_avro(record))
    except EncodeError as exc:
        return ("EncodeError", _plain(str(exc)))


def _plain(message: str) -> str:
    """A message without the addresses of objects in it (they differ from call to call)."""
    return re.sub(r" at 0x[0-9a-f]+", "", message)


def writer_of(codec: Codec, name: str):
    return record_writer(codec.schemas.reader(name).raw, codec._headers[name])


WRITTEN = ("CheckpointStatus", "CohortSnapshot", "DeadLetter", "DivergenceManifest", "EventBatch", "HaltCommand",
           "LineageCommitment", "PlanCleared", "QuarantineNotice", "RetentionNotice", "RollbackCommand",
           "SnapshotRound")


def test_which_records_are_written_by_hand(single):
    have = {n for n in single.record_names if writer_of(single, n) is not None}
    assert have == set(WRITTEN)  # maps (Alert's details): the generic way


def test_every_example_record_writes_alike(single):
    seen = set()
    for rec in example_records():
        name = rec["type"]
        w = writer_of(single, name)
        if w is None:
            continue
        seen.add(name)
        got = w(rec)
        assert got is not None, name
        assert got == generic(single, name, rec)
        assert single.encode_record(name, rec) == got
    assert seen == set(WRITTEN)


# -- random records of every written schema ------------------------------------------------------

def _resolve(schema, named):
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, dict) and schema.get("type") in ("enum", "record"):
        named[schema["name"]] = schema
        named[schema["name"].rsplit(".", 1)[-1]] = schema
    return schema


_WRONG = st.sampled_from([None, 1, 1.5, True, "s", b"b", [], (), {}, 2**70, -(2**70)])


def _valid(schema, named):
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        return st.one_of(*[_valid(s, named) for s in schema])
    if isinstance(schema, dict):
        t = schema["type"]
        if t == "enum":
            return st.sampled_from(schema["symbols"]) | st.just("NOT_A_SYMBOL")
        if t == "array":
            return st.lists(_valid(schema["items"], named), max_size=4) | \
                st.tuples(_valid(schema["items"], named)) | st.lists(_WRONG, min_size=1, max_size=2)
        if t == "record":  # a nested record: its fields valid, missing or wrong, an extra key now and then
            return _fields_of(_plan(schema["fields"], named), schema["name"])
        schema = t
    return {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(-(2**31) - 2, 2**31 + 1) | st.integers(-5, 200),
        "long": st.integers(-(2**63) - 2, 2**63 + 1) | st.integers(-5, 200) | st.just(1_760_000_000_000),
        "double": st.floats(allow_nan=True) | st.integers(-3, 3),
        "float": st.floats(allow_nan=True, width=32),
        "string": st.text(max_size=8) | st.just("\ud800"),
        "bytes": st.binary(max_size=8) | st.just(bytearray(b"x")),
    }[schema]


def _plan(fields, named) -> list:
    """Each field's name and the strategy of its valid values, made once (in order: a field
    names the enums and records defined in it, and later fields use them)."""
    return [(f["name"], _valid(f["type"], named)) for f in fields]


_MODE = st.sampled_from(["valid"] * 8 + ["missing", "wrong"])


def _fields(draw, plan) -> dict:
    rec: dict = {}
    for name, valid in plan:
        mode = draw(_MODE)
        if mode == "valid":
            rec[name] = draw(valid)
        elif mode == "wrong":
            rec[name] = draw(_WRONG)
    return rec


def _fields_of(plan, record_name: str):
    @st.composite
    def nested(draw):
        rec = _fields(draw, plan)
        extra = draw(st.sampled_from([None] * 6 + ["type", "unknown"]))
        if extra == "type":
            rec["type"] = record_name
        elif extra == "unknown":
            rec["no_such_field"] = 1
        return rec
    return nested()


def records(name: str, raw: dict):
    plan = _plan(raw["fields"], {})

    @st.composite
    def record(draw):
        rec = _fields(draw, plan)
        extra = draw(st.sampled_from([None] * 6 + ["type", "wrong-type", "unknown"]))
        if extra == "type":
            rec["type"] = name
        elif extra == "wrong-type":
            rec["type"] = "Alert"
        elif extra == "unknown":
            rec["no_such_field"] = 1
        return rec
    return record()


@pytest.mark.parametrize("name", WRITTEN)
def test_random_records_write_alike_or_go_the_generic_way(single, name):
    raw = json.loads(json.dumps(single.schemas.reader(name).raw))
    w = writer_of(single, name)
    hand_written = []

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
    @given(rec=records(name, raw))
    def check(rec):
        got = w(rec)
        want = generic(single, name, rec)
        if got is not None:
            hand_written.append(1)
            assert got == want
        encoded = None
        try:
            encoded = single.encode_record(name, rec)
        except EncodeError as exc:
            assert want == ("EncodeError", _plain(str(exc)))
        else:
            assert encoded == want

    check()
    assert hand_written  # the valid ones were written by hand


def test_a_confluent_codec_writes_by_hand_once_its_schema_is_registered():
    codec = Codec(registry_url=f"mock://test-record-writer-{uuid.uuid4().hex}")
    rec = next(r for r in example_records() if r["type"] == "CheckpointStatus")
    assert "CheckpointStatus" not in codec._record_writers
    first = codec.encode_record("CheckpointStatus", rec)  # the generic path registers the schema
    assert first[:1] == b"\x00"
    assert codec.encode_record("CheckpointStatus", rec) == first
    assert codec._record_writers["CheckpointStatus"]
    assert codec.decode_record(first)[1]["checkpoint_id"] == rec["checkpoint_id"]


def test_schemas_of_other_kinds_get_no_writer():
    base = {"type": "record", "name": "R", "fields": []}
    assert record_writer({**base, "fields": [{"name": "m", "type": {"type": "map", "values": "string"}}]}, b"") is None
    assert record_writer({**base, "fields": [{"name": "u", "type": ["null", "string", "long"]}]}, b"") is None
    assert record_writer({**base, "fields": [{"name": "type", "type": "string"}]}, b"") is None
    nested = {"type": "record", "name": "In", "fields": [{"name": "m", "type": {"type": "map", "values": "long"}}]}
    assert record_writer({**base, "fields": [{"name": "n", "type": nested}]}, b"") is None
    assert record_writer({**base, "fields": [{"name": "a", "type": {"type": "array", "items": nested}}]}, b"") is None
    w = record_writer({**base, "fields": [{"name": "a", "type": "long"}]}, b"H")
    assert w({"a": 1}) == b"H\x02" and w({"a": 1.0}) is None and w({}) is None and w({"a": 1, "b": 2}) is None


def test_what_the_referee_publishes_writes_alike(single):
    """The records a fold of a generated cohort (divergences, rollbacks, PBT copies) publishes,
    commitments included, nested ones (manifests, commitments) among them: by hand, the same
    bytes as the generic way."""
    from streams.core.events import parse_event
    from streams.referee.referee import Referee
    from streams.testing.cohort import generate_cohorts

    referee, published = Referee(), []
    for i, d in enumerate(generate_cohorts(jobs=40, cohort_size=8, steps=400, seed=7, prefix="w")):
        published.extend(referee.handle(f"c-{d['job_id'][:4]}", parse_event(d), 1_760_000_000_000 + i, 0).emissions)
    published.extend(referee.commitments(1_760_000_100_000))
    names = {em.record for em in published}
    assert {"DivergenceManifest", "LineageCommitment", "CheckpointStatus", "RollbackCommand"} <= names
    by_hand = 0
    for em in published:
        w = writer_of(single, em.record)
        got = w(em.value) if w is not None else None
        if got is not None:
            by_hand += 1
            assert got == generic(single, em.record, em.value), em.record
    assert by_hand >= len(published) - sum(em.record == "Alert" for em in published)
