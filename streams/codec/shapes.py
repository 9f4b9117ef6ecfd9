"""The canonical in-memory form and its mapping to Avro data.

The canonical form of an event is the flat dict of the JSON Lines test vectors: the envelope
(``job_id``, ``seq``, ``incarnation``, ``ts``, optional ``prev_hash`` / ``hash``), ``"type"`` and
that type's fields (SPEC §4). On the wire it is a ``LineageEvent`` record whose ``payload`` is a
union of one record per event type; :class:`EventShape` converts between the two. Every other
record (what the agent and the processor write) is its record's fields plus ``"type"`` (the record
name); :class:`RecordShape` converts it.

Encoding validates strictly, with checks compiled once from the reader schema (fastavro's writer
alone would silently truncate ``1.5`` into a long, accept ``True`` as a number, write an int field
out of the 32-bit range or drop unknown keys): a field missing without a default, an unknown key,
a value of the wrong type or out of range raises :class:`EncodeError` naming the field. Fields
with a default (the nullable ones) may be left out. Decoding returns every field, ``None`` where
null.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Mapping

from .errors import EncodeError
from .schemas import EVENT_RECORD, SchemaInfo

TYPE_KEY = "type"

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

Pred = Callable[[Any], bool]
# why(value, path) -> (path, message) of the first thing wrong, or None when the value is fine.
Why = Callable[[Any, str], "tuple[str, str] | None"]


def _is_integral(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    if type(v) is int:
        return _INT_MIN <= v <= _INT_MAX
    return _is_integral(v) and _INT_MIN <= v <= _INT_MAX


def _is_long(v: Any) -> bool:
    if type(v) is int:
        return _LONG_MIN <= v <= _LONG_MAX
    return _is_integral(v) and _LONG_MIN <= v <= _LONG_MAX


def _is_double(v: Any) -> bool:
    t = type(v)
    if t is float:
        return True
    if t is int:
        return -(2**1023) * 2 < v < 2**1024
    return _is_real(v)


def _is_string(v: Any) -> bool:
    return type(v) is str or isinstance(v, str)


def _is_bytes(v: Any) -> bool:
    return type(v) is bytes or isinstance(v, (bytes, bytearray))


def _is_bool(v: Any) -> bool:
    return type(v) is bool


def _is_null(v: Any) -> bool:
    return v is None


_PRIMITIVES: dict[str, tuple[Pred, str]] = {
    "null": (_is_null, "null"),
    "boolean": (_is_bool, "a boolean"),
    "int": (_is_int, "an int (32-bit)"),
    "long": (_is_long, "a long (64-bit int)"),
    "float": (_is_double, "a number"),
    "double": (_is_double, "a number"),
    "string": (_is_string, "a string"),
    "bytes": (_is_bytes, "bytes"),
}


def _show(v: Any) -> str:
    r = repr(v)
    if len(r) > 60:
        r = r[:57] + "..."
    return f"{r} ({type(v).__name__})"


class _Node:
    """A compiled check of one schema node: ``ok`` is the fast predicate, ``why`` explains a
    failure with the path of the offending field."""

    __slots__ = ("ok", "why", "desc")

    def __init__(self, ok: Pred, why: Why, desc: str) -> None:
        self.ok = ok
        self.why = why
        self.desc = desc


class _Field:
    __slots__ = ("name", "node", "has_default", "default")

    def __init__(self, name: str, node: _Node, has_default: bool, default: Any) -> None:
        self.name = name
        self.node = node
        self.has_default = has_default
        self.default = default


def _fullname(node: Mapping[str, Any], namespace: str | None) -> tuple[str, str | None]:
    name = node["name"]
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    ns = node.get("namespace", namespace)
    return (f"{ns}.{name}" if ns else name), ns


class _Compiler:
    def __init__(self) -> None:
        self.named: dict[str, Any] = {}  # fullname -> _Node or ("record", fields) for records

    def node(self, schema: Any, namespace: str | None) -> _Node:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return self._leaf(*_PRIMITIVES[schema])
            full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            if full in self.named:
                return self.named[full]
            if schema in self.named:
                return self.named[schema]
            raise ValueError(f"unknown named type {schema!r}")
        if isinstance(schema, list):
            return self._union([self.node(s, namespace) for s in schema])
        t = schema["type"]
        if t in _PRIMITIVES and not {"name", "fields", "symbols"} & set(schema):
            return self._leaf(*_PRIMITIVES[t])  # {"type": "long", "logicalType": ...}
        if t == "enum":
            full, _ = _fullname(schema, namespace)
            node = self._enum(schema["symbols"], full)
            self.named[full] = node
            return node
        if t == "fixed":
            full, _ = _fullname(schema, namespace)
            size = schema["size"]
            node = self._leaf(lambda v: _is_bytes(v) and len(v) == size, f"{size} bytes")
            self.named[full] = node
            return node
        if t == "array":
            return self._array(self.node(schema["items"], namespace))
        if t == "map":
            return self._map(self.node(schema["values"], namespace))
        if t == "record" or t == "error":
            full, ns = _fullname(schema, namespace)
            fields = self.fields(schema, ns)
            node = self._record(fields, full)
            self.named[full] = node
            return node
        raise ValueError(f"unsupported schema node {schema!r}")

    def fields(self, record: Mapping[str, Any], namespace: str | None) -> list[_Field]:
        # Register a placeholder first so recursive references resolve (not used by our schemas).
        out: list[_Field] = []
        for f in record["fields"]:
            node = self.node(f["type"], namespace)
            out.append(_Field(f["name"], node, "default" in f, f.get("default")))
        return out

    # -- node kinds ---------------------------------------------------------------------------

    @staticmethod
    def _leaf(ok: Pred, desc: str) -> _Node:
        def why(v: Any, path: str):
            return None if ok(v) else (path, f"expected {desc}, got {_show(v)}")

        return _Node(ok, why, desc)

    @staticmethod
    def _enum(symbols: list[str], full: str) -> _Node:
        syms = frozenset(symbols)
        desc = f"one of {', '.join(symbols)}"

        def ok(v: Any) -> bool:
            return type(v) is str and v in syms

        def why(v: Any, path: str):
            return None if ok(v) else (path, f"expected {desc}, got {_show(v)}")

        return _Node(ok, why, desc)

    @staticmethod
    def _union(nodes: list[_Node]) -> _Node:
        desc = " or ".join(n.desc for n in nodes)
        if len(nodes) == 2 and nodes[0].ok is _is_null:
            inner = nodes[1].ok

            def ok(v: Any) -> bool:
                return v is None or inner(v)

        else:
            preds = tuple(n.ok for n in nodes)

            def ok(v: Any) -> bool:
                return any(p(v) for p in preds)

        def why(v: Any, path: str):
            if ok(v):
                return None
            # Explain through the one branch of the same container kind, if any (records).
            cands = [n for n in nodes if n.ok is not _is_null]
            if len(cands) == 1 and isinstance(v, (dict, list, tuple)):
                return cands[0].why(v, path)
            return (path, f"expected {desc}, got {_show(v)}")

        return _Node(ok, why, desc)

    @staticmethod
    def _array(item: _Node) -> _Node:
        iok = item.ok

        def ok(v: Any) -> bool:
            t = type(v)
            if t is not list and t is not tuple:
                return False
            for x in v:
                if not iok(x):
                    return False
            return True

        def why(v: Any, path: str):
            if type(v) is not list and type(v) is not tuple:
                return (path, f"expected a list, got {_show(v)}")
            for i, x in enumerate(v):
                r = item.why(x, f"{path}[{i}]")
                if r:
                    return r
            return None

        return _Node(ok, why, f"a list of {item.desc}")

    @staticmethod
    def _map(value: _Node) -> _Node:
        vok = value.ok

        def ok(v: Any) -> bool:
            if not isinstance(v, dict):
                return False
            for k, x in v.items():
                if type(k) is not str or not vok(x):
                    return False
            return True

        def why(v: Any, path: str):
            if not isinstance(v, dict):
                return (path, f"expected a dict, got {_show(v)}")
            for k, x in v.items():
                if not isinstance(k, str):
                    return (path, f"map keys must be strings, got {_show(k)}")
                r = value.why(x, f"{path}[{k!r}]")
                if r:
                    return r
            return None

        return _Node(ok, why, f"a dict of {value.desc}")

    @staticmethod
    def _record(fields: list[_Field], full: str) -> _Node:
        flist = tuple((f.name, f.node.ok, f.has_default) for f in fields)
        names = frozenset(f.name for f in fields)

        def ok(v: Any) -> bool:
            if not isinstance(v, dict):
                return False
            n = 0
            for name, fok, has_default in flist:
                if name in v:
                    n += 1
                    if not fok(v[name]):
                        return False
                elif not has_default:
                    return False
            return n == len(v)

        def why(v: Any, path: str):
            if not isinstance(v, dict):
                return (path, f"expected a {full.rsplit('.', 1)[-1]} record (dict), got {_show(v)}")
            for f in fields:
                sub = f"{path}.{f.name}" if path else f.name
                if f.name in v:
                    r = f.node.why(v[f.name], sub)
                    if r:
                        return r
                elif not f.has_default:
                    return (sub, "missing (no default)")
            for k in v:
                if k not in names:
                    return (f"{path}.{k}" if path else str(k), f"unknown field of {full}")
            return None

        return _Node(ok, why, full)


_MISSING = object()


def _compile_fields(fields: list[_Field]) -> tuple[tuple[str, Pred, bool, Any, _Field], ...]:
    return tuple((f.name, f.node.ok, f.has_default, f.default, f) for f in fields)


def _fill(fields: tuple[tuple[str, Pred, bool, Any, _Field], ...], d: Mapping[str, Any], out: dict[str, Any]) -> int:
    """Copy ``fields`` from ``d`` into ``out`` (defaults where absent), checking each; return
    how many keys of ``d`` were used."""
    used = 0
    get = d.get
    for name, ok, has_default, default, f in fields:
        v = get(name, _MISSING)
        if v is _MISSING:
            if not has_default:
                raise EncodeError(name, "missing (no default)")
            v = default
        else:
            used += 1
        if not ok(v):
            raise EncodeError(*(f.node.why(v, name) or (name, f"invalid value {_show(v)}")))
        out[name] = v
    return used


class RecordShape:
    """Flat dict (fields + ``"type"``) ↔ Avro datum of one top-level record."""

    def __init__(self, info: SchemaInfo) -> None:
        self.name = info.name
        self.fullname = info.fullname
        comp = _Compiler()
        ns = info.fullname.rsplit(".", 1)[0] if "." in info.fullname else None
        self.fields = comp.fields(info.raw, ns)
        self._fields = _compile_fields(self.fields)
        self.field_names = tuple(f.name for f in self.fields)
        if TYPE_KEY in self.field_names:
            raise ValueError(f"{info.name} has a field named {TYPE_KEY!r}, which the flat form reserves")
        self._known = frozenset(self.field_names) | {TYPE_KEY}

    def to_avro(self, d: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(d, Mapping):
            raise EncodeError("", f"expected a dict, got {_show(d)}")
        t = d.get(TYPE_KEY, self.name)
        if t != self.name:
            raise EncodeError(TYPE_KEY, f"is {t!r}, expected {self.name!r}")
        out: dict[str, Any] = {}
        used = _fill(self._fields, d, out) + (TYPE_KEY in d)
        if used != len(d):
            extra = sorted(str(k) for k in d if k not in self._known)
            raise EncodeError(extra[0] if extra else "", f"unknown field of {self.name}")
        return out

    def from_avro(self, rec: dict[str, Any]) -> dict[str, Any]:
        rec[TYPE_KEY] = self.name
        return rec


class EventShape:
    """Flat event dict ↔ ``LineageEvent`` datum (envelope + ``payload`` union)."""

    PAYLOAD = "payload"

    def __init__(self, info: SchemaInfo) -> None:
        if info.name != EVENT_RECORD:
            raise ValueError(f"EventShape needs {EVENT_RECORD}, got {info.name}")
        comp = _Compiler()
        ns = info.fullname.rsplit(".", 1)[0] if "." in info.fullname else None
        raw_fields = info.raw["fields"]
        env_raw = [f for f in raw_fields if f["name"] != self.PAYLOAD]
        payload_raw = [f for f in raw_fields if f["name"] == self.PAYLOAD]
        if len(payload_raw) != 1 or not isinstance(payload_raw[0]["type"], list):
            raise ValueError(f"{info.name} must have a union field {self.PAYLOAD!r}")
        self.envelope = comp.fields({"fields": env_raw}, ns)
        self._envelope = _compile_fields(self.envelope)
        self.envelope_names = tuple(f.name for f in self.envelope)
        #: event type (short name) -> (full Avro name, payload fields)
        self.types: dict[str, tuple[str, list[_Field]]] = {}
        self._compiled: dict[str, tuple[str, tuple]] = {}
        self._short: dict[str, str] = {}
        for branch in payload_raw[0]["type"]:
            if not isinstance(branch, Mapping) or branch.get("type") != "record":
                raise ValueError(f"every {self.PAYLOAD} branch must be a record, got {branch!r}")
            full, bns = _fullname(branch, ns)
            short = full.rsplit(".", 1)[-1]
            fields = comp.fields(branch, bns)
            comp.named[full] = comp._record(fields, full)
            clash = {f.name for f in fields} & (set(self.envelope_names) | {TYPE_KEY})
            if clash:
                raise ValueError(f"{short} redefines envelope field(s) {sorted(clash)}")
            self.types[short] = (full, fields)
            self._compiled[short] = (full, _compile_fields(fields))
            self._short[full] = short
        self.event_types = tuple(self.types)
        self._known = {
            t: frozenset(self.envelope_names) | {f.name for f in fs} | {TYPE_KEY}
            for t, (_, fs) in self.types.items()
        }

    def fields_of(self, event_type: str) -> tuple[str, ...]:
        """The payload field names of one event type, in schema order."""
        return tuple(f.name for f in self.types[event_type][1])

    def to_avro(self, d: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(d, Mapping):
            raise EncodeError("", f"expected a dict, got {_show(d)}")
        try:
            t = d[TYPE_KEY]
        except KeyError:
            raise EncodeError(TYPE_KEY, "missing: an event needs its type") from None
        try:
            full, pfields = self._compiled[t]
        except (KeyError, TypeError):
            raise EncodeError(
                TYPE_KEY, f"unknown event type {t!r}; expected one of {', '.join(self.event_types)}"
            ) from None
        out: dict[str, Any] = {}
        used = _fill(self._envelope, d, out)
        payload: dict[str, Any] = {}
        used += _fill(pfields, d, payload) + 1
        if used != len(d):
            known = self._known[t]
            extra = sorted(str(k) for k in d if k not in known)
            raise EncodeError(extra[0] if extra else "", f"unknown field of {t}")
        out[self.PAYLOAD] = (full, payload)
        return out

    def from_avro(self, rec: dict[str, Any]) -> dict[str, Any]:
        name, payload = rec.pop(self.PAYLOAD)
        rec.update(payload)
        short = self._short.get(name)
        rec[TYPE_KEY] = short if short is not None else name.rsplit(".", 1)[-1]
        return rec


__all__ = ["EventShape", "RecordShape", "TYPE_KEY"]
