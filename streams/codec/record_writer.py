"""A writer of flat records by hand (issue 27): the worker publishes a ``CheckpointStatus`` for
every checkpoint (32,000 for the bench's 203k events), and the generic path
(:meth:`Codec.encode_record <streams.codec.avro.Codec.encode_record>`: the shape check, 2.9 µs,
then fastavro, 4.8 µs) cost more than the fold of the event that caused it.

:func:`record_writer` writes, once per record schema, one Python function that writes a record
straight to its bytes, exactly the bytes of the generic path (``tests/unit/test_record_writer.py``
holds them equal on random records of every schema it writes), for a record whose fields are all
of the plain kinds: string, bytes, int, long, double, boolean, enum, a union of null and one of
those, a nested record of such fields, an array of one of those (the manifests' plans, the
commitments' chain heads: ~100 µs a record the generic way). It takes only what it can write
without doubt: a value of exactly the field's Python type (``str``, ``int`` in range, ``float``,
``bool``, ``bytes``, a ``list`` or ``tuple``, a ``dict`` for a nested record), no unknown key, a
missing field only if it has a default; on anything else it returns None and the caller goes the
generic way, which raises the precise :class:`~streams.codec.errors.EncodeError`. A schema with
another kind (a map, a union of two non-null types) gets no writer.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Any, Callable, Mapping

from .codegen import SourceWriter, varint
from .codegen import Unsupported as _Unsupported

#: what the writer returns: the record's bytes (its frame header first), or None
RecordWriter = Callable[[Mapping[str, Any]], "bytes | None"]

_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack
_SMALL = tuple(bytes((n,)) for n in range(128))
_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_MISSING = object()


#: the varint of a zig-zag value >= 128 (the records of one batch share their timestamp: it is
#: written once)
_varint = lru_cache(maxsize=1024)(varint)


class _Gen(SourceWriter):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = 0

    def var(self) -> str:
        self.tmp += 1
        return f"x{self.tmp}"

    def long(self, ind: int, expr: str) -> None:
        """Append the zig-zag varint of the int ``expr`` (in range)."""
        self.emit(ind, f"n = ({expr} << 1) ^ ({expr} >> 63)")
        self.emit(ind, "out.append(_SMALL[n] if n < 128 else _varint(n))")

    def value(self, ind: int, v: str, schema: Any, namespace: str | None) -> None:
        """Append ``v`` written as ``schema``, or return None from the writer."""
        schema = self.resolve(schema, namespace)
        if isinstance(schema, list):
            null_at, other = self.nullable(schema, namespace)
            self.emit(ind, f"if {v} is None:")
            self.emit(ind + 1, f"out.append({self.const(_SMALL[2 * null_at])})")
            self.emit(ind, "else:")
            self.emit(ind + 1, f"out.append({self.const(_SMALL[2 * (1 - null_at)])})")
            self.value(ind + 1, v, other, namespace)
            return
        if schema in ("int", "long"):
            lo, hi = _RANGES[schema]
            self.emit(ind, f"if type({v}) is not int or not {lo} <= {v} <= {hi}:")
            self.emit(ind + 1, "return None")
            self.long(ind, v)
            return
        if schema in ("string", "bytes"):
            self.emit(ind, f"if type({v}) is not {'str' if schema == 'string' else 'bytes'}:")
            self.emit(ind + 1, "return None")
            b = self.var()
            self.emit(ind, f"{b} = {v}.encode()" if schema == "string" else f"{b} = {v}")
            self.emit(ind, f"n = len({b}) << 1")
            self.emit(ind, "out.append(_SMALL[n] if n < 128 else _varint(n))")
            self.emit(ind, f"out.append({b})")
            return
        if schema in ("double", "float"):
            self.emit(ind, f"if type({v}) is not float:")
            self.emit(ind + 1, "return None")
            self.emit(ind, f"out.append({'_DOUBLE' if schema == 'double' else '_FLOAT'}({v}))")
            return
        if schema == "boolean":
            self.emit(ind, f"if {v} is True:")
            self.emit(ind + 1, "out.append(b'\\x01')")
            self.emit(ind, f"elif {v} is False:")
            self.emit(ind + 1, "out.append(b'\\x00')")
            self.emit(ind, "else:")
            self.emit(ind + 1, "return None")
            return
        if isinstance(schema, Mapping) and schema.get("type") == "enum":
            index = {s: _SMALL[2 * i] if 2 * i < 128 else _varint(2 * i) for i, s in enumerate(schema["symbols"])}
            b = self.var()
            self.emit(ind, f"{b} = {self.const(index)}.get({v}) if type({v}) is str else None")
            self.emit(ind, f"if {b} is None:")
            self.emit(ind + 1, "return None")
            self.emit(ind, f"out.append({b})")
            return
        if isinstance(schema, Mapping) and schema.get("type") == "record":
            # a nested record: a dict of exactly its fields (a defaulted one may be missing)
            self.emit(ind, f"if type({v}) is not dict:")
            self.emit(ind + 1, "return None")
            self.fields(ind, v, schema["fields"], schema.get("namespace", namespace))
            return
        if isinstance(schema, Mapping) and schema.get("type") == "array":
            items = self.resolve(schema["items"], namespace)
            if isinstance(items, list) or (isinstance(items, Mapping) and items.get("type") == "array"):
                raise _Unsupported("an array of unions or arrays")
            self.emit(ind, f"if type({v}) is not list and type({v}) is not tuple:")
            self.emit(ind + 1, "return None")
            self.emit(ind, f"if {v}:")
            self.emit(ind + 1, f"n = len({v}) << 1")
            self.emit(ind + 1, "out.append(_SMALL[n] if n < 128 else _varint(n))")
            item = self.var()
            self.emit(ind + 1, f"for {item} in {v}:")
            self.value(ind + 2, item, items, namespace)
            self.emit(ind, "out.append(b'\\x00')")
            return
        raise _Unsupported(repr(schema)[:60])

    def fields(self, ind: int, d: str, fields: Any, namespace: str | None, type_key: str | None = None) -> None:
        """Append the fields of a record held in the dict ``d``, in order: a missing one takes its
        default (none: return None), and a key that is not a field (or ``type_key``) returns None."""
        used = self.var()
        self.emit(ind, f"{used} = 0")
        for f in fields:
            if f["name"] == type_key:
                raise _Unsupported("a field named like the type key")
            x = self.var()
            self.emit(ind, f"{x} = {d}.get({f['name']!r}, _MISSING)")
            self.emit(ind, f"if {x} is _MISSING:")
            if "default" in f:
                self.emit(ind + 1, f"{x} = {self.const(f['default'])}")
            else:
                self.emit(ind + 1, "return None")
            self.emit(ind, "else:")
            self.emit(ind + 1, f"{used} += 1")
            self.value(ind, x, f["type"], namespace)
        extra = f" + ({type_key!r} in {d})" if type_key is not None else ""
        self.emit(ind, f"if {used}{extra} != len({d}):")
        self.emit(ind + 1, "return None")


def record_writer(raw: Mapping[str, Any], header: bytes, type_key: str = "type") -> RecordWriter | None:
    """The writer of records of ``raw`` (a record schema, as JSON) in their flat form (the
    fields, and ``type_key`` naming the record or absent), each framed with ``header``; or None
    if the schema has a kind it does not write."""
    try:
        return _build(raw, header, type_key)
    except _Unsupported:
        return None


def _build(raw: Mapping[str, Any], header: bytes, type_key: str) -> RecordWriter:
    if raw.get("type") != "record":
        raise _Unsupported("not a record")
    g = _Gen()
    namespace = raw.get("namespace")
    name = raw["name"].rsplit(".", 1)[-1]
    g.emit(0, "def write(d):")
    g.emit(1, "try:")
    g.emit(2, f"if d.get({type_key!r}, {name!r}) != {name!r}:")
    g.emit(3, "return None")
    g.emit(2, f"out = [{g.const(header)}]")
    g.fields(2, "d", raw["fields"], namespace, type_key)
    g.emit(2, "return b''.join(out)")
    g.emit(1, "except Exception:  # anything unusual: the generic way says what")
    g.emit(2, "return None")
    return g.compile(f"{name} writer", {"_SMALL": _SMALL, "_varint": _varint, "_DOUBLE": _DOUBLE,
                                         "_FLOAT": _FLOAT, "_MISSING": _MISSING})


__all__ = ["RecordWriter", "record_writer"]
