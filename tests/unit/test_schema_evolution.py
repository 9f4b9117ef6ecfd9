"""The Avro contract: wire names of SPEC §3/§4, schemas that parse, and BACKWARD_TRANSITIVE
evolution — data written with every version directory of ``schemas/`` decodes with the current
reader."""

from __future__ import annotations

import copy
import json
import math
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from streams.codec import (
    AGENT_RECORDS,
    BAD_BODY,
    EVENT_TYPES,
    NAMESPACE,
    Codec,
    DecodeError,
    EncodeError,
    SchemaSet,
    default_schema_set,
    schema_fingerprint,
)
from streams.codec.examples import example_events, example_records
from streams.codec.golden import GOLDEN_FILE, read_golden, write_with
from streams.codec.schemas import SchemaInfo
from streams.codec.shapes import EventShape, RecordShape
from tests.unit.vectors import scenarios_dir

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"
SCENARIOS = scenarios_dir()

# -- the contract, as SPEC.md writes it ---------------------------------------------------------

ENVELOPE = ["job_id", "seq", "incarnation", "ts", "prev_hash", "hash"]
#: added after SPEC §4 was written: the job's seal (schemas v6, streams.core.seals)
ENVELOPE_LATER = ["signature"]
SPEC4_FIELDS = {
    "JobStarted": ["cohort_id", "base_model", "base_checkpoint_id", "config_hash", "public_key"],  # key: v6
    "Progress": ["step", "epoch", "loss", "grad_norm", "lr"],
    "CheckpointWritten": ["checkpoint_id", "step", "epoch", "content_hash", "uri"],
    "CheckpointConsumed": ["source_checkpoint_id", "step", "mode"],
    "DivergenceReported": ["onset_step", "detector", "reason"],
    "RolledBack": ["restored_checkpoint_id", "resumed_step", "command_id", "from_scratch"],
    "JobFinished": ["status", "final_checkpoint_id"],
    # not in SPEC §4's table: the deletion record of §13 (retention), schemas v9
    "CheckpointDeleted": ["checkpoint_id"],
}
SPEC4_NULLABLE = {
    "prev_hash", "hash", "base_checkpoint_id", "config_hash", "grad_norm", "lr",
    "restored_checkpoint_id", "command_id", "final_checkpoint_id", "public_key",
    "loss",  # schemas v8: progress without a training loss (issue 22)
}
# not nullable, with a default (may be left out): SPEC revision 2, schemas v4
SPEC4_DEFAULTS = {"from_scratch": False}
MODES = ["INIT", "MERGE", "DISTILL", "PBT_EXPLOIT", "REFERENCE", "REPLAY", "EVAL_ONLY", "OTHER"]
STATUSES = ["SUCCEEDED", "FAILED", "CANCELLED"]
AGENT_FIELDS = {
    "RollbackCommand": ["command_id", "job_id", "cohort_id", "incarnation", "action", "target_checkpoint_id",
                        "target_step", "incident_ids", "supersedes", "issued_ts", "commitment_root", "signature", "key_id"],
    "QuarantineNotice": ["command_id", "job_id", "cohort_id", "incarnation", "incident_ids",
                         "quarantined_checkpoint_ids", "supersedes", "issued_ts", "commitment_root", "signature", "key_id"],
    "HaltCommand": ["command_id", "job_id", "cohort_id", "reason", "detail", "seq", "issued_ts", "signature", "key_id"],
    "Alert": ["alert_id", "kind", "cohort_id", "job_id", "checkpoint_id", "incident_id", "message", "details", "ts"],
    "DivergenceManifest": ["incident_id", "version", "cohort_id", "root", "verdict", "attributed_to", "contaminated",
                           "secondary_divergences", "tainted_checkpoints", "plans", "concurrency_snapshot",
                           "commitment_root", "ts"],
    "LineageCommitment": ["cohort_id", "root", "tree_size", "heads", "snapshot", "ts", "signature", "key_id",
                          "log_root", "log_size", "input_partition", "input_offset", "checkpoint"],
    "DeadLetter": ["original_topic", "original_partition", "original_offset", "original_key", "original_value",
                   "reason", "error_kind", "ts"],
}
HALT_REASONS = ["UNREGISTERED", "LEDGER_GAP", "UNTRACEABLE_SOURCE", "CHAIN_BROKEN", "CONFLICTING_DUPLICATE", "RELEASE"]


