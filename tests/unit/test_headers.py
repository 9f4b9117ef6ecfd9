"""Kafka headers (streams.codec.headers): every record and event type is named by its headers,
with the fingerprint its single-object frame carries (or its registry id), computed once; a
dead letter keeps the original record's headers; the worker's outbox, the router and the job
client's delivery put them on what they produce."""

from __future__ import annotations

import uuid

import pytest

from streams.worker.router import RawRecord, Router
from streams.codec import CONFLUENT, Codec
from streams.codec.examples import example_events, example_records
from streams.codec.headers import (
    CONTENT_TYPE_HEADER,
    ERROR_KIND_HEADER,
    FINGERPRINT_HEADER,
    SCHEMA_ID_HEADER,
    TYPE_HEADER,
    VERSION_HEADER,
    as_list,
    header_dict,
)

CODEC = Codec()
KEYS = [TYPE_HEADER, FINGERPRINT_HEADER, VERSION_HEADER, CONTENT_TYPE_HEADER]


def test_every_record_is_named_by_its_headers():
    version = f"schemas/v{CODEC.schemas.current_version}".encode()
    for rec in example_records():
        name = rec["type"]
        value = CODEC.encode_record(name, rec)
        headers = CODEC.headers.record(name)
        assert [k for k, _ in headers] == KEYS
        h = dict(headers)
        assert h[TYPE_HEADER] == name.encode()
        assert h[FINGERPRINT_HEADER] == value[2:10].hex().encode()  # what the frame carries
        assert h[VERSION_HEADER] == version
        assert h[CONTENT_TYPE_HEADER] == (
            f"application/vnd.traintrace+avro;record={name};encoding=single-object".encode())
        assert CODEC.headers.for_value(value) is headers  # found from the frame, the same list


def test_every_event_is_named_by_its_type():
    for ev in example_events():
        value = CODEC.encode_event(ev)
        h = dict(CODEC.headers.event(ev["type"]))
        assert h[TYPE_HEADER] == ev["type"].encode()
        assert h[FINGERPRINT_HEADER] == value[2:10].hex().encode()
        assert h[CONTENT_TYPE_HEADER].endswith(b";record=LineageEvent;encoding=single-object")
        # an event's type is in its body, not its frame: no guess from the bytes
        assert CODEC.headers.for_value(value) is None
    assert CODEC.headers.for_value(b"not avro") is None
    assert CODEC.headers.for_value(b"\xc3\x01" + b"\xff" * 8) is None


def test_headers_are_computed_once_and_unknown_names_refused():
    assert CODEC.headers.record("PlanCleared") is CODEC.headers.record("PlanCleared")
    assert CODEC.headers.event("Progress") is CODEC.headers.event("Progress")
    with pytest.raises(KeyError):
        CODEC.headers.record("LineageEvent")  # an event: use .event(type)
    with pytest.raises(KeyError):
        CODEC.headers.record("Nope")
    with pytest.raises(KeyError):
        CODEC.headers.event("RollbackCommand")


def test_confluent_records_carry_the_registry_id():
    codec = Codec(registry_url=f"mock://test-headers-{uuid.uuid4().hex}")
    assert codec.wire_format == CONFLUENT
    rec = next(r for r in example_records() if r["type"] == "RollbackCommand")
    value = codec.encode_record("RollbackCommand", rec)
    h = dict(codec.headers.record("RollbackCommand"))
    assert h[SCHEMA_ID_HEADER] == str(int.from_bytes(value[1:5], "big")).encode()
    assert h[FINGERPRINT_HEADER] == codec.schemas.reader("RollbackCommand").fingerprint.hex().encode()
    assert h[CONTENT_TYPE_HEADER].endswith(b";record=RollbackCommand;encoding=confluent")
    assert codec.headers.for_value(value) is codec.headers.record("RollbackCommand")
    ev = example_events()[0]
    codec.encode_event(ev)
    assert dict(codec.headers.event(ev["type"]))[SCHEMA_ID_HEADER].isdigit()


