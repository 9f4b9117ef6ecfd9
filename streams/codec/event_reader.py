"""A reader of one event body straight to its typed event, by hand (issue 27).

Every event the worker routes and the audit reads from Kafka went through two steps:
fastavro's ``schemaless_reader`` into the flat dict (6.6 µs an event), then
:func:`~streams.core.events.parse_event`, which checks every field and builds the frozen event
(4.5 µs). :func:`event_reader` writes, once per writer schema, one Python function that reads the
Avro body and checks each field the way ``parse_event`` does, in one pass (3.6 µs).

It returns exactly what the two steps return (``tests/unit/test_event_reader.py`` holds them equal
on generated cohorts, on random events of every type and on damaged bytes), because it takes only
what it can read without doubt: a union or enum index out of range, a varint of more than nine
bytes, a boolean byte other than 0 or 1, bytes that are not UTF-8, a value ``parse_event`` would
refuse, a byte left over: on anything of the kind it returns None, and the caller goes the two-step
way, which raises the precise :class:`~streams.codec.errors.DecodeError` or
:class:`~streams.core.errors.InvalidEvent`. A writer schema with a type it does not read (a map,
an array, a union of two non-null types, a field of another type than the event's) gets no reader
for that event type, or none at all.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Mapping

from streams.core.events import EVENT_TYPES, Event, field_plan, nonempty_fields, nonnegative_fields

from .codegen import SourceWriter
from .codegen import Unsupported as _Unsupported

#: what the reader returns: the event, or None (read it the generic way)
EventReader = Callable[[bytes, int], "Event | None"]

_DOUBLE = struct.Struct("<d").unpack_from
_FLOAT = struct.Struct("<f").unpack_from
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


class _Gen(SourceWriter):
    """Writes the source of one reader."""

    # -- one value ------------------------------------------------------------------------------

    def long(self, ind: int, var: str) -> None:
        """A zig-zag varint, inline (a call per value cost more than the loop)."""
        self.emit(ind, "b = data[pos]; pos += 1")
        self.emit(ind, "if b < 128:")
        self.emit(ind + 1, f"{var} = (b >> 1) ^ -(b & 1)")
        self.emit(ind, "else:")
        self.emit(ind + 1, "u = b & 127; shift = 7")
        self.emit(ind + 1, "while True:")
        self.emit(ind + 2, "b = data[pos]; pos += 1")
        self.emit(ind + 2, "u |= (b & 127) << shift")
        self.emit(ind + 2, "if b < 128:")
        self.emit(ind + 3, "break")
        self.emit(ind + 2, "shift += 7")
        self.emit(ind + 2, "if shift > 56:")
        self.emit(ind + 3, "return None  # more than nine bytes")
        self.emit(ind + 1, f"{var} = (u >> 1) ^ -(u & 1)")

    def value(self, ind: int, var: str, schema: Any, namespace: str | None) -> str:
        """Read one value of ``schema`` into ``var``; returns its kind: "string", "long", "int",
        "double", "float", "boolean", ("enum", symbols) or ("null", kind) for a nullable one."""
        schema = self.resolve(schema, namespace)
        if isinstance(schema, list):
            null_at, other = self.nullable(schema, namespace)
            # the index is 0 or 1, one byte (zig-zag 0 or 2); anything else goes the generic way
            self.emit(ind, "b = data[pos]; pos += 1")
            self.emit(ind, f"if b == {2 * null_at}:")
            self.emit(ind + 1, f"{var} = None")
            self.emit(ind, f"elif b == {2 * (1 - null_at)}:")
            kind = self.value(ind + 1, var, other, namespace)
            self.emit(ind, "else:")
            self.emit(ind + 1, "return None")
            return ("null", kind)  # type: ignore[return-value]
        if schema in ("long", "int"):
            self.long(ind, var)
            if schema == "int":
                self.emit(ind, f"if not {_INT_MIN} <= {var} <= {_INT_MAX}:")
                self.emit(ind + 1, "return None")
            return schema
        if schema == "string":
            self.long(ind, "n")
            self.emit(ind, "end = pos + n")
            self.emit(ind, "if n < 0 or end > size:")
            self.emit(ind + 1, "return None")
            self.emit(ind, f"{var} = data[pos:end].decode()")
            self.emit(ind, "pos = end")
            return "string"
        if schema == "double":
            self.emit(ind, f"{var} = _DOUBLE(data, pos)[0]; pos += 8")
            return "double"
        if schema == "float":
            self.emit(ind, f"{var} = _FLOAT(data, pos)[0]; pos += 4")
            return "float"
        if schema == "boolean":
            self.emit(ind, "b = data[pos]; pos += 1")
            self.emit(ind, "if b == 0:")
            self.emit(ind + 1, f"{var} = False")
            self.emit(ind, "elif b == 1:")
            self.emit(ind + 1, f"{var} = True")
            self.emit(ind, "else:")
            self.emit(ind + 1, "return None")
            return "boolean"
        if isinstance(schema, Mapping) and schema.get("type") == "enum":
            symbols = tuple(schema["symbols"])
            self.long(ind, "i")
            self.emit(ind, f"if not 0 <= i < {len(symbols)}:")
            self.emit(ind + 1, "return None")
            self.emit(ind, f"{var} = {self.const(symbols)}[i]")
            return ("enum", symbols)  # type: ignore[return-value]
        raise _Unsupported(f"type {schema!r}")

    # -- the checks of parse_event --------------------------------------------------------------

    def check(self, ind: int, name: str, var: str, avro_kind: Any, kind: Any, nullable: bool) -> None:
        """The checks ``parse_event`` makes of field ``name`` (dataclass kind ``kind``), on a
        value read as ``avro_kind``: each failure returns None."""
        avro_nullable = isinstance(avro_kind, tuple) and avro_kind[0] == "null"
        base = avro_kind[1] if avro_nullable else avro_kind
        fits = {
            "str": base == "string",
            "int": base in ("long", "int"),
            "float": base in ("double", "float"),
            "bool": base == "boolean",
        }
        if isinstance(kind, tuple):
            ok = base == "string" or (isinstance(base, tuple) and base[0] == "enum")
        else:
            ok = fits[kind]
        if not ok:
            raise _Unsupported(f"field {name}: {base!r} is not read as {kind!r}")
        tests: list[str] = []
        if kind == "str":
            tests.append(f"'\\x00' in {var}")
            if name in nonempty_fields():
                tests.append(f"not {var}")
        elif kind == "int":
            if name in nonnegative_fields():
                tests.append(f"{var} < 0")
        elif isinstance(kind, tuple):
            tests.append(f"{var} not in {self.const(frozenset(kind))}")
        if avro_nullable:
            if not nullable:
                self.emit(ind, f"if {var} is None:")
                self.emit(ind + 1, "return None")
            elif tests:
                tests = [f"({var} is not None and ({' or '.join(tests)}))"]
        if tests:
            self.emit(ind, f"if {' or '.join(tests)}:")
            self.emit(ind + 1, "return None")


def _fields(record: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return [(f["name"], f["type"]) for f in record.get("fields", ())]


def event_reader(raw: Mapping[str, Any]) -> EventReader | None:
    """The reader of event bodies written with ``raw`` (the writer's ``LineageEvent`` schema, as
    JSON; each payload record's short name is its event type), or None if the schema has a layout
    it does not read. The reader takes the bytes and the position of the body in them."""
    try:
        return _build(raw)
    except _Unsupported:
        return None


def _build(raw: Mapping[str, Any]) -> EventReader:
    g = _Gen()
    namespace = raw.get("namespace")
    envelope = _fields(raw)
    if [n for n, _ in envelope].count("payload") != 1 or envelope[-1][0] != "payload":
        raise _Unsupported("the payload is not the last field")
    payload = envelope.pop()[1]
    if not isinstance(payload, list):
        raise _Unsupported("the payload is not a union")
    g.emit(0, "def read(data, pos):")
    g.emit(1, "size = len(data)")
    g.emit(1, "try:")
    ind = 2
    env_kinds: dict[str, Any] = {}
    for name, schema in envelope:
        env_kinds[name] = g.value(ind, f"v_{name}", schema, namespace)
    g.long(ind, "branch")
    branches = [g.resolve(s, namespace) for s in payload]
    supported = 0
    for index, branch in enumerate(branches):
        if not (isinstance(branch, Mapping) and branch.get("type") == "record"):
            raise _Unsupported("a payload branch is not a record")
        g.emit(ind, f"{'if' if index == 0 else 'elif'} branch == {index}:")
        body_start = len(g.lines)
        try:
            _branch(g, ind + 1, branch, env_kinds, namespace)
            supported += 1
        except _Unsupported:
            del g.lines[body_start:]
            g.emit(ind + 1, "return None")
    g.emit(ind, "else:")
    g.emit(ind + 1, "return None")
    g.emit(1, "except Exception:")
    g.emit(2, "return None")
    if not supported:
        raise _Unsupported("no payload branch is read")
    return g.compile("event reader", {"_new": object.__new__, "_DOUBLE": _DOUBLE, "_FLOAT": _FLOAT})


def _branch(g: _Gen, ind: int, record: Mapping[str, Any], env_kinds: dict[str, Any], namespace: str | None) -> None:
    etype = record["name"].rsplit(".", 1)[-1]
    cls = EVENT_TYPES.get(etype)
    if cls is None:
        raise _Unsupported(f"no event type {etype!r}")
    ns = record.get("namespace", namespace)
    kinds = dict(env_kinds)
    for fname, schema in _fields(record):
        kinds[fname] = g.value(ind, f"v_{fname}", schema, ns)  # the payload's value wins, as in the dict
    args = []
    names = set()
    for fname, kind, nullable, optional, default in field_plan(etype):
        names.add(fname)
        if fname in kinds:
            g.check(ind, fname, f"v_{fname}", kinds[fname], kind, nullable)
            args.append((fname, f"v_{fname}"))
        elif optional:
            args.append((fname, g.const(default)))
        else:
            raise _Unsupported(f"{etype}: no field {fname}")
    if {"from_scratch", "restored_checkpoint_id"} <= names & kinds.keys():
        # SPEC §4: a restart from scratch restores no checkpoint
        g.emit(ind, "if v_from_scratch and v_restored_checkpoint_id is not None:")
        g.emit(ind + 1, "return None")
    g.emit(ind, "if pos != size:")
    g.emit(ind + 1, "return None")
    # The event without its __init__ (half the cost of a keyword call of the frozen class): a new
    # object, then each slot set through its descriptor; every field is set, and the classes have
    # no __post_init__ (tests/unit/test_event_reader.py checks both).
    g.emit(ind, f"e = _new({g.const(cls)})")
    for fname, value in args:
        g.emit(ind, f"{g.const(getattr(cls, fname).__set__)}(e, {value})")
    g.emit(ind, "return e")


__all__ = ["EventReader", "event_reader"]
