"""One declaration of each event's shape (issue 24): the dataclasses of ``streams.core.events``.
The validation tables are derived from them, and the newest ``LineageEvent.avsc`` must agree
field for field: the same names in the same order, the same nullability, the same kinds, the
same enumerated values."""

from __future__ import annotations

import json
from pathlib import Path

from streams.core import events as E

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
AVRO_KINDS = {"string": "str", "long": "int", "int": "int", "double": "float", "float": "float", "boolean": "bool"}


def newest() -> dict:
    version = max(int(p.name[1:]) for p in SCHEMAS.glob("v*") if p.name[1:].isdigit())
    return json.loads((SCHEMAS / f"v{version}" / "LineageEvent.avsc").read_text())


def shape(avro_fields: list[dict]) -> dict[str, tuple[object, bool]]:
    out = {}
    for f in avro_fields:
        t = f["type"]
        nullable = isinstance(t, list) and "null" in t
        if isinstance(t, list):
            (t,) = [x for x in t if x != "null"]
        if isinstance(t, dict) and t.get("type") == "enum":
            kind: object = tuple(t["symbols"])
        else:
            kind = AVRO_KINDS[t]
        out[f["name"]] = (kind, nullable)
    return out


def test_the_envelope_is_the_schemas():
    schema = newest()
    envelope = [f for f in schema["fields"] if f["name"] != "payload"]
    assert shape(envelope) == E._ENVELOPE_SPEC
    assert list(shape(envelope)) == list(E._ENVELOPE_SPEC)


def test_every_event_type_is_the_schemas():
    payload = next(f for f in newest()["fields"] if f["name"] == "payload")
    records = {r["name"]: r for r in payload["type"]}
    assert list(records) == list(E.EVENT_TYPES)
    for name, record in records.items():
        got = shape(record["fields"])
        assert got == E._TYPE_SPEC[name], name
        assert list(got) == list(E._TYPE_SPEC[name]), name


def test_the_tables_come_from_the_dataclasses():
    # a nullable field may be absent, but for the loss (null, never absent); from_scratch has a default
    assert E._OPTIONAL == {"prev_hash", "hash", "signature", "public_key", "config_hash", "grad_norm", "lr",
                           "command_id", "final_checkpoint_id", "base_checkpoint_id", "restored_checkpoint_id",
                           "from_scratch"}
    assert E._DEFAULTS == {"from_scratch": False}
