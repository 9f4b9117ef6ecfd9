"""A deterministic, safe object-graph codec: the bytes of ``lineage.snapshots`` (issue 14).

This module knows nothing of the lineage: :class:`GraphCodec` writes and rebuilds graphs of
plain values and of the classes in its allow-list; :mod:`streams.core.snapshot` registers the
core's classes and snapshots a :class:`~streams.core.decide.Lineage` with it. Its properties:
- **safe**: anyone who can write the topic can forge a snapshot, so decoding never runs code
  chosen by the data (no pickle, no marshal). It builds only plain values and instances of the
  classes in the codec's allow-list (:meth:`GraphCodec.register`), fills their fields without
  calling their constructors, and anything else is a :class:`SnapshotError`;
- **exact**: the restored graph is the folded one. Objects shared by several containers (a
  ``Checkpoint`` in ``checkpoints``, its incarnation's ``ckpts``, ``hash_once``, ``src_ckpts``…)
  and cycles (``Consumption.inc`` → ``Incarnation.consumptions``) are restored shared; dicts keep
  their insertion order (the fold iterates them); ints stay ints, floats round-trip exactly
  (``inf`` and ``nan`` included), arrays keep their typecode;
- **deterministic**: the same fold gives the same bytes in any process. Objects are numbered in
  the order a depth-first walk meets them (fields in declaration order, dicts in insertion
  order), sets are written sorted, nothing depends on ``id()`` values, and the few indexes the
  fold fills by iterating sets (so in an order that follows string hashing) are registered
  ``unordered`` and written sorted (:func:`streams.core.snapshot.core_codec`): ``PYTHONHASHSEED`` does not matter.

The format: ``MAGIC`` and a two-byte version, then zlib of one compact JSON value. A plain JSON
scalar is itself (``null``, booleans, ints, floats, strings); anything else is a list whose first
item is a tag: ``t`` tuple, ``f`` frozenset, ``b`` bytes (base64), and, numbered in the order met
so that a later ``["r", n]`` refers back to them, ``l`` list, ``d`` dict (keys and values
alternating), ``s`` set, ``a`` array (typecode, little-endian base64), ``B`` bytearray and ``o``
object (class name, its slots in order — ``["u"]`` for an unset one — then name/value pairs of
its ``__dict__``); ``v`` an immutable value object (an event, a verdict: class name and slots,
written in full wherever it occurs, never numbered); ``x`` names a substitute. :func:`digest` is
over the version and the uncompressed JSON, so two zlib builds (zlib, zlib-ng) that compress
differently agree on it.
"""
from __future__ import annotations

import array
import base64
import binascii
import gc
import hashlib
import json
import sys
import zlib
from dataclasses import fields as dc_fields, is_dataclass
from itertools import chain
from json.encoder import encode_basestring as _quote  # json's own string escaping (C)
from operator import attrgetter
from typing import Any, Callable, Iterable, Mapping, TypeVar

from streams.core.errors import CoreError

MAGIC = b"TTSNAP"
VERSION = 1
_HEADER = MAGIC + VERSION.to_bytes(2, "big")
#: the most a snapshot may inflate to (a forged one could be a zlib bomb)
MAX_PAYLOAD = 1 << 31

#: strings this long or longer are written once and referred to after (ids, hashes)
SHARED_STR = 8

_UNSET = object()
_T = TypeVar("_T")
_C = TypeVar("_C", bound="GraphCodec")
_LITTLE = sys.byteorder == "little"
_INF = float("inf")
_int_text = int.__repr__  # what json writes for an int and a float
_float_repr = float.__repr__
_chain = chain.from_iterable


class SnapshotError(CoreError):
    """A snapshot cannot be written or read: the message names what and why."""