def _version_dirs() -> list[Path]:
    dirs = sorted((p for p in SCHEMAS.glob("v*") if p.is_dir() and p.name[1:].isdigit()), key=lambda p: int(p.name[1:]))
    assert dirs, "no schemas/v<N>/"
    return dirs


def _scenario_events() -> list[dict]:
    files = sorted(SCENARIOS.glob("*.jsonl"))
    assert files, f"no test vectors under {SCENARIOS}"
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


def _field(record: dict, name: str) -> dict:
    return next(f for f in record["fields"] if f["name"] == name)


def _nullable(ftype: Any) -> bool:
    return isinstance(ftype, list) and "null" in ftype


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


# -- the schemas parse, and say what SPEC says --------------------------------------------------


def test_layout_and_every_file_parses_standalone():
    for vdir in _version_dirs():
        files = sorted(vdir.glob("*.avsc"))
        assert files, vdir
        for f in files:
            raw = json.loads(f.read_text())
            assert raw["type"] == "record" and raw["name"] == f.stem
            assert raw.get("namespace") == NAMESPACE, f"{f}: the namespace must stay {NAMESPACE!r} in every version"
            parsed = parse_schema(raw, named_schemas={})  # self-contained: no outside references
            assert to_parsing_canonical_form(parsed)
    current = _version_dirs()[-1]
    assert {f.stem for f in current.glob("*.avsc")} == {"LineageEvent", *AGENT_RECORDS}


def _strip_docs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_docs(v) for k, v in node.items() if k != "doc"}
    if isinstance(node, list):
        return [_strip_docs(v) for v in node]
    return node


def test_named_types_are_defined_identically_everywhere():
    """A nested type used by several files (ConcurrencyEntry) must have one definition."""
    seen: dict[str, tuple[str, str]] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, list):
            for n in node:
                walk(n, where)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "enum", "fixed"):
                full = f"{node.get('namespace', NAMESPACE)}.{node['name']}"
                text = json.dumps(_strip_docs(node), sort_keys=True)
                if full in seen:
                    assert seen[full][0] == text, f"{full} differs between {seen[full][1]} and {where}"
                seen.setdefault(full, (text, where))
            for key in ("fields", "type", "items", "values"):
                if key in node:
                    walk(node[key], where)

    for vdir in _version_dirs():
        seen.clear()
        for f in vdir.glob("*.avsc"):
            walk(json.loads(f.read_text()), f"{vdir.name}/{f.name}")
    assert f"{NAMESPACE}.ConcurrencyEntry" in seen


def test_event_schema_matches_spec_section_4():
    raw = default_schema_set().reader("LineageEvent").raw
    fields = [f["name"] for f in raw["fields"]]
    assert fields == ENVELOPE + ENVELOPE_LATER + ["payload"]
    assert _field(raw, "seq")["type"] == "long" and _field(raw, "incarnation")["type"] == "int"
    assert _field(raw, "ts")["type"] == "long"
    for h in ("hash", "prev_hash"):
        assert _field(raw, h)["type"] == ["null", "string"] and _field(raw, h)["default"] is None
    branches = _field(raw, "payload")["type"]
    assert [b["name"] for b in branches] == list(SPEC4_FIELDS) == list(EVENT_TYPES)
    for b in branches:
        assert [f["name"] for f in b["fields"]] == SPEC4_FIELDS[b["name"]], b["name"]
        for f in b["fields"]:
            assert _nullable(f["type"]) == (f["name"] in SPEC4_NULLABLE), (b["name"], f["name"])
            if _nullable(f["type"]):
                assert f["type"][0] == "null" and f.get("default", "missing") is None
            if f["name"] in SPEC4_DEFAULTS:
                assert f.get("default", "missing") == SPEC4_DEFAULTS[f["name"]], (b["name"], f["name"])
    mode = _field(branches[3], "mode")["type"]
    assert mode["type"] == "enum" and mode["symbols"] == MODES
    status = _field(branches[6], "status")["type"]
    assert status["type"] == "enum" and status["symbols"] == STATUSES
    types = {b["name"]: {f["name"]: f["type"] for f in b["fields"]} for b in branches}
    assert types["Progress"]["epoch"] == "int" and types["Progress"]["loss"] == ["null", "double"]
    for t, f in [("Progress", "step"), ("CheckpointWritten", "step"), ("CheckpointConsumed", "step"),
                 ("DivergenceReported", "onset_step"), ("RolledBack", "resumed_step")]:
        assert types[t][f] == "long"
    assert types["RolledBack"]["from_scratch"] == "boolean"


