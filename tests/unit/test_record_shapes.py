"""One declaration per record shape (issue 24): every record kind the processor publishes is a
frozen dataclass of ``streams.records`` whose fields are the newest ``.avsc``'s, in order, with
the same nullability and the same optional fields; every record the codec knows has one."""

from __future__ import annotations

import json
import typing
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from streams.codec import Codec
from streams.records import RECORD_TYPES, typed

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
NEWEST = max((p for p in SCHEMAS.glob("v*") if p.name[1:].isdigit()), key=lambda p: int(p.name[1:]))


def avro_fields(name: str) -> list[dict]:
    return json.loads((NEWEST / f"{name}.avsc").read_text())["fields"]


def test_every_record_the_codec_knows_is_typed():
    assert set(RECORD_TYPES) == set(Codec().record_names)


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_the_dataclass_is_the_schema(name):
    cls = RECORD_TYPES[name]
    hints = typing.get_type_hints(cls)
    ours = [(f.name, type(None) in typing.get_args(hints[f.name]),
             f.default is not MISSING or f.default_factory is not MISSING) for f in fields(cls)]
    theirs = [(f["name"], isinstance(f["type"], list) and "null" in f["type"], "default" in f)
              for f in avro_fields(name)]
    assert [n for n, *_ in ours] == [n for n, *_ in theirs]
    for (n, nullable, optional), (_, a_nullable, a_optional) in zip(ours, theirs):
        assert nullable == a_nullable, f"{name}.{n}: nullable {nullable}, the schema says {a_nullable}"
        # a field the schema gives a default may be left out; ours may also default a nullable
        # one to null, never a required one
        assert optional or not a_optional, f"{name}.{n}: the schema gives a default, the dataclass none"
        assert not optional or a_optional or nullable, f"{name}.{n} has a default the schema does not give"


def test_a_value_round_trips_through_the_codec_and_the_type():
    from streams.codec.examples import example_records

    codec = Codec()
    for example in example_records():
        name = example["type"]
        value = {k: v for k, v in example.items() if k != "type"}
        rec = typed(name, value)
        assert type(rec) is RECORD_TYPES[name]
        back_name, back = codec.decode_record(codec.encode_record(name, rec.to_value()))
        assert back_name == name and typed(name, back) == typed(name, codec.decode_record(
            codec.encode_record(name, value))[1])


def test_the_codec_boundary_takes_and_gives_the_types():
    from streams.codec.examples import example_records

    codec = Codec()
    for example in example_records():
        rec = typed(example["type"], {k: v for k, v in example.items() if k != "type"})
        assert codec.decode_typed(codec.encode_typed(rec)) == rec


def test_the_referee_builds_its_records_through_the_types():
    from streams.core.decide import HaltIssued, PlanChanged
    from streams.referee.records import halt_emission, plan_emission
    from streams.records import HaltCommand, PlanCleared, RollbackCommand

    plan = {"command_id": "c1", "incarnation": 0, "action": "ROLLBACK", "target_checkpoint_id": "a-10",
            "target_step": 10, "incident_ids": ["i1"]}
    em = plan_emission(PlanChanged("a", plan, None), "coh", 0, 5, None)
    assert isinstance(em.typed, RollbackCommand) and em.typed.incident_ids == ("i1",)
    assert em.value["incident_ids"] == ["i1"] and "signature" not in em.value
    cleared = plan_emission(PlanChanged("a", None, "c1"), "coh", 1, 6, None)
    assert isinstance(cleared.typed, PlanCleared) and cleared.typed.supersedes == "c1"
    halt = halt_emission(HaltIssued("a", "coh", "UNREGISTERED", "why", "h1"), 7)
    assert isinstance(halt.typed, HaltCommand) and halt.typed.reason == "UNREGISTERED"