class _Spec:
    """How one registered class is written and rebuilt."""

    __slots__ = ("name", "cls", "slots", "has_dict", "transient", "unordered", "sort_at", "get", "setters",
                 "value")

    def __init__(self, name: str, cls: type, transient: Mapping[str, Callable[[], Any]],
                 unordered: Iterable[str], value: bool = False) -> None:
        self.name = name
        self.cls = cls
        self.value = value
        self.transient = dict(transient)
        self.unordered = frozenset(unordered)
        slots: list[str] = []
        owners: dict[str, type] = {}
        for klass in reversed(cls.__mro__):
            declared = klass.__dict__.get("__slots__", ())
            for s in (declared,) if isinstance(declared, str) else declared:
                if s not in ("__dict__", "__weakref__") and s not in owners:
                    owners[s] = klass
                    slots.append(s)
        if is_dataclass(cls):  # the dataclass's own order (fields, inherited first)
            order = [f.name for f in dc_fields(cls)]
            slots = [s for s in order if s in owners] + [s for s in slots if s not in order]
        self.has_dict = any("__dict__" in k.__dict__ for k in cls.__mro__ if k is not object)
        self.slots = tuple(s for s in slots if s not in self.transient)
        self.get = attrgetter(*self.slots) if len(self.slots) > 1 else None
        self.setters = tuple(owners[s].__dict__[s].__set__ for s in self.slots)
        self.sort_at = frozenset(i for i, s in enumerate(self.slots) if s in self.unordered)

    def values(self, obj: Any) -> tuple[Any, ...]:
        if self.get is not None:
            try:
                return self.get(obj)
            except AttributeError:
                pass
        return tuple(getattr(obj, s, _UNSET) for s in self.slots)


class GraphCodec:
    """An allow-list of classes and the codec over graphs of them (see the module docstring).

    A new one allows nothing; :meth:`register` adds a class (a subclass may register its own
    in ``__init__``: :class:`streams.core.snapshot.SnapshotCodec`), :meth:`copy` gives an
    independent codec with the same allow-list."""

    def __init__(self) -> None:
        self._by_name: dict[str, _Spec] = {}
        self._by_type: dict[type, _Spec] = {}
        self._parts: dict[type, Callable[[Any], Mapping[str, Any]]] = {}

    def register(self, cls: type, name: str | None = None,
                 transient: Mapping[str, Callable[[], Any]] | None = None,
                 unordered: Iterable[str] = (), value: bool = False) -> type:
        """Allow instances of ``cls`` (exactly that class, not its subclasses) in snapshots.

        ``name`` is how the snapshot names it (default ``module.qualname``); ``transient`` maps
        the attributes not to write to a factory of their value at load (a cache);
        ``unordered`` names dict attributes whose order means nothing (indexes filled by
        iterating sets): they are written sorted by key, like sets. Works for plain
        ``__dict__`` classes, ``__slots__`` classes and dataclasses (frozen or not, slots or
        not). ``value``: its instances are immutable values (frozen events): written in full
        wherever they occur, never as a reference, so whether two places hold one instance or
        two equal ones (a fold that decoded a redelivered event again, or not) does not change
        the bytes. Returns ``cls``, so it can decorate."""
        if not isinstance(cls, type) or cls.__module__ == "builtins":
            raise SnapshotError(f"cannot register {cls!r}: only classes of your own can be registered")
        name = name or f"{cls.__module__}.{cls.__qualname__}"
        if name in self._by_name and self._by_name[name].cls is not cls:
            raise SnapshotError(f"cannot register {cls!r} as {name!r}: the name is taken by "
                                f"{self._by_name[name].cls!r}")
        spec = _Spec(name, cls, transient or {}, unordered, value)
        self._by_name[name] = spec
        self._by_type[cls] = spec
        return cls

    def substitute_parts(self, cls: type, parts: Callable[[Any], Mapping[str, Any]]) -> None:
        """A substitute of class ``cls`` brings its parts along: ``parts(obj)`` maps a suffix to an
        object that is then substituted as ``name.suffix`` too (a Config's seal policy)."""
        self._parts[cls] = parts

    def _substitutes(self, substitute: Mapping[str, Any] | None) -> dict[str, Any]:
        out = dict(substitute or {})
        for name, obj in list(out.items()):
            parts = self._parts.get(type(obj))
            if parts is not None:
                for suffix, part in parts(obj).items():
                    out.setdefault(f"{name}.{suffix}", part)
        return out

    def copy(self: _C) -> _C:
        """A codec of the same class with the same allow-list (register more on it without
        touching this one)."""
        other = object.__new__(type(self))
        GraphCodec.__init__(other)
        other._by_name = dict(self._by_name)
        other._by_type = dict(self._by_type)
        other._parts = dict(self._parts)
        return other

    def registered(self) -> list[str]:
        return sorted(self._by_name)

    def dumps(self, obj: Any, *, substitute: Mapping[str, Any] | None = None, level: int = 6) -> bytes:
        """The snapshot of ``obj``: header + zlib(JSON). ``substitute`` maps names to objects that
        are written as their name (found by identity) and must be given back to :meth:`loads`."""
        payload = self.encode(obj, substitute=substitute)
        return _HEADER + zlib.compress(payload, level)

    def encode(self, obj: Any, *, substitute: Mapping[str, Any] | None = None) -> bytes:
        """The uncompressed JSON payload of ``obj`` (what :func:`digest` hashes)."""
        was = gc.isenabled()
        gc.disable()  # the walk allocates a list per container: collections would rescan the heap
        try:
            text = _Encoder(self._by_type, self._substitutes(substitute)).enc(obj)
            return text.encode("utf-8", "surrogatepass")
        except RecursionError:
            raise SnapshotError("cannot snapshot: the object graph is too deep to walk") from None
        finally:
            if was:
                gc.enable()

    def loads(self, data: bytes, *, substitute: Mapping[str, Any] | None = None) -> Any:
        """The object graph of a snapshot. Raises :class:`SnapshotError` on anything malformed,
        never builds an instance of a class outside the allow-list."""
        return self.decode(payload(data), substitute=substitute)

    def decode(self, raw: bytes, *, substitute: Mapping[str, Any] | None = None) -> Any:
        try:
            tree = json.loads(raw.decode("utf-8", "surrogatepass"))
        except (ValueError, RecursionError) as exc:
            raise SnapshotError(f"snapshot payload is not valid JSON: {_one_line(exc)}") from None
        dec = _Decoder(self._by_name, self._substitutes(substitute))
        was = gc.isenabled()
        gc.disable()
        try:
            return dec.dec(tree)
        except SnapshotError:
            raise
        except RecursionError:
            raise SnapshotError("snapshot payload is nested too deeply") from None
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                binascii.Error) as exc:
            raise SnapshotError(f"snapshot payload is malformed: {type(exc).__name__}: "
                                f"{_one_line(exc)}") from None
        finally:
            if was:
                gc.enable()