def test_agent_records_have_the_agreed_fields():
    schemas = default_schema_set()
    for name, fields in AGENT_FIELDS.items():
        raw = schemas.reader(name).raw
        assert [f["name"] for f in raw["fields"]] == fields, name
    action = _field(schemas.reader("RollbackCommand").raw, "action")["type"]
    assert action["symbols"] == ["ROLLBACK", "RESTART_FROM_BASE", "RESTART_FROM_SCRATCH"]
    assert _field(schemas.reader("HaltCommand").raw, "reason")["type"]["symbols"] == HALT_REASONS
    verdict = _field(schemas.reader("DivergenceManifest").raw, "verdict")["type"]
    assert verdict["symbols"] == ["INTERNAL", "EXTERNAL", "INDETERMINATE"]
    plan = _field(schemas.reader("DivergenceManifest").raw, "plans")["type"]["items"]
    assert [f["name"] for f in plan["fields"]] == [
        "job_id", "incarnation", "action", "target_checkpoint_id", "target_step", "incident_ids",
        "quarantined_checkpoint_ids", "command_id"]


def test_every_key_of_every_test_vector_is_a_schema_field_and_round_trips():
    codec = Codec(registry_url="", wire_format="single-object")
    shape = codec.event_shape
    seen: dict[str, set[str]] = {}
    for event in _scenario_events():
        t = event["type"]
        keys = set(event) - {"type"}
        allowed = set(ENVELOPE) | set(shape.fields_of(t))
        assert keys <= allowed, (t, keys - allowed)
        assert set(SPEC4_FIELDS[t]) <= keys | SPEC4_NULLABLE | set(SPEC4_DEFAULTS)
        back = codec.decode_event(codec.encode_event(event))
        for k in event:
            assert same(back[k], event[k]), (t, k)
        for k, default in SPEC4_DEFAULTS.items():
            if k in SPEC4_FIELDS[t] and k not in event:
                assert back[k] == default, (t, k)
        seen.setdefault(t, set()).update(keys)
    for t, keys in seen.items():
        # public_key (v6) came after the vectors were written: none of them declares a key
        assert keys - {"hash", "prev_hash"} == set(ENVELOPE[:4]) | set(SPEC4_FIELDS[t]) - {"public_key"}, t


def test_fingerprint_is_avro_crc64_of_the_canonical_form():
    # The Avro specification's vector: CRC-64-AVRO of the schema "null" is 7195948357588979594
    # (as a signed 64-bit value); single-object encoding writes it little-endian.
    fp = bytes.fromhex(fingerprint('"null"', "CRC-64-AVRO"))
    assert int.from_bytes(fp, "little", signed=True) == 7195948357588979594
    assert schema_fingerprint("null") == fp
    for info in default_schema_set():
        assert info.fingerprint == schema_fingerprint(info.parsed) == schema_fingerprint(dict(info.raw))


# -- BACKWARD_TRANSITIVE ------------------------------------------------------------------------

