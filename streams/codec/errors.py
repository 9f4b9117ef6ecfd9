"""Errors of the codec.

``decode`` raises :class:`DecodeError` for every input it cannot turn into a record, whatever the
bytes; its ``reason`` is one of :data:`DECODE_REASONS` (a stable, machine-readable code, fit for a
dead-letter record's ``error_kind``). ``encode`` raises :class:`EncodeError` for a value that does
not fit the schema, naming the offending field.

:class:`SchemaRegistryUnavailable` is the one exception that is not about the bytes: a Schema
Registry is configured and could not be reached while looking up an unknown schema id. It is not
a :class:`DecodeError` on purpose: the record may be perfectly valid, so a consumer should retry
(or crash and be restarted) rather than dead-letter it.
"""

from __future__ import annotations
from streams.errors import TraintraceError

#: The input is empty (or ``None``: a Kafka tombstone).
EMPTY = "EMPTY"
#: The first bytes are neither Avro single-object (``C3 01``) nor Confluent (``00``) framing.
BAD_MAGIC = "BAD_MAGIC"
#: Single-object encoding whose CRC-64-AVRO fingerprint names no schema we know (or the schema of
#: another record than the one asked for).
UNKNOWN_FINGERPRINT = "UNKNOWN_FINGERPRINT"
#: Confluent framing whose schema id is unknown to the registry (or no registry is configured, or
#: the id is the schema of another record than the one asked for).
UNKNOWN_SCHEMA_ID = "UNKNOWN_SCHEMA_ID"
#: The bytes end before the header or the body is complete.
TRUNCATED = "TRUNCATED"
#: The body does not match the writer schema (bad union index, bad UTF-8, enum index out of range,
#: unresolvable against the reader, ...) or bytes are left after it.
BAD_BODY = "BAD_BODY"

DECODE_REASONS: tuple[str, ...] = (
    EMPTY,
    BAD_MAGIC,
    UNKNOWN_FINGERPRINT,
    UNKNOWN_SCHEMA_ID,
    TRUNCATED,
    BAD_BODY,
)


class CodecError(TraintraceError):
    """Base class of every error the codec raises."""


class DecodeError(CodecError, ValueError):
    """Bytes that are not a record we can read. ``reason`` is one of :data:`DECODE_REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        if reason not in DECODE_REASONS:  # pragma: no cover - programming error
            raise AssertionError(f"unknown decode reason {reason!r}")
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class EncodeError(CodecError, ValueError):
    """A value that does not fit the schema. ``field`` is the offending field's path in the flat
    form (``"step"``, ``"root.onset_step"``, ``"plans[0].target_step"``), or ``"type"`` for an
    unknown or missing type."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field {field!r}: {message}")
        self.field = field
        self.message = message


class SchemaRegistryUnavailable(CodecError):
    """The configured Schema Registry could not be reached (not a property of the bytes)."""


__all__ = [
    "BAD_BODY",
    "BAD_MAGIC",
    "CodecError",
    "DECODE_REASONS",
    "DecodeError",
    "EMPTY",
    "EncodeError",
    "SchemaRegistryUnavailable",
    "TRUNCATED",
    "UNKNOWN_FINGERPRINT",
    "UNKNOWN_SCHEMA_ID",
]
