"""Golden bytes: records written with one schema version, kept forever.

``schemas/v<N>/golden.jsonl`` holds, one per line, ``{"record": name, "hex": <single-object
bytes>, "expected": <canonical dict>}`` written with the schemas of ``v<N>`` when that version was
cut. Every later reader must still decode them (BACKWARD_TRANSITIVE); the schema-evolution tests
check it. Because the bytes carry the writer's fingerprint, editing a released ``.avsc`` in place
(instead of adding a version) also makes them fail.

Write the file of a new version once, right after adding its directory::

    python -m streams.codec.golden schemas/v2
"""

from __future__ import annotations

import json
import sys
from io import BytesIO
from pathlib import Path
from typing import Any, Iterator

from fastavro import schemaless_writer

from .examples import example_events, example_records
from .schemas import EVENT_RECORD, SchemaInfo, SchemaSet
from .shapes import EventShape, RecordShape
from .wire import single_object_header

GOLDEN_FILE = "golden.jsonl"


def _jsonable(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return {"$bytes": bytes(v).hex()}
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def from_jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"$bytes"}:
            return bytes.fromhex(v["$bytes"])
        return {k: from_jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [from_jsonable(x) for x in v]
    return v


def write_with(info: SchemaInfo, datum: dict[str, Any]) -> bytes:
    bio = BytesIO()
    bio.write(single_object_header(info.fingerprint))
    schemaless_writer(bio, info.parsed, datum)
    return bio.getvalue()


def golden_lines(version_schemas: dict[str, SchemaInfo], samples: list[dict[str, Any]]) -> Iterator[dict]:
    shapes: dict[str, EventShape | RecordShape] = {}
    for name, info in version_schemas.items():
        shapes[name] = EventShape(info) if name == EVENT_RECORD else RecordShape(info)
    for s in samples:
        name = s["type"] if s["type"] in shapes and s["type"] != EVENT_RECORD else EVENT_RECORD
        info = version_schemas[name]
        data = write_with(info, shapes[name].to_avro(s))
        expected = dict(s)
        if name == EVENT_RECORD:
            expected.setdefault("prev_hash", None)
            expected.setdefault("hash", None)
        yield {"record": name, "hex": data.hex(), "expected": _jsonable(expected)}


def write_golden(version_dir: Path, extra_samples: list[dict[str, Any]] | None = None) -> Path:
    version = int(version_dir.name.lstrip("v"))
    schemas = SchemaSet.from_directory(version_dir.parent).version(version)
    samples = example_events() + example_records() + list(extra_samples or [])
    out = version_dir / GOLDEN_FILE
    with out.open("w", encoding="utf-8") as fh:
        for line in golden_lines(schemas, samples):
            fh.write(json.dumps(line, sort_keys=True) + "\n")
    return out


def read_golden(version_dir: Path) -> list[dict[str, Any]]:
    path = version_dir / GOLDEN_FILE
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            out.append({"record": d["record"], "data": bytes.fromhex(d["hex"]),
                        "expected": from_jsonable(d["expected"])})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    vdir = Path(argv[0])
    scen = seed_vector()
    extra = [json.loads(l) for l in scen.read_text().splitlines() if l.strip()]
    print(write_golden(vdir, extra))
    return 0


def seed_vector() -> Path:
    """The shared seed vector the golden files also encode: ``$TRAINTRACE_SCENARIOS`` (as the
    tests read it), else ``../shared/scenarios`` next to the source checkout. A development
    tool: an installed package has no checkout, and then this fails (SystemExit, one line)
    rather than write a golden file without those samples."""
    import os

    env = os.environ.get("TRAINTRACE_SCENARIOS")
    root = Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "scenarios"
    scen = root / "01_seed_example.jsonl"
    if not scen.is_file():
        raise SystemExit(f"error: {scen} not found: python -m streams.codec.golden writes a schemas/v<N>/ "
                         f"golden file of a source checkout next to ../shared/scenarios "
                         f"(or set TRAINTRACE_SCENARIOS)")
    return scen


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