def test_dead_letter_headers_keep_the_original_ones():
    original = [("traintrace.type", b"Progress"), ("trace-id", b"\x00\x01"), ("empty", None)]
    headers = CODEC.headers.dead_letter("TRUNCATED", original)
    assert headers[:4] == CODEC.headers.record("DeadLetter")
    assert headers[4:] == [(ERROR_KIND_HEADER, b"TRUNCATED"), ("original.traintrace.type", b"Progress"),
                           ("original.trace-id", b"\x00\x01"), ("original.empty", None)]
    assert header_dict(headers)[TYPE_HEADER] == b"DeadLetter"  # its own type stays the only one
    assert CODEC.headers.dead_letter("EMPTY", None)[-1] == (ERROR_KIND_HEADER, b"EMPTY")
    assert as_list({"a": "x", b"b": bytearray(b"y")}) == [("a", b"x"), ("b", b"y")]


def test_router_dead_letters_carry_the_original_headers():
    original = ((TYPE_HEADER, b"Progress"), ("x-trace", b"42"))
    routed = Router(CODEC, {}).route([RawRecord("lineage.events", 0, 7, b"A", b"garbage", None, original)], 1)
    (dead,) = routed.dead
    assert dead.original_headers == original
    CODEC.decode_record(CODEC.encode_record("DeadLetter", dead))  # still exactly a DeadLetter


def test_a_feeds_record_reads_its_headers_only_for_a_dead_letter():
    """A feed's records carry the consumer message's ``headers`` uncalled (a list made for every
    event costs ~1 µs): a dead letter calls it; a routed event never does."""
    original = [(TYPE_HEADER, b"Progress"), ("x-trace", b"42")]
    calls = []

    def headers():
        calls.append(1)
        return original

    d = {"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": 1, "cohort_id": "c",
         "base_model": "m", "base_checkpoint_id": None, "config_hash": None}
    good = RawRecord("lineage.events", 0, 6, b"A", CODEC.encode_event(d), None, headers)
    bad = RawRecord("lineage.events", 0, 7, b"A", b"garbage", None, headers)
    routed = Router(CODEC, {}).route([good], 1)
    assert routed.events == 1 and not calls and good.kafka_headers() == original
    (dead,) = Router(CODEC, {}).route([bad], 1).dead
    assert dead.original_headers == original
    assert RawRecord("t", 0, 0, None, None, None, original).kafka_headers() is original  # as given


class _Producer:
    def __init__(self, *_a, **_kw):
        self.sent = []

    def produce(self, topic, key=None, value=None, headers=None, on_delivery=None):
        self.sent.append((topic, key, value, headers))
        if on_delivery is not None:
            on_delivery(None, None)

    def poll(self, _t=0):
        return 0

    def flush(self, _t=0):
        return 0

    def __len__(self):
        return 0


def test_outbox_puts_the_headers_on_every_record(monkeypatch):
    from streams.kafka import settings as kafka_settings
    from streams.worker.outbox import Outbox
    from streams.worker.settings import WorkerSettings
    from streams.referee.records import Emission

    monkeypatch.setattr(kafka_settings, "Producer", _Producer)  # what KafkaSettings.producer builds
    outbox = Outbox(WorkerSettings("127.0.0.1:1"), CODEC)
    rec = next(r for r in example_records() if r["type"] == "PlanCleared")
    outbox.emit(Emission("control", rec["job_id"], "PlanCleared", rec))
    batch = CODEC.encode_record("EventBatch", {"cohort_id": "c", "events": []})
    outbox.send(outbox.topics.by_cohort, b"c", batch)
    routed = Router(CODEC, {}).route([RawRecord("lineage.events", 0, 7, b"A", b"", None, [("k", b"v")])], 1)
    outbox.dead_letter(routed.dead[0])
    sent = outbox.producer.sent
    assert [header_dict(h)[TYPE_HEADER] for *_x, h in sent] == [b"PlanCleared", b"EventBatch", b"DeadLetter"]
    dlq = header_dict(sent[2][3])
    assert dlq[ERROR_KIND_HEADER] == b"EMPTY" and dlq["original.k"] == b"v"


def test_delivery_sends_the_headers_again_on_a_resend(monkeypatch):
    from streams.client import delivery as delivery_mod

    producers: list[_Producer] = []

    def make(conf):
        p = _Producer()
        producers.append(p)
        return p

    monkeypatch.setattr(delivery_mod, "Producer", make)
    d = delivery_mod.Delivery("127.0.0.1:1", "lineage.events", "A")
    try:
        headers = CODEC.headers.event("Progress")
        d.send(0, b"v0", headers)
        d.send(1, b"v1")
        assert [s[3] for s in producers[0].sent] == [headers, None]
        assert d.pending() == 0 and not d._headers  # forgotten once acknowledged
    finally:
        d.close(1)