_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double"), ("string", "bytes"), ("bytes", "string")}
_PRIMS = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def backward_problems(writer: dict, reader: dict) -> list[str]:
    """What prevents ``reader`` from reading data written with ``writer`` (Avro resolution rules,
    checked on the schemas themselves, recursively)."""
    wnamed: dict[str, Any] = {}
    rnamed: dict[str, Any] = {}
    out: list[str] = []

    def resolve(node, named, ns):
        if isinstance(node, str):
            if node in _PRIMS:
                return node, ns
            full = node if "." in node else f"{ns}.{node}"
            return named.get(full, named.get(node)), ns
        if isinstance(node, dict) and node.get("type") in ("record", "enum", "fixed"):
            full = node["name"] if "." in node["name"] else f"{node.get('namespace', ns)}.{node['name']}"
            named[full] = node
            return node, full.rsplit(".", 1)[0]
        if isinstance(node, dict) and node.get("type") in _PRIMS:
            return node["type"], ns
        return node, ns

    def kind(node):
        if isinstance(node, str):
            return node
        if isinstance(node, list):
            return "union"
        return node["type"]

    def check(w, r, wns, rns, path) -> list[str]:
        w, wns = resolve(w, wnamed, wns)
        r, rns = resolve(r, rnamed, rns)
        wk, rk = kind(w), kind(r)
        if wk == "union":
            probs = []
            for branch in w:
                probs += check(branch, r, wns, rns, path)
            return probs
        if rk == "union":
            for branch in r:
                if not check(w, branch, wns, rns, path):
                    return []
            return [f"{path}: writer {wk} matches no branch of the reader union"]
        if wk in _PRIMS or rk in _PRIMS:
            return [] if wk == rk or (wk, rk) in _PROMOTIONS else [f"{path}: {wk} cannot be read as {rk}"]
        if wk != rk:
            return [f"{path}: {wk} cannot be read as {rk}"]
        if wk in ("record", "enum", "fixed") and w["name"].rsplit(".", 1)[-1] != r["name"].rsplit(".", 1)[-1]:
            return [f"{path}: record {w['name']} read as {r['name']}"]
        if wk == "array":
            return check(w["items"], r["items"], wns, rns, f"{path}[]")
        if wk == "map":
            return check(w["values"], r["values"], wns, rns, f"{path}{{}}")
        if wk == "fixed":
            return [] if w["size"] == r["size"] else [f"{path}: fixed size changed"]
        if wk == "enum":
            missing = set(w["symbols"]) - set(r["symbols"])
            return [] if not missing or "default" in r else [f"{path}: reader lacks symbols {sorted(missing)}"]
        probs = []
        wf = {f["name"]: f for f in w["fields"]}
        for f in r["fields"]:
            sub = f"{path}.{f['name']}" if path else f["name"]
            if f["name"] in wf:
                probs += check(wf[f["name"]]["type"], f["type"], wns, rns, sub)
            elif "default" not in f:
                probs.append(f"{sub}: added without a default")
        return probs

    out += check(writer, reader, NAMESPACE, NAMESPACE, "")
    return out


@pytest.mark.parametrize("vdir", _version_dirs(), ids=lambda p: p.name)
def test_every_version_is_readable_by_the_current_reader(vdir):
    current = default_schema_set()
    for f in sorted(vdir.glob("*.avsc")):
        writer = json.loads(f.read_text())
        problems = backward_problems(writer, dict(current.reader(writer["name"]).raw))
        assert not problems, f"{f}: {problems}"


def test_backward_checker_catches_breaking_changes():
    reader = copy.deepcopy(dict(default_schema_set().reader("Alert").raw))
    assert backward_problems(reader, reader) == []
    reader["fields"].append({"name": "severity", "type": "string"})
    assert backward_problems(dict(default_schema_set().reader("Alert").raw), reader) == ["severity: added without a default"]
    event = copy.deepcopy(dict(default_schema_set().reader("LineageEvent").raw))
    narrowed = copy.deepcopy(event)
    _field(narrowed, "seq")["type"] = "int"
    assert backward_problems(event, narrowed) == ["seq: long cannot be read as int"]
    widened = copy.deepcopy(event)
    _field(widened, "incarnation")["type"] = "long"
    assert backward_problems(event, widened) == []


