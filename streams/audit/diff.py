"""Where a recomputed record and the one found differ, field by field."""

from __future__ import annotations

from typing import Any

from streams.core.events import Event


def values_differ(expected: dict[str, Any], found: dict[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(field, expected, found) of every differing field, nested records as ``a.b``."""
    out: list[tuple[str, Any, Any]] = []
    for k in sorted(set(expected) | set(found)):
        if k == "type" and not prefix:
            continue  # the decoder names the record type; the records themselves have no such field
        e, f = expected.get(k), found.get(k)
        if isinstance(e, dict) and isinstance(f, dict):
            out.extend(values_differ(e, f, f"{prefix}{k}."))
        elif e != f:
            out.append((f"{prefix}{k}", e, f))
    return out


def first_diff(a: Event | None, b: Event | None) -> tuple[str | None, Any, Any]:
    """The first field (in declaration order) where two events differ: (field, a's, b's)."""
    if a is None or b is None:
        return None, None, None
    if type(a) is not type(b):
        return "type", type(a).__name__, type(b).__name__
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if x != y and not (x != x and y != y):  # NaN equals NaN here
            return name, x, y
    return None, None, None
