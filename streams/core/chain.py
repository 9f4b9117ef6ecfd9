"""The per-job hash chain of SPEC §9 and its canonical encoding.

Canonical bytes of an event: the event type, then every field of SPEC §4 in the fixed order
below (envelope first: ``job_id, seq, incarnation, ts, prev_hash``, then the type's own fields
in the order of SPEC §4; ``CheckpointDeleted``, schemas v9, its ``checkpoint_id``), each written as UTF-8 text followed by one 0x00 byte — integers in
decimal, null as the empty string, doubles as Python's shortest round-trip ``repr`` (``nan``,
``inf``, ``-inf`` for non-finite values). ``hash`` itself is excluded.

Fields added to SPEC §4 after the chain was first defined are written only when they differ
from their default, after the other fields, so the canonical bytes — and so the hashes — of every
event that does not use them stay what they always were and chains written before the field
existed still verify. Two such fields today: ``RolledBack.from_scratch`` (SPEC revision 2, schemas
v4), written as the part ``true`` when true and not at all when false, and
``JobStarted.public_key`` (revision 3, schemas v6), written as its text when not null. The
encoding stays unambiguous: a part never contains 0x00, so such an event has one part more than
any without the field. ``signature`` (revision 3) is never written: it signs the hash
(:mod:`streams.core.seals`).

``hash = SHA-256(bytes.fromhex(prev_hash) || canonical_bytes)``, lower-case hex; the
``prev_hash`` of a job's ``JobStarted`` is 32 zero bytes (64 ``0`` characters).
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from operator import attrgetter
from typing import Any, Callable

from streams.core.events import Event, field_plan

GENESIS = "0" * 64

_ORDER_CACHE: dict[type, tuple[str, ...]] = {}

#: Fields added later (see the module doc), each with how it is written when set: ``from_scratch``
#: as ``true`` when true, ``public_key`` as its text when not null; absent otherwise.
_WRITTEN_WHEN_SET: dict[str, Callable[[Any], Any]] = {
    "from_scratch": lambda v: "true" if v else None, "public_key": lambda v: v}
#: never part of the canonical bytes
_NOT_HASHED = frozenset({"hash", "signature"})


def _field_order(cls: type) -> tuple[str, ...]:
    order = _ORDER_CACHE.get(cls)
    if order is None:
        order = tuple(f.name for f in fields(cls) if f.name not in _NOT_HASHED and f.name not in _WRITTEN_WHEN_SET)
        _ORDER_CACHE[cls] = order
    return order


def _extra_fields(cls: type) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    return tuple((f.name, _WRITTEN_WHEN_SET[f.name]) for f in fields(cls) if f.name in _WRITTEN_WHEN_SET)


#: per event class: its canonical head (type name and 0x00), the getter of its fields in order
#: (a tuple, even of one field) and its fields added later with how each is written
_GETTERS: dict[type, tuple[str, Callable[[Any], tuple[Any, ...]],
                           tuple[tuple[str, Callable[[Any], Any]], ...]]] = {}


def canonical_bytes(event: Event) -> bytes:
    return canonical_with_nulls(event)[0]


def canonical_with_nulls(event: Event) -> tuple[bytes, tuple[int, ...]]:
    """The canonical bytes, and the positions of the fields that are null (the encoding writes
    null and the empty string alike; the fold's duplicate check tells them apart)."""
    writer = _WRITERS.get(type(event))
    if writer is None:
        writer = _WRITERS[type(event)] = _writer(type(event))
    return writer(event)


def _generic(event: Event) -> tuple[bytes, tuple[int, ...]]:
    """:func:`canonical_with_nulls` of any event, value by value (the module doc's rules)."""
    cls = type(event)
    g = _GETTERS.get(cls)
    if g is None:
        order = _field_order(cls)
        getter = attrgetter(*order) if len(order) > 1 else (lambda e, _n=order[0]: (getattr(e, _n),))
        g = _GETTERS[cls] = (cls.__name__ + "\x00", getter, _extra_fields(cls))
    head, get, extra = g
    out = [head]
    nulls: list[int] = []
    for i, v in enumerate(get(event)):
        if v is None:
            out.append("\x00")
            nulls.append(i)
        elif isinstance(v, float):
            out.append(repr(v) + "\x00")
        else:
            out.append(f"{v}\x00")
    for name, text in extra:  # fields added later: only when set (module doc)
        part = text(getattr(event, name))
        if part is not None:
            out.append(f"{part}\x00")
    return "".join(out).encode("utf-8"), tuple(nulls)


#: event class -> its canonical writer (:func:`_writer`)
_WRITERS: dict[type, Callable[[Any], tuple[bytes, tuple[int, ...]]]] = {}
#: the annotated types a writer tests for (any other field is written the generic way)
_WRITTEN_TYPES = frozenset({"str", "int", "float"})


def _writer(cls: type) -> Callable[[Any], tuple[bytes, tuple[int, ...]]]:
    """The canonical writer of one event class, written once: when every value has its
    field's own type (``str``, ``int``, ``float``; or None where the field is nullable), as
    :func:`~streams.core.events.parse_event` and the event reader build them, one f-string
    writes the bytes (an exact ``float`` formats as its ``repr``, an exact ``int`` or ``str``
    as itself: the generic rules); any other value goes the generic way. This runs for every
    event folded (live and in ``analyze``) and every chain checked."""
    order = _field_order(cls)
    extra = _extra_fields(cls)
    # each field's kind as parse_event checks it (an enumerated string is a str)
    kinds = {name: ("str" if isinstance(kind, tuple) else kind, nullable)
             for name, kind, nullable, *_ in field_plan(cls.__name__)}
    names: dict[str, Any] = {"_generic": _generic, "_get": attrgetter(*order) if len(order) > 1 else None}
    checks, parts, lines = [], [], []
    nullable = []
    for i, name in enumerate(order):
        base, nullable_field = kinds[name]
        if base not in _WRITTEN_TYPES:  # (no such field today)
            return _generic
        check = f"type(v{i}) is {base}"
        if nullable_field:
            check = f"(v{i} is None or {check})"
            nullable.append(i)
        checks.append(check)
        parts.append(f"{{v{i}}}\\x00")
    lines.append("def write(e):")
    if len(order) > 1:
        lines.append(f"    {', '.join(f'v{i}' for i in range(len(order)))} = _get(e)")
    else:
        lines.append(f"    v0 = e.{order[0]}")
    lines.append(f"    if not ({' and '.join(checks)}):")
    lines.append("        return _generic(e)")
    lines.append("    nulls = ()")
    for i in nullable:
        lines.append(f"    if v{i} is None:")
        lines.append(f"        v{i} = ''")
        lines.append(f"        nulls += ({i},)")
    text = f"f\"{cls.__name__}\\x00{''.join(parts)}\""
    if extra:  # fields added later: only when set (module doc)
        lines.append(f"    text = {text}")
        for k, (name, how) in enumerate(extra):
            names[f"_how{k}"] = how
            lines.append(f"    part = _how{k}(e.{name})")
            lines.append("    if part is not None:")
            lines.append("        text += f'{part}\\x00'")
        lines.append("    return text.encode('utf-8'), nulls")
    else:
        lines.append(f"    return {text}.encode('utf-8'), nulls")
    exec(compile("\n".join(lines) + "\n", f"<canonical {cls.__name__}>", "exec"), names)  # noqa: S102 - our own source
    write: Callable[[Any], tuple[bytes, tuple[int, ...]]] = names["write"]
    return write


def chain_hash(prev_hash: str | None, event: Event, canonical: bytes | None = None) -> str:
    prev = bytes.fromhex(prev_hash) if prev_hash else bytes(32)
    return hashlib.sha256(prev + (canonical if canonical is not None else canonical_bytes(event))).hexdigest()


def verify_link(event: Event, expected_prev: str | None, canonical: bytes | None = None,
                hash_checked: bool = False) -> str | None:
    """Return None when ``event`` carries a valid link, else the reason.

    ``expected_prev`` is the job's previous head (``GENESIS`` for ``seq`` 0); None means the
    previous event carried no hash, so only the event's own hash is checked. ``hash_checked``:
    the caller computed the event's hash already; only the link is checked.
    """
    if event.hash is None:
        return None
    prev = event.prev_hash
    if expected_prev is not None and prev != expected_prev:
        return f"prev_hash {prev!r} does not match the previous head {expected_prev!r}"
    if hash_checked:
        return None
    try:
        computed = chain_hash(prev, event, canonical)
    except ValueError:
        return f"prev_hash {prev!r} is not hex"
    if computed != event.hash:
        return f"hash {event.hash!r} does not match the computed {computed!r}"
    return None


def event_digest(event: Event, canonical: tuple[bytes, tuple[int, ...]] | None = None) -> int:
    """A stable 63-bit digest of an event's content, to tell identical from conflicting
    duplicates: over its SPEC §9 canonical bytes, which fields are null, and its ``hash``."""
    cb, nulls = canonical if canonical is not None else canonical_with_nulls(event)
    raw = b"%b\x01%r\x01%b" % (cb, nulls, (event.hash or "").encode())
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") >> 1 or 1