def _compare_evolved(decoded: dict, expected: dict, reader_defaults: dict[str, Any]) -> None:
    """``decoded`` (current reader) against what the old writer wrote: shared fields equal, fields
    the reader added hold their defaults; fields the reader dropped are gone."""
    for k, v in decoded.items():
        if k in expected:
            assert same(v, expected[k]), (k, v, expected[k])
        else:
            assert same(v, reader_defaults[k]), (k, v)


def _reader_defaults(codec: Codec, name: str, event_type: str | None) -> dict[str, Any]:
    if name == "LineageEvent":
        fields = codec.event_shape.envelope + codec.event_shape.types[event_type][1]
    else:
        fields = codec._shapes[name].fields
    return {f.name: f.default for f in fields if f.has_default}


@pytest.mark.parametrize("vdir", _version_dirs(), ids=lambda p: p.name)
def test_golden_bytes_of_every_version_decode_with_the_current_reader(vdir):
    """Bytes really written by each version when it was cut (``golden.jsonl``)."""
    assert (vdir / GOLDEN_FILE).exists(), f"{vdir}: write its golden file (python -m streams.codec.golden {vdir})"
    codec = Codec(registry_url="", wire_format="single-object")
    golden = read_golden(vdir)
    assert {g["record"] for g in golden} == {f.stem for f in vdir.glob("*.avsc")}
    for g in golden:
        name, back = codec.decode_with_name(g["data"])
        assert name == g["record"]
        _compare_evolved(back, g["expected"], _reader_defaults(codec, name, back.get("type")))


@pytest.mark.parametrize("vdir", _version_dirs(), ids=lambda p: p.name)
def test_data_written_with_every_version_decodes_with_the_current_reader(vdir):
    """Every test vector and example, written now with that version's own schemas."""
    version = int(vdir.name[1:])
    schemas = default_schema_set().version(version)
    assert schemas, vdir
    codec = Codec(registry_url="", wire_format="single-object")
    samples = _scenario_events() + example_events() + example_records()
    written = 0
    shapes: dict[str, EventShape | RecordShape] = {}  # a record's shape in that version, built once
    for s in samples:
        name = "LineageEvent" if s["type"] in EVENT_TYPES else s["type"]
        info = schemas.get(name)
        if info is None:  # the record did not exist in that version
            continue
        shape = shapes.get(name)
        if shape is None:
            shape = shapes[name] = EventShape(info) if name == "LineageEvent" else RecordShape(info)
        try:
            datum = shape.to_avro(s)
        except EncodeError:
            # A field added since: write what that version knew of it.
            try:
                old = set(shape.envelope_names) | set(shape.fields_of(s["type"])) if name == "LineageEvent" \
                    else set(shape.field_names)
            except (KeyError, EncodeError):  # an event type that version did not have
                continue
            try:
                datum = shape.to_avro({k: v for k, v in s.items() if k in old or k == "type"})
            except EncodeError:  # a value that version cannot hold (a null loss before v8)
                continue
        data = write_with(info, datum)
        back = codec.decode(data)
        expected = shape.from_avro(copy.deepcopy(datum)) if name != "LineageEvent" else \
            shape.from_avro({**datum, "payload": datum["payload"]})
        _compare_evolved(back, expected, _reader_defaults(codec, name, back["type"] if name == "LineageEvent" else None))
        written += 1
    assert written >= len(samples) // 2


# -- the mechanism, with versions that do not exist yet ----------------------------------------


def _older_event_schema() -> dict:
    """A plausible earlier LineageEvent: no hash chain, Progress without ``lr``, fewer modes."""
    raw = copy.deepcopy(dict(default_schema_set().reader("LineageEvent").raw))
    raw["fields"] = [f for f in raw["fields"] if f["name"] not in ("hash", "prev_hash")]
    payload = _field(raw, "payload")["type"]
    progress = next(b for b in payload if b["name"] == "Progress")
    progress["fields"] = [f for f in progress["fields"] if f["name"] != "lr"]
    consumed = next(b for b in payload if b["name"] == "CheckpointConsumed")
    mode = _field(consumed, "mode")["type"]
    mode["symbols"] = ["INIT", "MERGE", "DISTILL", "OTHER"]
    mode.pop("default", None)
    return raw


