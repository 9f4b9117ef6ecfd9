"""``parse_event`` (a parser written once per event type, streams.core.events) against the plain
reading of its plan, field by field: the same event, or the same first error (field and
reason), for any dict: valid events, fields missing, null, of the wrong type, empty, negative,
with a NUL, an enum value out of its set, a restart from scratch that names a checkpoint, an
unknown or unhashable type."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import InvalidEvent
from streams.core.events import (
    _DEFAULTS,
    _MISSING,
    _NONEMPTY,
    _NONNEGATIVE,
    _TYPE_SPEC,
    EVENT_TYPES,
    _check,
    _plan,
    event_to_dict,
    field_plan,
    parse_event,
)
from streams.testing.cohort import chain_events, generate_cohorts


def reference(data: Any) -> Any:
    """The plan read field by field (the parser before it was written per type)."""
    if not isinstance(data, dict):
        raise InvalidEvent("(event)", f"must be an object, got {type(data).__name__}")
    etype = data.get("type")
    if not isinstance(etype, str) or etype not in _TYPE_SPEC:
        raise InvalidEvent("type", f"unknown event type {etype!r}; expected one of {', '.join(_TYPE_SPEC)}")
    values: dict[str, Any] = {}
    for name, kind, nullable, optional in _plan(etype):
        v = data.get(name, _MISSING)
        if v is _MISSING:
            if not optional:
                raise InvalidEvent(name, "is missing")
            v = _DEFAULTS.get(name)
        if v is None and nullable:
            values[name] = None
            continue
        if v is not None:
            t = type(v)
            if kind == "str" and t is str and "\x00" not in v and (v or name not in _NONEMPTY) \
                    or kind == "int" and t is int and (v >= 0 or name not in _NONNEGATIVE) \
                    or kind == "float" and t is float or kind == "bool" and t is bool \
                    or isinstance(kind, tuple) and t is str and v in kind:
                values[name] = v
                continue
        values[name] = _check(name, v, kind, nullable)
    if values.get("from_scratch") and values["restored_checkpoint_id"] is not None:
        raise InvalidEvent("restored_checkpoint_id", "must be null when from_scratch is true, got "
                           f"{values['restored_checkpoint_id']!r}")
    return EVENT_TYPES[etype](**values)


def outcome(parse, data: Any) -> Any:
    try:
        return ("event", comparable(parse(data)))
    except InvalidEvent as exc:
        return ("invalid", exc.field, exc.reason)


def comparable(ev: Any) -> tuple[Any, ...]:
    """An event as its class and fields, a NaN as a marker: two parses of one NaN loss compare
    equal on every Python (3.13's dataclass ``__eq__`` compares field by field with ``==``, and
    NaN != NaN; before, it compared tuples, where one NaN object equals itself)."""
    return (type(ev).__name__,) + tuple("<nan>" if isinstance(v, float) and v != v else v
                                        for v in (getattr(ev, f.name) for f in dataclasses.fields(ev)))


_ODD = st.sampled_from([None, "", "x", "a\x00b", 0, -1, 7, 2**70, 1.5, float("nan"), True, False, [], {}, ["x"],
                        "INIT", "SUCCEEDED", "NOPE"])


def _value(kind: Any):
    good = {"str": st.text(max_size=6), "int": st.integers(-3, 2**40), "float": st.floats(allow_nan=True) | st.integers(-2, 2),
            "bool": st.booleans()}.get(kind) if isinstance(kind, str) else st.sampled_from(kind)
    return st.one_of(good, _ODD)


@st.composite
def event_dicts(draw):
    etype = draw(st.sampled_from(sorted(EVENT_TYPES)))
    data: dict[str, Any] = {"type": etype}
    for name, kind, _nullable, _optional, _default in field_plan(etype):
        mode = draw(st.sampled_from(["valid"] * 6 + ["absent", "odd"]))
        if mode == "valid":
            data[name] = draw(_value(kind))
        elif mode == "odd":
            data[name] = draw(_ODD)
    if draw(st.booleans()):
        data["type"] = draw(st.sampled_from([etype, "NoSuchEvent", None, 3, [], {}, ["Progress"]]))
    return data


def _base(etype: str) -> dict[str, Any]:
    """A valid dict of ``etype``: every field with a value of its kind."""
    value = {"str": "v", "int": 3, "float": 0.5, "bool": False}
    return {"type": etype, **{name: value[kind] if isinstance(kind, str) else kind[0]
                              for name, kind, *_ in field_plan(etype)}}


_ABSENT = object()
_EVERY = [_ABSENT, None, "", "x", "a\x00b", 0, -1, 2**70, 1.5, float("nan"), True, [], {}, ["x"], "INIT", "SUCCEEDED"]


@pytest.mark.parametrize("etype", sorted(EVENT_TYPES))
def test_every_field_with_every_odd_value(etype):
    """Each field of each type, absent or holding each odd value, alone; then each pair of
    fields both odd (the first error is the first field in the plan's order)."""
    names = [name for name, *_ in field_plan(etype)]

    def check(**changed: Any) -> None:
        data = _base(etype)
        for name, v in changed.items():
            if v is _ABSENT:
                del data[name]
            else:
                data[name] = v
        assert outcome(parse_event, data) == outcome(reference, data), changed

    check()
    for name in names:
        for v in _EVERY:
            check(**{name: v})
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for va in (_ABSENT, None, [], -1):
                for vb in (_ABSENT, "", 1.5, ["x"]):
                    check(**{a: va, b: vb})


@settings(max_examples=150, deadline=None)
@given(data=event_dicts())
def test_random_dicts_parse_as_the_plan_reads_them(data):
    assert outcome(parse_event, data) == outcome(reference, data)


def test_generated_cohorts_parse_alike():
    for ev in generate_cohorts(jobs=40, cohort_size=10, steps=120, seed=3, prefix="p"):
        got = outcome(parse_event, ev)
        assert got == outcome(reference, ev)
        assert got[0] == "event" and comparable(parse_event(event_to_dict(parse_event(ev)))) == got[1]


@pytest.mark.parametrize("data, field", [
    ({"type": []}, "type"),
    ({"type": {"a": 1}}, "type"),
    ([], "(event)"),
    ({"type": "RolledBack", "job_id": "j", "seq": 1, "incarnation": 0, "ts": 1, "restored_checkpoint_id": "c",
      "resumed_step": 3, "command_id": None, "from_scratch": True}, "restored_checkpoint_id"),
])
def test_odd_shapes_are_invalid_events_not_crashes(data, field):
    with pytest.raises(InvalidEvent) as err:
        parse_event(data)
    assert err.value.field == field


# -- the canonical bytes (streams.core.chain: a writer per event class) -----------------------------

class _Float(float):
    def __repr__(self) -> str:
        return "_Float(" + float.__repr__(self) + ")"


@pytest.mark.parametrize("etype", sorted(EVENT_TYPES))
def test_canonical_bytes_are_the_generic_ones(etype):
    """Each field of each type null, or holding a value of another type than its own (which
    the typed API refuses, but a caller may build): the generic bytes all the same."""
    from dataclasses import fields, replace

    from streams.core.chain import _generic, canonical_with_nulls

    ev = parse_event(_base(etype))
    assert canonical_with_nulls(ev) == _generic(ev)
    for f in fields(ev):
        for odd in (None, 1, _Float(2.5), True, "s", "", float("-0.0"), float("nan"), 10**30, "\u00e9\U0001f600"):
            odd_ev = replace(ev, **{f.name: odd})
            assert canonical_with_nulls(odd_ev) == _generic(odd_ev), (f.name, odd)


def test_canonical_bytes_of_generated_cohorts_are_the_generic_ones():
    from streams.core.chain import _generic, canonical_with_nulls

    for ev in chain_events(generate_cohorts(jobs=30, cohort_size=10, steps=120, seed=5, prefix="c")):
        e = parse_event(ev)
        assert canonical_with_nulls(e) == _generic(e)
