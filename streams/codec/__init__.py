"""Avro codec of traintrace: schemas of ``schemas/v<N>/``, single-object and Confluent wire
formats, strict encoding, total decoding.

Public API::

    Codec(schemas=None, *, registry_url=None, registry_config=None, registry_client=None,
          wire_format=None)
        .encode_event(event: dict) -> bytes          .decode_event(data: bytes) -> dict
        .encode_record(name: str, record: dict) -> bytes
        .decode_record(data: bytes) -> tuple[str, dict]
        .encode(obj: dict) -> bytes                  .decode(data: bytes) -> dict
        .decode_with_name(data) -> tuple[str, dict]  .register_all() -> dict[str, int]
        .event_types, .record_names, .wire_format
    encode_event, decode_event, encode_record, decode_record, encode, decode  (default codec)
    default_codec() -> Codec
    DecodeError(reason, message)   .reason in DECODE_REASONS:
        EMPTY, BAD_MAGIC, UNKNOWN_FINGERPRINT, UNKNOWN_SCHEMA_ID, TRUNCATED, BAD_BODY
    EncodeError(field, message)    .field names the offending field ("type" for the type)
    SchemaRegistryUnavailable      registry configured but unreachable (retry, do not dead-letter)
    SchemaSet, SchemaInfo, default_schema_set(), schema_fingerprint()
    Codec.headers: RecordHeaders   .record(name) / .event(type) / .for_value(bytes) /
        .dead_letter(kind, original_headers) -> [(key, bytes)], computed once per name
        (``traintrace.type``, ``traintrace.schema-fingerprint``, ``traintrace.schema-version``,
        ``content-type``; see streams.codec.headers)

Canonical form: an event is the flat dict of the JSON Lines test vectors (envelope, ``"type"``,
the type's fields); a record is its fields plus ``"type"`` (its record name).
"""

from .avro import (
    Codec,
    decode,
    decode_event,
    decode_record,
    default_codec,
    encode,
    encode_event,
    encode_record,
)
from .errors import (
    BAD_BODY,
    BAD_MAGIC,
    DECODE_REASONS,
    EMPTY,
    TRUNCATED,
    UNKNOWN_FINGERPRINT,
    UNKNOWN_SCHEMA_ID,
    CodecError,
    DecodeError,
    EncodeError,
    SchemaRegistryUnavailable,
)
from .headers import RecordHeaders
from .registry import REGISTRY_URL_ENV
from .schemas import (
    AGENT_RECORDS,
    EVENT_RECORD,
    NAMESPACE,
    SchemaInfo,
    SchemaSet,
    default_schema_set,
    schema_fingerprint,
)
from .shapes import TYPE_KEY
from .wire import CONFLUENT, SINGLE_OBJECT, WIRE_FORMATS

#: The event types: the seven of SPEC §4 and ``CheckpointDeleted`` (v9, SPEC §13), the payload
#: branches of ``LineageEvent``.
EVENT_TYPES: tuple[str, ...] = (
    "JobStarted",
    "Progress",
    "CheckpointWritten",
    "CheckpointConsumed",
    "DivergenceReported",
    "RolledBack",
    "JobFinished",
    "CheckpointDeleted",
)

__all__ = [
    "AGENT_RECORDS",
    "BAD_BODY",
    "BAD_MAGIC",
    "CONFLUENT",
    "Codec",
    "CodecError",
    "DECODE_REASONS",
    "DecodeError",
    "EMPTY",
    "EVENT_RECORD",
    "EVENT_TYPES",
    "EncodeError",
    "NAMESPACE",
    "REGISTRY_URL_ENV",
    "RecordHeaders",
    "SINGLE_OBJECT",
    "SchemaInfo",
    "SchemaRegistryUnavailable",
    "SchemaSet",
    "TRUNCATED",
    "TYPE_KEY",
    "UNKNOWN_FINGERPRINT",
    "UNKNOWN_SCHEMA_ID",
    "WIRE_FORMATS",
    "decode",
    "decode_event",
    "decode_record",
    "default_codec",
    "default_schema_set",
    "encode",
    "encode_event",
    "encode_record",
    "schema_fingerprint",
]