def test_an_older_writer_schema_decodes_with_defaults():
    old = _older_event_schema()
    assert backward_problems(old, dict(default_schema_set().reader("LineageEvent").raw)) == []
    old_info = SchemaInfo.build(old)
    assert old_info.fingerprint != default_schema_set().reader("LineageEvent").fingerprint
    datum = {"job_id": "A", "seq": 3, "incarnation": 0, "ts": 9,
             "payload": ("traintrace.Progress", {"step": 30, "epoch": 1, "loss": 1.5, "grad_norm": None})}
    data = write_with(old_info, datum)

    # Unknown to the shipped schemas...
    plain = Codec(registry_url="", wire_format="single-object")
    with pytest.raises(DecodeError) as info:
        plain.decode_event(data)
    assert info.value.reason == "UNKNOWN_FINGERPRINT"
    # ...known once registered as a writer: read with the current reader, defaults filled in.
    codec = Codec(default_schema_set().with_writers(old), registry_url="", wire_format="single-object")
    assert codec.decode_event(data) == {
        "type": "Progress", "job_id": "A", "seq": 3, "incarnation": 0, "ts": 9, "step": 30, "epoch": 1,
        "loss": 1.5, "grad_norm": None, "lr": None, "hash": None, "prev_hash": None, "signature": None}
    consumed = {"job_id": "A", "seq": 4, "incarnation": 0, "ts": 10,
                "payload": ("traintrace.CheckpointConsumed", {"source_checkpoint_id": "B-1", "step": 31, "mode": "MERGE"})}
    back = codec.decode_event(write_with(old_info, consumed))
    assert back["mode"] == "MERGE" and back["hash"] is None
    # The current writer is unaffected.
    event = example_events()[1]
    assert same(codec.decode_event(codec.encode_event(event)), {"prev_hash": None, "hash": None, **event})


def test_an_older_writer_schema_from_the_schema_registry_decodes_with_defaults():
    from confluent_kafka.schema_registry import Schema

    url = f"mock://evolution-{uuid.uuid4().hex}"
    codec = Codec(registry_url=url)
    old = _older_event_schema()
    sid = codec.registry.client.register_schema("traintrace.LineageEvent-old", Schema(json.dumps(old), "AVRO"))
    datum = {"job_id": "A", "seq": 3, "incarnation": 0, "ts": 9,
             "payload": ("traintrace.Progress", {"step": 30, "epoch": 1, "loss": 1.5, "grad_norm": 2.0})}
    body = write_with(SchemaInfo.build(old), datum)[10:]
    back = codec.decode_event(b"\x00" + sid.to_bytes(4, "big") + body)
    assert back["lr"] is None and back["hash"] is None and back["grad_norm"] == 2.0
    # A registered schema of something else is not ours.
    other = codec.registry.client.register_schema("x", Schema('{"type":"record","name":"x.Y","fields":[]}', "AVRO"))
    with pytest.raises(DecodeError) as info:
        codec.decode(b"\x00" + other.to_bytes(4, "big"))
    assert info.value.reason == "UNKNOWN_SCHEMA_ID"


