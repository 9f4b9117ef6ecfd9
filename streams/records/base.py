"""What every typed record shares: its Avro record name, and the conversion to and from the
plain value the codec writes and reads (the codec boundary)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar, Mapping, TypeVar

R = TypeVar("R", bound="Record")

#: fields a signer adds (``streams.signing``): left out of a record's value while unset, as the
#: builders always left them, so a value is what it was before it is signed
SIGNER_FIELDS = frozenset({"signature", "key_id"})


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def _typed(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_typed(x) for x in v)
    return v


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """The field names of a record class, in order (computed once a class: the referee builds a
    record for every command, alert and manifest)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


class Record:
    """A frozen dataclass of one record kind (``NAME``: its Avro record name). Its fields are
    the schema's, in the schema's order (``tests/unit/test_record_shapes.py`` checks them
    against the newest ``.avsc``); arrays are tuples."""

    __slots__ = ()
    NAME: ClassVar[str]

    def to_value(self) -> dict[str, Any]:
        """The plain value the codec encodes (arrays as lists; unset signer fields left out)."""
        out: dict[str, Any] = {}
        for name in _field_names(type(self)):
            v = getattr(self, name)
            if v is None and name in SIGNER_FIELDS:
                continue
            out[name] = _plain(v)
        return out

    @classmethod
    def from_value(cls: type[R], value: Mapping[str, Any]) -> R:
        """The record of a decoded value (fields the value lacks take their defaults; keys the
        record does not have, a newer writer's, are left out)."""
        names = _field_names(cls)
        return cls(**{k: _typed(v) for k, v in value.items() if k in names})
