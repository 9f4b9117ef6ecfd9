"""The events a training job emits (SPEC §4), as frozen, typed values.

``parse_event`` turns the canonical dict form (the JSON Lines vectors, the decoded Avro
record) into one of these; it validates every field and raises :class:`InvalidEvent` naming
the field. ``event_to_dict`` is its inverse. Nothing here does I/O.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Union

from streams.core.errors import InvalidEvent

CONSUMPTION_MODES = (
    "INIT",
    "MERGE",
    "DISTILL",
    "PBT_EXPLOIT",
    "REFERENCE",
    "REPLAY",
    "EVAL_ONLY",
    "OTHER",
)
FINISH_STATUSES = ("SUCCEEDED", "FAILED", "CANCELLED")

# the metadata of a field (the rest of its validation comes from its annotation: see _spec)
#: the values an enumerated string field may take
ONE_OF = "one_of"
#: a nullable field that must be present all the same (null, not absent)
PRESENT = "present"


@dataclass(frozen=True, slots=True)
class Envelope:
    job_id: str
    seq: int
    incarnation: int
    ts: int
    prev_hash: str | None
    hash: str | None
    #: SPEC revision 3 (schemas v6): the job's Ed25519 signature over this event's ``hash``
    #: (hex, 128 characters; :mod:`streams.core.seals`), or None. Not part of the canonical
    #: bytes: a signature seals a hash, it is not hashed itself.
    signature: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class JobStarted(Envelope):
    cohort_id: str
    base_model: str
    base_checkpoint_id: str | None
    config_hash: str | None
    #: SPEC revision 3 (schemas v6): the job's Ed25519 public key (hex, 64 characters); every
    #: later event of the job must then be sealed by it (:mod:`streams.core.seals`)
    public_key: str | None = None


@dataclass(frozen=True, slots=True)
class Progress(Envelope):
    step: int
    epoch: int
    #: None (schemas v8): progress recorded without a training loss; present all the same
    loss: float | None = field(metadata={PRESENT: True})
    grad_norm: float | None
    lr: float | None


@dataclass(frozen=True, slots=True)
class CheckpointWritten(Envelope):
    checkpoint_id: str
    step: int
    epoch: int
    content_hash: str
    uri: str


@dataclass(frozen=True, slots=True)
class CheckpointConsumed(Envelope):
    source_checkpoint_id: str
    step: int
    mode: str = field(metadata={ONE_OF: CONSUMPTION_MODES})


@dataclass(frozen=True, slots=True)
class DivergenceReported(Envelope):
    onset_step: int
    detector: str
    reason: str


@dataclass(frozen=True, slots=True)
class RolledBack(Envelope):
    restored_checkpoint_id: str | None
    resumed_step: int
    command_id: str | None
    #: SPEC revision 2: the job restarted from its pretrained ``base_model`` alone (it consumes
    #: nothing, not even ``base_checkpoint_id``; ``restored_checkpoint_id`` is then null)
    from_scratch: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointDeleted(Envelope):
    """Schemas v9 (SPEC §13, not in §4's table: the name and shape are this implementation's):
    the job deleted (is about to delete) its own checkpoint ``checkpoint_id``, which the referee
    marked deletable. Recorded before the files go, so the log never lacks a deletion that
    happened; the fold and the audit check it was deletable (:mod:`streams.core.retention`)."""

    checkpoint_id: str


@dataclass(frozen=True, slots=True)
class JobFinished(Envelope):
    status: str = field(metadata={ONE_OF: FINISH_STATUSES})
    final_checkpoint_id: str | None


Event = Union[
    JobStarted,
    Progress,
    CheckpointWritten,
    CheckpointConsumed,
    DivergenceReported,
    RolledBack,
    JobFinished,
    CheckpointDeleted,
]

EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        JobStarted,
        Progress,
        CheckpointWritten,
        CheckpointConsumed,
        DivergenceReported,
        RolledBack,
        JobFinished,
        CheckpointDeleted,
    )
}

# field name -> (kind, nullable); kinds: "str", "int", "float", "bool", or the tuple of an
# enumerated string. Derived from the dataclasses above, the one declaration of each event's
# shape (tests/unit/test_event_shapes.py checks the .avsc files against them).
_KINDS = {"str": "str", "int": "int", "float": "float", "bool": "bool"}


def _spec(cls: type) -> tuple[dict[str, tuple[Any, bool]], set[str], dict[str, Any]]:
    """(field -> (kind, nullable), the fields that may be absent, their values when absent) of
    an event class: a field is nullable when annotated ``X | None``; a nullable field may be
    absent (it is then null) unless marked :data:`PRESENT`; a field with another default may be
    absent too (a field added later, whose default is what every older event meant)."""
    spec: dict[str, tuple[Any, bool]] = {}
    optional: set[str] = set()
    defaults: dict[str, Any] = {}
    for f in fields(cls):
        annotation = str(f.type).replace(" ", "")
        nullable = annotation.endswith("|None")
        kind = f.metadata.get(ONE_OF) or _KINDS[annotation.removesuffix("|None")]
        spec[f.name] = (kind, nullable)
        has_default = f.default is not MISSING
        if (nullable and not f.metadata.get(PRESENT)) or has_default:
            optional.add(f.name)
        if has_default and not nullable:
            defaults[f.name] = f.default
    return spec, optional, defaults


_ENVELOPE_SPEC: dict[str, tuple[Any, bool]] = _spec(Envelope)[0]
_TYPE_SPEC: dict[str, dict[str, tuple[Any, bool]]] = {}
# optional keys: may be absent from the dict (treated as null, or as their default below)
_OPTIONAL: set[str] = set()
# optional keys that are not nullable: their value when absent
_DEFAULTS: dict[str, Any] = {}
for _name, _cls in EVENT_TYPES.items():
    _all, _opt, _dft = _spec(_cls)
    _TYPE_SPEC[_name] = {k: v for k, v in _all.items() if k not in _ENVELOPE_SPEC}
    _OPTIONAL |= _opt
    _DEFAULTS.update(_dft)


def _check(name: str, value: Any, kind: Any, nullable: bool) -> Any:
    if value is None:
        if nullable:
            return None
        raise InvalidEvent(name, "is required and may not be null")
    if kind == "str":
        if not isinstance(value, str):
            raise InvalidEvent(name, f"must be a string, got {type(value).__name__}")
        if name in ("job_id", "checkpoint_id", "source_checkpoint_id", "cohort_id") and not value:
            raise InvalidEvent(name, "must not be empty")
        if "\x00" in value:
            # SPEC §10 separates the parts of every hash with 0x00: a part may not contain it
            raise InvalidEvent(name, "must not contain a NUL character")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidEvent(name, f"must be an integer, got {type(value).__name__}")
        if name in ("seq", "incarnation") and value < 0:
            raise InvalidEvent(name, f"must be >= 0, got {value}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidEvent(name, f"must be a number, got {type(value).__name__}")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise InvalidEvent(name, f"must be a boolean, got {type(value).__name__}")
        return value
    # enum
    if value not in kind:
        raise InvalidEvent(name, f"must be one of {', '.join(kind)}, got {value!r}")
    return value


_MISSING = object()
_NONEMPTY = frozenset({"job_id", "checkpoint_id", "source_checkpoint_id", "cohort_id"})
_NONNEGATIVE = frozenset({"seq", "incarnation"})
_PLANS: dict[str, tuple[tuple[str, Any, bool, bool], ...]] = {}


def _plan(etype: str) -> tuple[tuple[str, Any, bool, bool], ...]:
    plan = _PLANS.get(etype)
    if plan is None:
        plan = _PLANS[etype] = tuple(
            (name, kind, nullable, name in _OPTIONAL)
            for spec in (_ENVELOPE_SPEC, _TYPE_SPEC[etype]) for name, (kind, nullable) in spec.items())
    return plan


def parse_event(data: Any) -> Event:
    """Validate the canonical dict form of one event and return the typed event."""
    if not isinstance(data, dict):
        raise InvalidEvent("(event)", f"must be an object, got {type(data).__name__}")
    etype = data.get("type")
    parser = _PARSERS.get(etype) if isinstance(etype, str) else None
    if parser is None:
        raise InvalidEvent("type", f"unknown event type {etype!r}; expected one of {', '.join(_TYPE_SPEC)}")
    return parser(data)


def _parser_source(etype: str) -> tuple[str, dict[str, Any]]:
    """The source of the parser of one event type and the names it uses: every field of
    :func:`_plan` read, checked and converted in turn, the common valid case of each kind
    written inline (a type test or two); anything else goes through :func:`_check`, which
    converts or raises with the reason. The same answer, and the same first error, as checking
    field by field through the plan (``tests/unit/test_parse_event.py``), for less (×1.2–1.5
    faster, docs/benchmarks.md, nineteenth round): this runs for every event ``analyze`` and
    the JSON Lines readers take, and every event a job client emits."""
    names: dict[str, Any] = {"_MISSING": _MISSING, "_check": _check, "InvalidEvent": InvalidEvent,
                             "_cls": EVENT_TYPES[etype]}
    lines = ["def parse(data):", "    get = data.get"]
    args = []
    for i, (name, kind, nullable, optional) in enumerate(_plan(etype)):
        var = f"f{i}"
        names[f"_k{i}"] = kind
        lines.append(f"    v = get({name!r}, _MISSING)")
        lines.append("    if v is _MISSING:")
        if optional:
            names[f"_d{i}"] = _DEFAULTS.get(name)
            lines.append(f"        v = _d{i}")
        else:
            lines.append(f"        raise InvalidEvent({name!r}, 'is missing')")
        if kind == "str":
            fast = "type(v) is str and '\\x00' not in v" + (" and v" if name in _NONEMPTY else "")
        elif kind == "int":
            fast = "type(v) is int" + (" and v >= 0" if name in _NONNEGATIVE else "")
        elif kind in ("float", "bool"):
            fast = f"type(v) is {kind}"
        else:  # an enumerated string
            fast = f"type(v) is str and v in _k{i}"
        if nullable:
            lines.append("    if v is None:")
            lines.append(f"        {var} = None")
        lines.append(f"    {'elif' if nullable else 'if'} {fast}:")
        lines.append(f"        {var} = v")
        lines.append("    else:")
        lines.append(f"        {var} = _check({name!r}, v, _k{i}, {nullable})")
        args.append(f"{name}={var}")
    fields_of = [name for name, *_ in _plan(etype)]
    if "from_scratch" in fields_of:  # SPEC §4: a restart from scratch restores no checkpoint
        fs, rc = fields_of.index("from_scratch"), fields_of.index("restored_checkpoint_id")
        lines.append(f"    if f{fs} and f{rc} is not None:")
        lines.append("        raise InvalidEvent('restored_checkpoint_id', 'must be null when from_scratch is true, got '"
                     f" + repr(f{rc}))")
    lines.append(f"    return _cls({', '.join(args)})")
    return "\n".join(lines) + "\n", names


def _parser(etype: str) -> Callable[[dict[str, Any]], Event]:
    source, names = _parser_source(etype)
    exec(compile(source, f"<parse_event {etype}>", "exec"), names)  # noqa: S102 - our own source
    parse: Callable[[dict[str, Any]], Event] = names["parse"]
    return parse


def field_plan(etype: str) -> tuple[tuple[str, Any, bool, bool, Any], ...]:
    """What :func:`parse_event` checks of an event type, field by field in the event's order:
    ``(name, kind, nullable, optional, value when absent)``; a kind is ``"str"``, ``"int"``,
    ``"float"``, ``"bool"`` or the tuple of an enumerated string. For readers that check as they
    read (:mod:`streams.codec.event_reader`)."""
    return tuple((name, kind, nullable, optional, _DEFAULTS.get(name)) for name, kind, nullable, optional in _plan(etype))


def nonempty_fields() -> frozenset[str]:
    """The string fields :func:`parse_event` refuses empty."""
    return _NONEMPTY


def nonnegative_fields() -> frozenset[str]:
    """The integer fields :func:`parse_event` refuses negative."""
    return _NONNEGATIVE


def event_type(event: Event) -> str:
    return type(event).__name__


#: fields added after the first wire format, left out of the dict form while null so the dict
#: (and every file written from it) of an event that does not use them stays what it was
_LEFT_OUT_WHEN_NULL = frozenset({"signature", "public_key"})


def event_to_dict(event: Event) -> dict[str, Any]:
    d: dict[str, Any] = {"type": type(event).__name__}
    for f in fields(event):
        v = getattr(event, f.name)
        if v is None and f.name in _LEFT_OUT_WHEN_NULL:
            continue
        d[f.name] = v
    return d


def is_nonfinite(x: float | None) -> bool:
    return x is not None and not math.isfinite(x)


#: event type -> its parser (:func:`_parser_source`)
_PARSERS: dict[str, Callable[[dict[str, Any]], Event]] = {etype: _parser(etype) for etype in _TYPE_SPEC}