def test_a_new_version_directory_becomes_the_reader_and_reads_every_older_one(tmp_path):
    shutil.copytree(SCHEMAS / "v1", tmp_path / "v1")
    (tmp_path / "v2").mkdir()
    for f in (SCHEMAS / "v1").glob("*.avsc"):
        raw = json.loads(f.read_text())
        if raw["name"] == "LineageEvent":
            started = next(b for b in _field(raw, "payload")["type"] if b["name"] == "JobStarted")
            started["fields"].append({"name": "host", "type": ["null", "string"], "default": None})
        if raw["name"] == "Alert":
            raw["fields"].append({"name": "severity", "type": "string", "default": "INFO"})
        (tmp_path / "v2" / f.name).write_text(json.dumps(raw))
    v2 = SchemaSet.from_directory(tmp_path)
    assert v2.current_version == 2 and v2.versions == (1, 2)
    assert v2.reader("LineageEvent").version == 2
    assert v2.reader("RollbackCommand").version == 2  # unchanged: same fingerprint as v1
    codec2 = Codec(v2, registry_url="", wire_format="single-object")
    # the v1 writer (the repository's current writer may have evolved LineageEvent since: v4)
    shutil.copytree(SCHEMAS / "v1", tmp_path / "only-v1" / "v1")
    codec1 = Codec(SchemaSet.from_directory(tmp_path / "only-v1"), registry_url="", wire_format="single-object")

    started = {k: v for k, v in example_events()[0].items() if k != "public_key"}  # v1 has no key
    back = codec2.decode_event(codec1.encode_event(started))
    assert back["host"] is None and back["cohort_id"] == started["cohort_id"]
    alert = example_records()[5]
    name, back = codec2.decode_record(codec1.encode_record("Alert", alert))
    assert name == "Alert" and back["severity"] == "INFO" and back["message"] == alert["message"]
    # The new writer writes v2, which the new reader reads back.
    assert codec2.decode_event(codec2.encode_event({**started, "host": "gpu-7"}))["host"] == "gpu-7"
    # v1's golden bytes still decode under the v2 reader.
    for g in read_golden(SCHEMAS / "v1"):
        name, back = codec2.decode_with_name(g["data"])
        _compare_evolved(back, g["expected"], _reader_defaults(codec2, name, back.get("type")))

    # A v3 that breaks BACKWARD compatibility (a field without a default) cannot read v1 data.
    (tmp_path / "v3").mkdir()
    for f in (tmp_path / "v2").glob("*.avsc"):
        raw = json.loads(f.read_text())
        if raw["name"] == "Alert":
            raw["fields"].append({"name": "owner", "type": "string"})
        (tmp_path / "v3" / f.name).write_text(json.dumps(raw))
    v3 = SchemaSet.from_directory(tmp_path)
    assert backward_problems(dict(v3.version(1)["Alert"].raw), dict(v3.reader("Alert").raw)) == [
        "owner: added without a default"]
    codec3 = Codec(v3, registry_url="", wire_format="single-object")
    with pytest.raises(DecodeError) as info:
        codec3.decode_record(codec1.encode_record("Alert", alert))
    assert info.value.reason == BAD_BODY


def test_a_v3_rolled_back_reads_as_not_from_scratch_and_its_chain_still_verifies():
    """SPEC revision 2 added RolledBack.from_scratch in v4. A RolledBack a v3 client wrote — its
    hash over the canonical bytes of before v4, computed here by hand — decodes with the current
    reader as from_scratch false, and the hash still verifies (the canonical bytes leave the
    field out when false)."""
    import hashlib

    from streams.core.chain import verify_link
    from streams.core.events import parse_event

    prev = "cd" * 32
    old_bytes = b"RolledBack\x00B\x007\x001\x001760000000123\x00" + prev.encode() + b"\x00\x000\x00cmd\x00"
    event = {"type": "RolledBack", "job_id": "B", "seq": 7, "incarnation": 1, "ts": 1760000000123,
             "prev_hash": prev, "hash": hashlib.sha256(bytes.fromhex(prev) + old_bytes).hexdigest(),
             "restored_checkpoint_id": None, "resumed_step": 0, "command_id": "cmd"}
    v3 = default_schema_set().version(3)["LineageEvent"]
    data = write_with(v3, EventShape(v3).to_avro(event))
    codec = Codec(registry_url="", wire_format="single-object")
    back = codec.decode_event(data)
    assert back["from_scratch"] is False
    ev = parse_event(back)
    assert ev.from_scratch is False and verify_link(ev, prev) is None
    # the current writer writes v4 or later, with the field
    assert codec.decode_event(codec.encode_event({**event, "from_scratch": True}))["from_scratch"] is True
    assert default_schema_set().reader("LineageEvent").version >= 4
