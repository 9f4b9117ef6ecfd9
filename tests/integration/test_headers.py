"""Kafka headers on a real run (issue 11): the worked example published with `traintrace
publish`'s code, a job client's events, poison bytes, an invalid event and a conflicting
duplicate through a real worker, an operator's release; then every topic read back with a plain
confluent-kafka consumer: every record carries the headers naming its type and schema, and
every dead letter keeps the headers of the record it is about, with its error kind."""

from __future__ import annotations

import json
import uuid

from confluent_kafka import TopicPartition

from streams.kafka.settings import KafkaSettings
from streams.client import JobClient
from streams.codec import Codec, DecodeError
from streams.codec.headers import (
    CONTENT_TYPE_HEADER,
    ERROR_KIND_HEADER,
    FINGERPRINT_HEADER,
    MEDIA_TYPE,
    TYPE_HEADER,
    VERSION_HEADER,
)
from streams.operator_commands.publish import publish_file
from streams.operator_commands.release import release_job
from streams.devtools.worker_process import produce_events, wait_quiescent
from tests.unit.vectors import scenarios_dir

CODEC = Codec()
SCENARIOS = scenarios_dir()
VERSION = f"schemas/v{CODEC.schemas.current_version}".encode()


def read_topic(bootstrap: str, topic: str) -> list:
    """Every record of ``topic``, all partitions, from the beginning to the high watermark."""
    consumer = KafkaSettings.of(bootstrap).consumer(f"headers-{uuid.uuid4().hex}", **{"enable.partition.eof": True})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        todo = {p for p, hi in ends.items() if hi > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out = []
        while todo:
            msg = consumer.poll(10)
            assert msg is not None, f"{topic}: nothing more after {len(out)} records"
            if msg.error():
                continue
            out.append(msg)
            if msg.offset() + 1 >= ends[msg.partition()]:
                todo.discard(msg.partition())
        return out
    finally:
        consumer.close()


POISON = [  # (key, value, headers): records no traintrace writer made
    (b"A", b"\xc3\x01" + b"\xff" * 8 + b"body", [("traintrace.type", b"Progress"), ("x-origin", b"fuzzer")]),
    (b"A", b"not avro at all", [("x-trace", b"\x00\x01\x02")]),
    (b"A", b"", None),
]


def test_every_record_on_every_topic_carries_its_headers(pipeline, kafka_bootstrap, tmp_path):
    topics, app_id, workers = pipeline(workers=1, partitions=2)
    good = [json.loads(l) for l in (SCENARIOS / "01_seed_example.jsonl").read_text().splitlines() if l.strip()]
    log = tmp_path / "events.jsonl"
    log.write_text("".join(json.dumps(d) + "\n" for d in good))
    publish_file(str(log), kafka_bootstrap, topics, CODEC)  # `traintrace publish`
    producer = KafkaSettings.of(kafka_bootstrap).producer()
    for key, value, headers in POISON:
        producer.produce(topics.events, key=key, value=value, headers=headers)
    # an invalid event that still decodes (an empty job_id), with a header of its own
    producer.produce(topics.events, key=b"", value=CODEC.encode_event(dict(good[3], job_id="")),
                     headers=[("x-origin", b"invalid")])
    producer.flush(30)
    # a conflicting duplicate of A's seq 1 (refused by the fold, in the decide stage)
    assert good[3]["job_id"] == "A" and good[3]["seq"] == 1
    produce_events(kafka_bootstrap, topics.events, [dict(good[3], loss=9.5)], CODEC)
    # a job client's events, in another cohort
    client = JobClient("hdr-1", "hdr-cohort", "base-7b", bootstrap=kafka_bootstrap, topics=topics,
                       journal_dir=tmp_path / "journal", follow_control=False, fsync=False, codec=CODEC)
    client.start()
    client.progress(10, 0, 1.5)
    ckpt = tmp_path / "hdr-1-10.bin"
    ckpt.write_bytes(b"weights")
    client.checkpoint_written("hdr-1-10", ckpt, 10, 0)
    client.finished("SUCCEEDED", "hdr-1-10")
    assert client.close(30) == 0
    wait_quiescent(kafka_bootstrap, app_id, topics)
    release_job(kafka_bootstrap, topics, "A", operator="tester", codec=CODEC)  # `traintrace release`
    assert workers[0].alive()

    seen: dict[str, set[bytes]] = {}
    for field, topic in topics.all().items():
        records = read_topic(kafka_bootstrap, topic)
        assert records, f"{topic} is empty"
        for msg in records:
            where = f"{topic}[{msg.partition()}]@{msg.offset()}"
            headers = msg.headers() or []
            h = dict(headers)
            if field == "job_cohorts":  # the router's map: plain UTF-8, not Avro
                assert h[TYPE_HEADER] == b"JobCohort" and h[CONTENT_TYPE_HEADER].startswith(b"text/plain"), where
                continue
            if field == "events":
                try:
                    name, rec = "LineageEvent", CODEC.decode_event(msg.value())
                except DecodeError:
                    name = rec = None
                if name is None or not rec["job_id"]:  # poison, produced here with its own headers
                    assert TYPE_HEADER not in h or h.get("x-origin") == b"fuzzer", where
                    continue
                type_name = rec["type"]
            else:
                name, rec = CODEC.decode_record(msg.value())
                type_name = name
            assert [k for k, _ in headers][:4] == [TYPE_HEADER, FINGERPRINT_HEADER, VERSION_HEADER,
                                                   CONTENT_TYPE_HEADER], where
            assert h[TYPE_HEADER] == type_name.encode(), where
            assert h[FINGERPRINT_HEADER] == msg.value()[2:10].hex().encode(), where
            assert h[VERSION_HEADER] == VERSION, where
            assert h[CONTENT_TYPE_HEADER] == f"{MEDIA_TYPE};record={name};encoding=single-object".encode(), where
            seen.setdefault(field, set()).add(h[TYPE_HEADER])
            if field == "dlq":
                assert h[ERROR_KIND_HEADER] == rec["error_kind"].encode(), where

    assert seen["events"] == {t.encode() for t in {d["type"] for d in good} | {"JobFinished"}}
    assert seen["control"] >= {b"RollbackCommand", b"HaltCommand"}
    assert seen["by_cohort"] == {b"EventBatch"} and seen["dlq"] == {b"DeadLetter"}
    assert seen["manifests"] == {b"DivergenceManifest"} and seen["commitments"] == {b"LineageCommitment"}
    assert seen["checkpoints"] == {b"CheckpointStatus"} and seen["alerts"] == {b"Alert"}

    # the dead letters keep the headers of the record they are about, prefixed "original."
    dead = {}
    for msg in read_topic(kafka_bootstrap, topics.dlq):
        rec = CODEC.decode_record(msg.value())[1]
        dead[rec["error_kind"]] = (rec, msg.headers())
    assert sorted(dead) == ["BAD_MAGIC", "CONFLICTING_DUPLICATE", "EMPTY", "INVALID_EVENT", "UNKNOWN_FINGERPRINT"]

    def original(kind: str) -> list:
        return [(k[len("original."):], v) for k, v in dead[kind][1] if k.startswith("original.")]

    assert original("UNKNOWN_FINGERPRINT") == POISON[0][2]
    assert original("BAD_MAGIC") == POISON[1][2]
    assert original("EMPTY") == []
    assert original("INVALID_EVENT") == [("x-origin", b"invalid")]
    # refused by the fold: the event's own type headers (the by-cohort batch carries no headers)
    assert original("CONFLICTING_DUPLICATE") == CODEC.headers.event("Progress")
    # the release an operator wrote
    releases = [m for m in read_topic(kafka_bootstrap, topics.control)
                if CODEC.decode_record(m.value())[1].get("reason") == "RELEASE"]
    assert len(releases) == 1 and dict(releases[0].headers())[TYPE_HEADER] == b"HaltCommand"
    print(f"\nheaders test left topics under prefix {topics.events.rsplit('lineage.', 1)[0]!r}")