def payload(data: bytes) -> bytes:
    """The uncompressed JSON of a snapshot, after checking its header."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SnapshotError(f"a snapshot is bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) < len(_HEADER) or not data.startswith(MAGIC):
        raise SnapshotError("not a traintrace snapshot (bad magic): wrong topic or truncated record")
    version = int.from_bytes(data[len(MAGIC):len(_HEADER)], "big")
    if version != VERSION:
        raise SnapshotError(f"snapshot format version {version}, this code reads {VERSION}: "
                            "replay the cohort from its start instead")
    d = zlib.decompressobj()
    try:
        out = d.decompress(data[len(_HEADER):], MAX_PAYLOAD)
    except zlib.error as exc:
        raise SnapshotError(f"snapshot data is corrupt: {exc}") from None
    if d.unconsumed_tail:
        raise SnapshotError(f"snapshot inflates past {MAX_PAYLOAD} bytes: refused")
    if not d.eof or d.unused_data:
        raise SnapshotError("snapshot data is truncated or has trailing bytes")
    return out


def digest(data: bytes) -> str:
    """sha256 (hex) of a snapshot's version and uncompressed payload: equal for equal states,
    whichever zlib compressed them."""
    return hashlib.sha256(_HEADER + payload(data)).hexdigest()


_KEY_RANK = {type(None): 0, bool: 1, int: 2, float: 3, str: 4, bytes: 5, tuple: 6, frozenset: 7}


def _canonical_key(x: Any) -> tuple[Any, ...]:
    """A total order over the plain values a set can hold (type first, then value)."""
    rank = _KEY_RANK.get(type(x))
    if rank is None:
        raise SnapshotError(f"cannot snapshot a set holding a {type(x).__qualname__}: "
                            "only sets of plain values have a deterministic order")
    if rank == 6:
        return (6, tuple(_canonical_key(e) for e in x))
    if rank == 7:
        return (7, tuple(sorted(_canonical_key(e) for e in x)))
    if rank == 3 and x != x:
        return (3, 1, 0.0)  # nan, after every number
    if rank == 3:
        return (3, 0, x)
    return (rank, x) if rank else (0,)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


# --------------------------------------------------------------------------- encoding


class _Encoder:
    """Writes a graph as the JSON text of the format, value by value (no tree of lists first).

    Each method returns the JSON text of one value; a container joins its items' texts. The
    text is the one ``json.dumps(tree, separators=(",", ":"), ensure_ascii=False)`` gives for the
    tree of tags the module docstring describes (strings through json's own escaping, ints and
    floats as json writes them), so the bytes and digests are those of the earlier tree encoder
    (issue 27: that tree held about 950 bytes of Python objects a folded event of the cohort,
    this text about 75, and it is faster)."""

    def __init__(self, specs: Mapping[type, _Spec], substitute: Mapping[str, Any]) -> None:
        self.specs = specs
        self.names = {t: _quote(s.name) for t, s in specs.items()}
        self.subst: dict[int, str] = {}
        for name, obj in substitute.items():
            self.subst.setdefault(id(obj), name)
        self.memo: dict[int, int] = {}
        self.strs: dict[str, int] = {}  # strings are numbered by value: ids, hashes repeat a lot
        self.alive: list[Any] = []  # keeps every numbered object alive: ids stay unique

    def enc(self, v: Any) -> str:
        t = type(v)
        if t is str:
            if len(v) < SHARED_STR:
                return _quote(v)
            n = self.strs.get(v)
            if n is not None:
                return f'["r",{n}]'
            self.strs[v] = len(self.alive)
            self.alive.append(v)
            return _quote(v)
        if t is int:
            return _int_text(v)
        if v is None:
            return "null"
        if t is bool:
            return "true" if v else "false"
        if t is float:
            return _float_text(v)
        name = self.subst.get(id(v))
        if name is not None:
            return '["x",' + _quote(name) + "]"
        n = self.memo.get(id(v))
        if n is not None:
            return f'["r",{n}]'
        fn = _ENCODE_BY_TYPE.get(t)
        if fn is not None:
            return fn(self, v)
        spec = self.specs.get(t)
        if spec is None:
            raise SnapshotError(f"cannot snapshot a {t.__module__}.{t.__qualname__}: not a plain value "
                                "and not registered (GraphCodec.register)")
        return self._object(spec, v)

    def _items(self, values: Iterable[Any], out: list[str]) -> str:
        """``[`` the texts already in ``out`` and those of ``values`` ``]``: :meth:`enc` with the
        common cases inline (the hot loop of a snapshot: a cohort's checkpoints)."""
        strs, alive, memo, subst, enc = self.strs, self.alive, self.memo, self.subst, self.enc
        append = out.append
        for x in values:
            t = type(x)
            if t is str:
                if len(x) < SHARED_STR:
                    append(_quote(x))
                    continue
                n = strs.get(x)
                if n is None:
                    strs[x] = len(alive)
                    alive.append(x)
                    append(_quote(x))
                else:
                    append(f'["r",{n}]')
            elif t is int:
                append(_int_text(x))
            elif x is None:
                append("null")
            elif x is _UNSET:
                append('["u"]')
            else:
                i = id(x)
                n = memo.get(i)
                append(f'["r",{n}]' if n is not None and i not in subst else enc(x))
        return "[" + ",".join(out) + "]"

    def _number(self, v: Any) -> None:
        self.memo[id(v)] = len(self.alive)
        self.alive.append(v)

    def _list(self, v: list[Any]) -> str:
        self._number(v)
        return self._items(v, ['"l"'])

    def _dict(self, v: dict[Any, Any], ordered: bool = True) -> str:
        self._number(v)
        if ordered:
            return self._items(_chain(v.items()), ['"d"'])
        return self._items(_chain((k, v[k]) for k in self._sorted(v)), ['"d"'])

    def _field(self, v: Any, ordered: bool) -> str:
        """An attribute's value; a dict the class registered as unordered is written sorted."""
        if ordered or type(v) is not dict or id(v) in self.memo or id(v) in self.subst:
            return self.enc(v)
        return self._dict(v, ordered=False)

    def _tuple(self, v: tuple[Any, ...]) -> str:
        return self._items(v, ['"t"'])

    @staticmethod
    def _sorted(v: Iterable[Any]) -> list[Any]:
        """The items of a set in a canonical order (so its bytes do not follow string hashing),
        sorted before they are written (strings are numbered as they are written)."""
        items = list(v)
        if not (all(type(x) is str for x in items) or all(type(x) is int for x in items)):
            items.sort(key=_canonical_key)
        else:
            items.sort()
        return items

    def _set(self, v: set[Any]) -> str:
        self._number(v)
        return self._items(self._sorted(v), ['"s"'])

    def _frozenset(self, v: frozenset[Any]) -> str:
        return self._items(self._sorted(v), ['"f"'])

    def _bytes(self, v: bytes) -> str:
        return '["b","' + base64.b64encode(v).decode("ascii") + '"]'

    def _bytearray(self, v: bytearray) -> str:
        self._number(v)
        return '["B","' + base64.b64encode(v).decode("ascii") + '"]'

    def _array(self, v: array.array[Any]) -> str:
        self._number(v)
        if not _LITTLE and v.itemsize > 1:
            v = array.array(v.typecode, v)
            v.byteswap()
        return '["a",' + _quote(v.typecode) + ',"' + base64.b64encode(v.tobytes()).decode("ascii") + '"]'

    def _object(self, spec: _Spec, v: Any) -> str:
        if spec.value:  # an immutable value: in full wherever it occurs, never numbered
            return self._items(spec.values(v), ['"v"', self.names[spec.cls]])
        self._number(v)
        if not spec.sort_at and not spec.has_dict:
            return self._items(spec.values(v), ['"o"', self.names[spec.cls]])
        enc = self.enc
        out = ['"o"', self.names[spec.cls]]
        sort_at = spec.sort_at
        for i, x in enumerate(spec.values(v)):
            out.append('["u"]' if x is _UNSET else enc(x) if i not in sort_at else self._field(x, False))
        if spec.has_dict:
            unordered = spec.unordered
            for k, x in v.__dict__.items():
                if k not in spec.transient:
                    out.append(enc(k))
                    out.append(self._field(x, k not in unordered))
        return "[" + ",".join(out) + "]"


#: the containers' writers, by type: plain functions in a module table, not bound methods in one
#: the encoder holds (that made each encoder a reference cycle, and its ``alive`` list kept a
#: snapshotted cohort's whole state until a full collection, which a worker runs rarely:
#: streams.worker.gctune)
_ENCODE_BY_TYPE: dict[type, Callable[[_Encoder, Any], str]] = {
    list: _Encoder._list, dict: _Encoder._dict, tuple: _Encoder._tuple, set: _Encoder._set,
    frozenset: _Encoder._frozenset, bytes: _Encoder._bytes, bytearray: _Encoder._bytearray,
    array.array: _Encoder._array,
}


def _float_text(v: float) -> str:
    """A float as json writes it (``allow_nan``: NaN, Infinity, -Infinity)."""
    if v != v:
        return "NaN"
    if v == _INF:
        return "Infinity"
    if v == -_INF:
        return "-Infinity"
    return _float_repr(v)


# --------------------------------------------------------------------------- decoding


class _Decoder:
    def __init__(self, specs: Mapping[str, _Spec], substitute: Mapping[str, Any]) -> None:
        self.specs = specs
        self.subst = substitute
        self.objs: list[Any] = []

    def dec(self, v: Any) -> Any:
        t = type(v)
        if t is str:
            if len(v) >= SHARED_STR:
                self.objs.append(v)  # numbered like the encoder numbers them: by value
            return v
        if t is list:
            if not v or type(v[0]) is not str or v[0] not in _DECODE_BY_TAG:
                raise SnapshotError(f"snapshot holds an unknown value tag {str(v[:1])[:40]}")
            return _DECODE_BY_TAG[v[0]](self, v)
        if t is int or t is float or t is bool or v is None:
            return v
        raise SnapshotError(f"snapshot holds a bare JSON {t.__name__}, which no value encodes to")

    def _number(self, obj: _T) -> _T:
        self.objs.append(obj)
        return obj

    def _list(self, v: list[Any]) -> list[Any]:
        out: list[Any] = self._number([])
        dec = self.dec
        out.extend(dec(x) for x in v[1:])  # a generator: the list is numbered before its items
        return out

    def _dict(self, v: list[Any]) -> dict[Any, Any]:
        if len(v) % 2 != 1:
            raise SnapshotError("snapshot holds a dict with a key but no value")
        out: dict[Any, Any] = self._number({})
        dec = self.dec
        for i in range(1, len(v), 2):
            k = dec(v[i])
            out[k] = dec(v[i + 1])
        return out

    def _tuple(self, v: list[Any]) -> tuple[Any, ...]:
        dec = self.dec
        return tuple([dec(x) for x in v[1:]])

    def _set(self, v: list[Any]) -> set[Any]:
        out: set[Any] = self._number(set())
        dec = self.dec
        for x in v[1:]:
            out.add(dec(x))
        return out

    def _frozenset(self, v: list[Any]) -> frozenset[Any]:
        dec = self.dec
        return frozenset([dec(x) for x in v[1:]])

    def _b64(self, v: list[Any], n: int = 2) -> bytes:
        if len(v) != n or type(v[-1]) is not str:
            raise SnapshotError(f"snapshot holds a malformed {v[0]!r} value")
        return base64.b64decode(v[-1].encode("ascii"), validate=True)

    def _bytes(self, v: list[Any]) -> bytes:
        return self._b64(v)

    def _bytearray(self, v: list[Any]) -> bytearray:
        return self._number(bytearray(self._b64(v)))

    def _array(self, v: list[Any]) -> array.array[Any]:
        if len(v) != 3 or type(v[1]) is not str or v[1] not in array.typecodes:
            raise SnapshotError("snapshot holds an array with a bad typecode")
        out: array.array[Any] = self._number(array.array(v[1]))
        out.frombytes(self._b64(v, 3))
        if not _LITTLE and out.itemsize > 1:
            out.byteswap()
        return out

    def _ref(self, v: list[Any]) -> Any:
        n = v[1] if len(v) == 2 else None
        if type(n) is not int or not 0 <= n < len(self.objs):
            raise SnapshotError(f"snapshot refers to object {str(n)[:20]}, which is not defined before")
        return self.objs[n]

    def _subst(self, v: list[Any]) -> Any:
        name = v[1] if len(v) == 2 else None
        if type(name) is not str or name not in self.subst:
            raise SnapshotError(f"snapshot needs the substitute {str(name)[:60]!r}, which the reader did not give")
        return self.subst[name]

    def _value(self, v: list[Any]) -> Any:
        """An immutable value object, written in full (not numbered)."""
        name = v[1] if len(v) > 1 else None
        spec = self.specs.get(name) if type(name) is str else None
        if spec is None or not spec.value:
            raise SnapshotError(f"snapshot names value class {str(name)[:80]!r}, which is not allowed here")
        if len(v) - 2 != len(spec.slots) or spec.has_dict:
            raise SnapshotError(f"snapshot holds a {spec.name} with the wrong number of fields")
        obj: Any = object.__new__(spec.cls)
        dec = self.dec
        for setter, x in zip(spec.setters, v[2:]):
            if not (type(x) is list and x == ["u"]):
                setter(obj, dec(x))
        return obj

    def _object(self, v: list[Any]) -> Any:
        name = v[1] if len(v) > 1 else None
        spec = self.specs.get(name) if type(name) is str else None
        if spec is None or spec.value:
            raise SnapshotError(f"snapshot names class {str(name)[:80]!r}, which is not allowed here")
        n = len(spec.slots)
        extra = len(v) - 2 - n
        if extra < 0 or extra % 2 or (extra and not spec.has_dict):
            raise SnapshotError(f"snapshot holds a {spec.name} with the wrong number of fields")
        obj: Any = self._number(object.__new__(spec.cls))
        dec = self.dec
        for setter, x in zip(spec.setters, v[2:2 + n]):
            if type(x) is list and x == ["u"]:
                continue
            setter(obj, dec(x))
        if spec.has_dict:
            d = obj.__dict__
            for i in range(2 + n, len(v), 2):
                k = dec(v[i])
                if type(k) is not str:
                    raise SnapshotError(f"snapshot holds a {spec.name} with a non-string attribute name")
                if k not in spec.transient:
                    d[k] = dec(v[i + 1])
        for attr, factory in spec.transient.items():
            object.__setattr__(obj, attr, factory())
        return obj


#: the readers of the tagged values, by tag (plain functions, for the reason of _ENCODE_BY_TYPE)
_DECODE_BY_TAG: dict[str, Callable[[_Decoder, list[Any]], Any]] = {
    "l": _Decoder._list, "d": _Decoder._dict, "t": _Decoder._tuple, "s": _Decoder._set,
    "f": _Decoder._frozenset, "b": _Decoder._bytes, "B": _Decoder._bytearray, "a": _Decoder._array,
    "o": _Decoder._object, "r": _Decoder._ref, "x": _Decoder._subst, "v": _Decoder._value,
}
