"""What the codec's hand-written paths share (:mod:`~streams.codec.event_reader`,
:mod:`~streams.codec.record_writer`, :mod:`~streams.codec.batch`): the writing of one Python
function's source from a schema, its compilation, and the Avro varint."""

from __future__ import annotations

import functools
from types import CodeType
from typing import Any, Callable, Mapping

from .errors import CodecError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class Unsupported(CodecError):
    """The schema has a kind the generator does not handle (the caller makes no function: it
    never leaves the codec)."""


def varint(u: int) -> bytes:
    """The varint of ``u`` >= 0 (a value already zig-zag encoded)."""
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


class SourceWriter:
    """The lines of one function, the constants it uses (named ``C0``, ``C1``, ...) and the named
    types of the schema it is written from."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.named: dict[str, Any] = {}

    def const(self, value: Any) -> str:
        name = f"C{len(self.consts)}"
        self.consts[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def resolve(self, schema: Any, namespace: str | None) -> Any:
        """A primitive's name, a union's list, or the mapping of an enum, record, fixed, array or
        map (a named one remembered, so that later references resolve to it)."""
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return schema
            full = schema if "." in schema or namespace is None else f"{namespace}.{schema}"
            found = self.named.get(full) or self.named.get(schema)
            if found is None:
                raise Unsupported(f"unknown named type {schema!r}")
            return found
        if isinstance(schema, list):
            return schema
        if isinstance(schema, Mapping):
            t = schema.get("type")
            if t in PRIMITIVES and not set(schema) - {"type", "doc"}:
                return t  # (a logical type is not plain: unsupported below)
            if t in ("enum", "record", "fixed"):
                name = schema["name"]
                ns = schema.get("namespace", namespace)
                self.named[name if "." in name or ns is None else f"{ns}.{name}"] = schema
                self.named[name.rsplit(".", 1)[-1]] = schema
                return schema
            if t in ("array", "map"):
                return schema
        raise Unsupported(repr(schema)[:60])

    def nullable(self, union: list[Any], namespace: str | None) -> tuple[int, Any]:
        """``(the index of null, the other type)`` of a union of null and one type that is not
        itself a union."""
        branches = [self.resolve(s, namespace) for s in union]
        if len(branches) != 2 or "null" not in branches or branches[0] == branches[1] or \
                any(isinstance(b, list) for b in branches):
            raise Unsupported("a union other than null and one type")
        null_at = branches.index("null")
        return null_at, branches[1 - null_at]

    def compile(self, what: str, scope: Mapping[str, Any]) -> Callable[..., Any]:
        """The function the lines define (their first line is its ``def``), made inside a maker
        whose parameters are ``scope`` and the constants: the names it uses are cells, not
        global lookups."""
        names = {**scope, **self.consts}
        source = "\n".join([f"def make({', '.join(names)}):"] + ["    " + line for line in self.lines]
                           + [f"    return {self.lines[0].split()[1].split('(')[0]}"])
        made: dict[str, Any] = {}
        exec(_compiled(source, f"<traintrace {what}>"), made)  # noqa: S102 - our own source
        fn = made["make"](**names)
        fn.source = source  # for the curious and the tests
        return fn  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=256)
def _compiled(source: str, filename: str) -> CodeType:
    """The code of a maker's source, compiled once a process: every codec of the same schemas
    writes the same source (the constants' values are the maker's arguments, not in the text),
    and compiling it took most of a codec's construction (~7 ms a function)."""
    return compile(source, filename, "exec")


__all__ = ["PRIMITIVES", "SourceWriter", "Unsupported", "varint"]
