"""Kafka headers naming what a record is, so a consumer can tell a ``RollbackCommand`` from a
``PlanCleared`` (or route, count, filter) without decoding Avro.

Every record traintrace writes carries, in this order::

    traintrace.type                RollbackCommand          (an event: its type, e.g. CheckpointWritten)
    traintrace.schema-fingerprint  bd6618c7cdad68b4         (hex of the 8-byte CRC-64-AVRO fingerprint, as
                                                             single-object encoding carries it after C3 01)
    traintrace.schema-version      schemas/v4               (the folder of the writer schema)
    content-type                   application/vnd.traintrace+avro;record=RollbackCommand;encoding=single-object
    traintrace.schema-id           17                       (only with the Confluent wire format: the registry id)

``record=`` in the content type is the Avro record the value holds (``LineageEvent`` for every
event), ``encoding=`` its framing (``single-object`` or ``confluent``). Values are UTF-8 bytes.

A dead letter (``lineage.dlq``) carries the ``DeadLetter`` headers, then
``traintrace.error-kind: <kind>``, then every header of the original record, in order, its
value byte for byte and its key prefixed ``original.`` (so the dead letter's own
``traintrace.type`` stays the only one: ``original.traintrace.type: Progress``).

The lists are computed once per record name (or event type) per :class:`Codec` and shared:
never mutate one.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Mapping, Protocol, Sequence

from .schemas import EVENT_RECORD, SchemaInfo
from .wire import CONFLUENT, CONFLUENT_HEADER_LEN, SINGLE_OBJECT_HEADER_LEN



class Framing(Protocol):
    """What the headers need of a codec (:class:`streams.codec.Codec` is one): its wire format,
    the names it knows, its schemas, and the frame header each record name is written with."""

    wire_format: str
    record_names: Sequence[str]
    event_types: Sequence[str]
    schemas: Any

    def frame_header(self, info: SchemaInfo) -> bytes: ...

    def record_name_of_id(self, schema_id: int) -> str | None: ...

TYPE_HEADER = "traintrace.type"
FINGERPRINT_HEADER = "traintrace.schema-fingerprint"
VERSION_HEADER = "traintrace.schema-version"
CONTENT_TYPE_HEADER = "content-type"
SCHEMA_ID_HEADER = "traintrace.schema-id"
ERROR_KIND_HEADER = "traintrace.error-kind"
ORIGINAL_PREFIX = "original."
MEDIA_TYPE = "application/vnd.traintrace+avro"

#: Kafka headers as confluent-kafka takes and gives them
Headers = list[tuple[str, bytes | None]]


def content_type(record: str, encoding: str) -> str:
    return f"{MEDIA_TYPE};record={record};encoding={encoding}"


def as_list(headers: Any) -> Headers:
    """Headers as a list of (str key, bytes-or-None value), from what a client gives: None, a
    list/tuple of pairs (confluent-kafka, aiokafka, Faust) or a mapping."""
    if not headers:
        return []
    items: Iterable[Any] = headers.items() if isinstance(headers, Mapping) else headers
    out: Headers = []
    for k, v in items:
        key = k.decode("utf-8", "replace") if isinstance(k, (bytes, bytearray)) else str(k)
        if v is not None and not isinstance(v, bytes):
            v = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        out.append((key, v))
    return out


def header_dict(headers: Any) -> dict[str, bytes | None]:
    """Headers as a dict (the last value of a repeated key wins)."""
    return dict(as_list(headers))


class RecordHeaders:
    """The headers of each record name and event type of one :class:`Codec`, built on first
    use and kept (a Confluent schema id costs one registry call per record name, once)."""

    def __init__(self, codec: Framing) -> None:
        self.codec = codec
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str | None], Headers] = {}
        self._by_frame: dict[bytes, Headers] = {}  # frame header -> headers (records only)

    def _build(self, info: SchemaInfo, type_name: str) -> Headers:
        codec = self.codec
        encoding = codec.wire_format
        out: Headers = [
            (TYPE_HEADER, type_name.encode()),
            (FINGERPRINT_HEADER, info.fingerprint.hex().encode()),
            (VERSION_HEADER, f"schemas/v{info.version}".encode()),
            (CONTENT_TYPE_HEADER, content_type(info.name, encoding).encode()),
        ]
        if encoding == CONFLUENT:
            frame = codec.frame_header(info)  # registers the schema once, as encoding would
            out.append((SCHEMA_ID_HEADER, str(int.from_bytes(frame[1:CONFLUENT_HEADER_LEN], "big")).encode()))
        return out

    def record(self, name: str) -> Headers:
        """The headers of a record the agent or processor writes (``RollbackCommand``, ...)."""
        key = (name, None)
        got = self._cache.get(key)
        if got is None:
            if name == EVENT_RECORD or name not in self.codec.record_names:
                raise KeyError(f"unknown record {name!r}; expected one of {', '.join(self.codec.record_names)}")
            info = self.codec.schemas.reader(name)
            got = self._build(info, name)
            frame = self.codec.frame_header(info)
            with self._lock:
                self._cache[key] = got
                self._by_frame[frame] = got
        return got

    def event(self, event_type: str) -> Headers:
        """The headers of an event on ``lineage.events``: its type (``CheckpointWritten``, ...)
        and the ``LineageEvent`` schema."""
        key = (EVENT_RECORD, event_type)
        got = self._cache.get(key)
        if got is None:
            if event_type not in self.codec.event_types:
                raise KeyError(f"unknown event type {event_type!r}; expected one of {', '.join(self.codec.event_types)}")
            got = self._build(self.codec.schemas.reader(EVENT_RECORD), event_type)
            with self._lock:
                self._cache[key] = got
        return got

    def for_value(self, value: bytes) -> Headers | None:
        """The headers of an encoded record (not an event: its type is inside the body) from
        its frame header; None when the value is not a record this codec writes."""
        got = self._by_frame.get(value[:SINGLE_OBJECT_HEADER_LEN]) or self._by_frame.get(value[:CONFLUENT_HEADER_LEN])
        if got is not None:
            return got
        if value[:1] == b"\xc3":
            info = self.codec.schemas.writer(value[2:SINGLE_OBJECT_HEADER_LEN])
            name = info.name if info is not None else None
        else:
            name = self.codec.record_name_of_id(int.from_bytes(value[1:CONFLUENT_HEADER_LEN], "big"))
        if name is None or name == EVENT_RECORD:
            return None
        self.record(name)
        return self._by_frame.get(value[:SINGLE_OBJECT_HEADER_LEN]) or self._by_frame.get(value[:CONFLUENT_HEADER_LEN])

    def dead_letter(self, error_kind: str, original: Any = None) -> Headers:
        """A dead letter's headers: ``DeadLetter``'s, its error kind, then the original record's
        headers (``original.``-prefixed keys, values as they were)."""
        return [*self.record("DeadLetter"), (ERROR_KIND_HEADER, error_kind.encode()),
                *((ORIGINAL_PREFIX + k, v) for k, v in as_list(original))]


__all__ = [
    "CONTENT_TYPE_HEADER",
    "ERROR_KIND_HEADER",
    "FINGERPRINT_HEADER",
    "Framing",
    "Headers",
    "MEDIA_TYPE",
    "ORIGINAL_PREFIX",
    "RecordHeaders",
    "SCHEMA_ID_HEADER",
    "TYPE_HEADER",
    "VERSION_HEADER",
    "as_list",
    "content_type",
    "header_dict",
]
