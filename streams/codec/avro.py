"""The codec: canonical dicts ↔ framed Avro bytes.

>>> from streams.codec import Codec
>>> codec = Codec()                       # single-object encoding, schemas/ of this repository
>>> data = codec.encode_event({"type": "Progress", "job_id": "A", "seq": 1, "incarnation": 0,
...                            "ts": 1, "step": 10, "epoch": 0, "loss": 2.0, "grad_norm": None,
...                            "lr": None})
>>> codec.decode_event(data)["step"]
10

One :class:`Codec` holds everything built once: the parsed schemas, the compiled shape checks,
one read plan per known writer schema, the frame headers. Encoding writes with fastavro's
``schemaless_writer``; decoding reads with ``schemaless_reader`` (no schema resolution when the
writer is the current reader). It is safe to share between threads.

The wire format written is Avro single-object encoding unless a Schema Registry is configured
(``registry_url=``, ``registry_client=`` or ``$TRAINTRACE_SCHEMA_REGISTRY_URL``), then the
Confluent wire format; ``wire_format=`` forces one. Decoding accepts both, whatever is written.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from io import BytesIO
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from fastavro import schemaless_reader, schemaless_writer

from streams.core.events import parse_event

from . import errors as E
from .batch import batch_writer
from .event_reader import event_reader
from .record_writer import record_writer
from .errors import DecodeError, EncodeError
from .headers import RecordHeaders
from .registry import RegistryBinding, registry_url_from_env
from .registry import registry_client as _registry_client
from .schemas import AGENT_RECORDS, EVENT_RECORD, SchemaInfo, SchemaSet, default_schema_set
from .shapes import TYPE_KEY, EventShape, RecordShape

if TYPE_CHECKING:
    from streams.core.events import Event
    from streams.records import Record

from .wire import (
    CONFLUENT,
    CONFLUENT_HEADER_LEN,
    SINGLE_OBJECT,
    SINGLE_OBJECT_HEADER_LEN,
    WIRE_FORMATS,
    confluent_header,
    single_object_header,
)

_NEGATIVE_CACHE_MAX = 1024
#: a _ReadPlan's typed reader not made yet
_UNBUILT = object()


class _ReadPlan:
    """How to read a body written with one writer schema."""

    __slots__ = ("writer", "reader", "name", "from_avro", "label", "raw", "typed")

    def __init__(self, writer: SchemaInfo, reader: SchemaInfo, shape: EventShape | RecordShape) -> None:
        self.writer = writer.parsed
        # No resolution when the writer is the current reader: fastavro's fast path.
        self.reader = None if writer.fingerprint == reader.fingerprint else reader.parsed
        self.name = reader.name
        self.from_avro = shape.from_avro
        self.label = f"{writer.name} v{writer.version}" if writer.version else f"{writer.name} (added writer)"
        self.raw = writer.raw
        #: the hand reader to the typed event (streams.codec.event_reader), made on first use;
        #: only for events written with the current schema (an older writer's fields are resolved
        #: against the reader's defaults, which only fastavro does)
        self.typed: Any = _UNBUILT if self.reader is None and self.name == EVENT_RECORD else None


def _as_bytes(data: Any) -> bytes:
    if data is None:
        raise DecodeError(E.EMPTY, "no value (tombstone)")
    if type(data) is bytes:
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise DecodeError(E.BAD_BODY, f"expected bytes, got {type(data).__name__}")


class Codec:
    """Encoder and decoder of every traintrace record.

    :param schemas: the schema set (default: ``schemas/``, parsed once per process).
    :param registry_url: a Schema Registry URL (``http://...`` or ``mock://...``); ``None``
        (default) reads ``$TRAINTRACE_SCHEMA_REGISTRY_URL``; ``""`` means no registry whatever the
        environment. With one, encoding writes the Confluent wire format and Confluent frames
        with unknown ids are resolved through it (subjects: the record's full name).
    :param registry_config: extra ``SchemaRegistryClient`` configuration (auth, TLS, ...).
    :param registry_client: a ready client instead of a URL.
    :param wire_format: ``"single-object"`` or ``"confluent"`` to force what is written.
    """

    def __init__(
        self,
        schemas: SchemaSet | None = None,
        *,
        registry_url: str | None = None,
        registry_config: Mapping[str, Any] | None = None,
        registry_client: Any = None,
        wire_format: str | None = None,
    ) -> None:
        self.schemas = schemas if schemas is not None else default_schema_set()
        if registry_client is None:
            url = registry_url if registry_url is not None else registry_url_from_env()
            if url:
                registry_client = _registry_client(url, registry_config)
        self.registry = RegistryBinding(registry_client) if registry_client is not None else None
        if wire_format is None:
            wire_format = CONFLUENT if self.registry is not None else SINGLE_OBJECT
        if wire_format not in WIRE_FORMATS:
            raise ValueError(f"wire_format must be one of {WIRE_FORMATS}, got {wire_format!r}")
        if wire_format == CONFLUENT and self.registry is None:
            raise ValueError("the Confluent wire format needs a Schema Registry (registry_url=...)")
        self.wire_format = wire_format

        # Readers and shapes (current version of each record).
        self._event_info = self.schemas.reader(EVENT_RECORD)
        self.event_shape = EventShape(self._event_info)
        self._shapes: dict[str, EventShape | RecordShape] = {EVENT_RECORD: self.event_shape}
        for name, info in self.schemas.readers.items():
            if name != EVENT_RECORD:
                self._shapes[name] = RecordShape(info)
        #: the event types (payload branches), e.g. ``("JobStarted", "Progress", ...)``
        self.event_types: tuple[str, ...] = self.event_shape.event_types
        #: every record name but the event record, e.g. ``("Alert", "DeadLetter", ...)``
        self.record_names: tuple[str, ...] = tuple(sorted(n for n in self._shapes if n != EVENT_RECORD))
        overlap = set(self.event_types) & set(self._shapes)
        if overlap:
            raise ValueError(f"event types and record names overlap: {sorted(overlap)}")

        # Read plans for every known writer, by fingerprint; by schema id as learnt.
        self._by_fp: dict[bytes, _ReadPlan] = {}
        for fp, winfo in self.schemas.by_fingerprint.items():
            self._by_fp[fp] = _ReadPlan(winfo, self.schemas.reader(winfo.name), self._shapes[winfo.name])
        self._by_id: dict[int, _ReadPlan] = {}
        # decode_event's fast path: full frame header (10 or 5 bytes) -> plan, events only.
        self._event_headers: dict[bytes, _ReadPlan] = {
            single_object_header(fp): plan for fp, plan in self._by_fp.items() if plan.name == EVENT_RECORD
        }
        self._unknown_ids: set[int] = set()
        self._lock = threading.Lock()

        # Frame headers of what we write, by record name (Confluent ones filled lazily).
        self._headers: dict[str, bytes] = {}
        if wire_format == SINGLE_OBJECT:
            for name, info in self.schemas.readers.items():
                self._headers[name] = single_object_header(info.fingerprint)
        #: the Kafka headers of each record name and event type (streams.codec.headers)
        self.headers = RecordHeaders(self)
        #: encode_event_batch's hand writer (None: not made yet; False: the schema is not its layout)
        self._batch_writer: Any = None
        #: encode_record's hand writers (streams.codec.record_writer), by record name (False: none)
        self._record_writers: dict[str, Any] = {}

    # -- encoding -------------------------------------------------------------------------------

    def encode_event(self, event: Mapping[str, Any]) -> bytes:
        """Encode one event (flat dict with ``"type"``, SPEC §4)."""
        datum = self.event_shape.to_avro(event)
        return self._write(self._event_info, datum)

    def encode_record(self, name: str, record: Mapping[str, Any]) -> bytes:
        """Encode one record of the agent or processor (``RollbackCommand``, ``Alert``, ...).
        ``record`` may hold ``"type": name``. A record of plain fields is written by hand
        (:mod:`streams.codec.record_writer`, the same bytes) when it can be without doubt."""
        writer = self._record_writers.get(name)
        if writer is None and name in self._shapes and name != EVENT_RECORD and name in self._headers:
            # made once its frame header is known (on the Confluent wire: after the generic path's
            # first write registered the schema, so an unreachable registry fails as before)
            writer = self._record_writers[name] = record_writer(self.schemas.reader(name).raw, self._headers[name]) or False
        if writer:
            value = writer(record)
            if value is not None:
                return value
        shape = self._shapes.get(name)
        if shape is None or name == EVENT_RECORD:
            raise EncodeError(TYPE_KEY, f"unknown record {name!r}; expected one of {', '.join(self.record_names)}")
        datum = shape.to_avro(record)
        return self._write(self.schemas.reader(name), datum)

    def encode_event_batch(self, cohort_id: str, events: Sequence[Mapping[str, Any]]) -> bytes:
        """Encode an ``EventBatch`` of routed events (no tick): the bytes of
        ``encode_record("EventBatch", {"cohort_id": ..., "events": ...})``, written by hand
        (:mod:`streams.codec.batch`: five times faster) when the schema is the layout it knows."""
        writer = self._batch_writer
        if writer is None:
            info = self.schemas.reader("EventBatch")
            writer = self._batch_writer = batch_writer(info.raw, self.frame_header(info)) or False
        if writer:
            value = writer(cohort_id, events)
            if value is not None:
                return value
        return self.encode_record("EventBatch", {"cohort_id": cohort_id, "events": events})

    def encode(self, obj: Mapping[str, Any]) -> bytes:
        """Encode an event or a record, whichever its ``"type"`` names."""
        try:
            t = obj[TYPE_KEY]
        except (KeyError, TypeError):
            raise EncodeError(TYPE_KEY, "missing: cannot tell which record this is") from None
        if t in self.event_shape.types:
            return self.encode_event(obj)
        return self.encode_record(t, obj)

    def record_name_of_id(self, schema_id: int) -> str | None:
        """The record name a Confluent schema id this codec learnt stands for, or None."""
        plan = self._by_id.get(schema_id)
        return plan.name if plan is not None else None

    def frame_header(self, info: SchemaInfo) -> bytes:
        """The frame header ``info``'s records are written with (on the Confluent wire, its
        schema id: registered once, on first use)."""
        header = self._headers.get(info.name)
        if header is None:
            assert self.registry is not None
            sid = self.registry.schema_id(info)
            header = confluent_header(sid)
            self._learn_id(sid, self._by_fp[info.fingerprint])
            with self._lock:
                self._headers[info.name] = header
        return header

    def _write(self, info: SchemaInfo, datum: dict[str, Any]) -> bytes:
        header = self._headers.get(info.name) or self.frame_header(info)
        bio = BytesIO()
        bio.write(header)
        try:
            schemaless_writer(bio, info.parsed, datum)
        except Exception as exc:  # the shape checks should have caught it; name what we can
            msg = str(exc)
            field = msg.rsplit(" on field ", 1)[-1] if " on field " in msg else ""
            raise EncodeError(field, f"{type(exc).__name__}: {msg}") from exc
        return bio.getvalue()

    # -- decoding -------------------------------------------------------------------------------

    def _event_plan(self, data: bytes) -> tuple[_ReadPlan | None, int]:
        """The read plan of an event's frame header (the whole header is the dict key) and where
        its body starts; (None, 0) for any other bytes."""
        headers = self._event_headers
        plan = headers.get(data[:SINGLE_OBJECT_HEADER_LEN])
        if plan is not None:
            return plan, SINGLE_OBJECT_HEADER_LEN
        plan = headers.get(data[:CONFLUENT_HEADER_LEN])
        return (plan, CONFLUENT_HEADER_LEN) if plan is not None else (None, 0)

    def decode_event(self, data: bytes) -> dict[str, Any]:
        """Decode one event into its flat dict (``hash``/``prev_hash`` present, ``None`` if
        absent). Raises :class:`DecodeError` for anything else, whatever the bytes."""
        # Fast path: a known event frame header; anything else, including every error, goes
        # through _decode, which classifies it.
        if type(data) is bytes:
            plan, offset = self._event_plan(data)
            if plan is not None:
                rec = self._read_body(data, offset, plan)
                try:
                    return plan.from_avro(rec)
                except Exception as exc:  # noqa: BLE001
                    raise DecodeError(E.BAD_BODY, f"{plan.label} record has an unexpected shape: {exc}") from exc
        return self._decode(data, EVENT_RECORD)[1]

    def decode_event_typed(self, data: bytes) -> "Event":
        """Decode one event into its typed form: ``parse_event(decode_event(data))``, read in one
        pass by hand (:mod:`streams.codec.event_reader`, three times faster) when it was written
        with the current schema. Raises :class:`DecodeError` or
        :class:`~streams.core.errors.InvalidEvent` exactly as those two do."""
        if type(data) is bytes:
            plan, offset = self._event_plan(data)
            if plan is not None:
                read = plan.typed
                if read is _UNBUILT:
                    read = plan.typed = event_reader(plan.raw)
                if read is not None:
                    event = read(data, offset)
                    if event is not None:
                        return event
        return parse_event(self.decode_event(data))

    def encode_typed(self, record: "Record") -> bytes:
        """Encode a typed record (:mod:`streams.records`): the codec boundary of the types."""
        return self.encode_record(record.NAME, record.to_value())

    def decode_typed(self, data: bytes) -> "Record":
        """Decode any record but an event into its type (:mod:`streams.records`)."""
        from streams.records import typed

        name, value = self.decode_record(data)
        return typed(name, value)

    def decode_record(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """Decode any record but an event: ``(name, flat dict with "type": name)``."""
        name, rec = self._decode(data, None)
        if name == EVENT_RECORD:
            raise DecodeError(
                E.UNKNOWN_FINGERPRINT if data[:1] == b"\xc3" else E.UNKNOWN_SCHEMA_ID,
                "this is a LineageEvent, not an agent record (use decode_event)",
            )
        return name, rec

    def decode(self, data: bytes) -> dict[str, Any]:
        """Decode an event or a record; its ``"type"`` says which."""
        return self._decode(data, None)[1]

    def decode_with_name(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """Like :meth:`decode`, with the record name (``"LineageEvent"`` for an event)."""
        return self._decode(data, None)

    def _decode(self, data: Any, expect: str | None) -> tuple[str, dict[str, Any]]:
        if type(data) is not bytes:
            data = _as_bytes(data)
        n = len(data)
        if n == 0:
            raise DecodeError(E.EMPTY, "no bytes")
        first = data[0]
        if first == 0xC3:
            if n < SINGLE_OBJECT_HEADER_LEN:
                if n >= 2 and data[1] != 0x01:
                    raise DecodeError(E.BAD_MAGIC, f"single-object marker C3 {data[1]:02X}, expected C3 01")
                raise DecodeError(E.TRUNCATED, f"{n} bytes, shorter than a single-object header")
            if data[1] != 0x01:
                raise DecodeError(E.BAD_MAGIC, f"single-object marker C3 {data[1]:02X}, expected C3 01")
            plan = self._by_fp.get(data[2:SINGLE_OBJECT_HEADER_LEN])
            if plan is None:
                raise DecodeError(
                    E.UNKNOWN_FINGERPRINT, f"no known schema has fingerprint {data[2:10].hex()}"
                )
            if expect is not None and plan.name != expect:
                raise DecodeError(E.UNKNOWN_FINGERPRINT, f"fingerprint {data[2:10].hex()} is {plan.name}, not {expect}")
            offset = SINGLE_OBJECT_HEADER_LEN
        elif first == 0x00:
            if n < CONFLUENT_HEADER_LEN:
                raise DecodeError(E.TRUNCATED, f"{n} bytes, shorter than a Confluent header")
            sid = int.from_bytes(data[1:CONFLUENT_HEADER_LEN], "big")
            plan = self._by_id.get(sid)
            if plan is None:
                plan = self._plan_for_id(sid)
            if expect is not None and plan.name != expect:
                raise DecodeError(E.UNKNOWN_SCHEMA_ID, f"schema id {sid} is {plan.name}, not {expect}")
            offset = CONFLUENT_HEADER_LEN
        else:
            raise DecodeError(E.BAD_MAGIC, f"first byte {first:02X} is neither C3 (single-object) nor 00 (Confluent)")

        rec = self._read_body(data, offset, plan)
        try:
            return plan.name, plan.from_avro(rec)
        except Exception as exc:  # noqa: BLE001
            raise DecodeError(E.BAD_BODY, f"{plan.label} record has an unexpected shape: {exc}") from exc

    @staticmethod
    def _read_body(data: bytes, offset: int, plan: _ReadPlan) -> dict[str, Any]:
        n = len(data)
        bio = BytesIO(data)
        bio.seek(offset)
        try:
            # return_record_name: the payload union comes back as (record name, fields). (No
            # other union of ours has a record branch; return_record_name_override costs ~20%.)
            rec = schemaless_reader(bio, plan.writer, plan.reader, return_record_name=True)
        except EOFError as exc:
            raise DecodeError(E.TRUNCATED, f"{plan.label} body ends early: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - any other failure of the reader
            # fastavro reports a varint cut short as IndexError: a failure with every byte
            # consumed is the end of the data, not a bad byte.
            if isinstance(exc, IndexError) and bio.tell() >= n:
                raise DecodeError(E.TRUNCATED, f"{plan.label} body ends early: {type(exc).__name__}: {exc}") from exc
            raise DecodeError(E.BAD_BODY, f"{plan.label} body does not decode: {type(exc).__name__}: {exc}") from exc
        end = bio.tell()
        if end != n:
            raise DecodeError(E.BAD_BODY, f"{n - end} trailing byte(s) after the {plan.label} body")
        return rec

    def _plan_for_id(self, sid: int) -> _ReadPlan:
        if self.registry is None:
            raise DecodeError(E.UNKNOWN_SCHEMA_ID, f"schema id {sid}: no Schema Registry is configured")
        if sid in self._unknown_ids:
            raise DecodeError(E.UNKNOWN_SCHEMA_ID, f"schema id {sid} is unknown to the registry")
        schema_str = self.registry.fetch(sid)  # may raise SchemaRegistryUnavailable
        plan: _ReadPlan | None = None
        why = "is unknown to the registry"
        if schema_str is not None:
            try:
                winfo = SchemaInfo.build(schema_str, version=0)
            except Exception as exc:  # noqa: BLE001
                winfo = None
                why = f"is not an Avro record schema we can parse ({exc})"
            if winfo is not None:
                known = self._by_fp.get(winfo.fingerprint)
                if known is not None:
                    plan = known
                elif winfo.name in self._shapes:
                    plan = _ReadPlan(winfo, self.schemas.reader(winfo.name), self._shapes[winfo.name])
                else:
                    why = f"is {winfo.fullname}, not a traintrace record"
        if plan is None:
            with self._lock:
                if len(self._unknown_ids) >= _NEGATIVE_CACHE_MAX:
                    self._unknown_ids.clear()
                self._unknown_ids.add(sid)
            raise DecodeError(E.UNKNOWN_SCHEMA_ID, f"schema id {sid} {why}")
        self._learn_id(sid, plan)
        return plan

    def _learn_id(self, sid: int, plan: _ReadPlan) -> None:
        with self._lock:
            self._by_id[sid] = plan
            if plan.name == EVENT_RECORD:
                self._event_headers[confluent_header(sid)] = plan

    def register_all(self) -> dict[str, int]:
        """Register every current schema with the registry now (instead of lazily); returns the
        schema id of each record name."""
        if self.registry is None:
            raise ValueError("no Schema Registry is configured")
        out = {}
        for name, info in self.schemas.readers.items():
            out[name] = self.registry.schema_id(info)
            if self.wire_format == CONFLUENT:
                self.frame_header(info)
            self._learn_id(out[name], self._by_fp[info.fingerprint])
        return out

    def __repr__(self) -> str:
        return f"Codec(wire_format={self.wire_format!r}, schemas={self.schemas!r})"


@lru_cache(maxsize=1)
def default_codec() -> Codec:
    """The process-wide codec: ``schemas/``, and the registry of
    ``$TRAINTRACE_SCHEMA_REGISTRY_URL`` if set (read once, at first use)."""
    return Codec()


def encode_event(event: Mapping[str, Any]) -> bytes:
    return default_codec().encode_event(event)


def decode_event(data: bytes) -> dict[str, Any]:
    return default_codec().decode_event(data)


def encode_record(name: str, record: Mapping[str, Any]) -> bytes:
    return default_codec().encode_record(name, record)


def decode_record(data: bytes) -> tuple[str, dict[str, Any]]:
    return default_codec().decode_record(data)


def encode(obj: Mapping[str, Any]) -> bytes:
    return default_codec().encode(obj)


def decode(data: bytes) -> dict[str, Any]:
    return default_codec().decode(data)


__all__ = [
    "AGENT_RECORDS",
    "Codec",
    "decode",
    "decode_event",
    "decode_record",
    "default_codec",
    "encode",
    "encode_event",
    "encode_record",
]
