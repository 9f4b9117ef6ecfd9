"""What is already on ``lineage.control``: a worker taking a partition over reads it to its end
so it never publishes a command twice, nor one a later record superseded."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from streams.codec import Codec, DecodeError
from streams.kafka.settings import consumer_config
from streams.worker.settings import WorkerSettings


def read_published_commands(settings: WorkerSettings, codec: Codec) -> tuple[set[str], dict[str, tuple[str, str]]]:
    """Every command_id already on ``lineage.control`` (read to its end) or superseded by one
    there, and the last plan record of each job (job_id -> (record name, command_id))."""
    topic = settings.topics.control
    consumer = Consumer(consumer_config(settings.bootstrap, f"{settings.app_id}-published",
                                        **{"enable.partition.eof": True}))
    ids: set[str] = set()
    last_plan: dict[str, tuple[str, str]] = {}
    try:
        md = consumer.list_topics(topic, timeout=30)
        if topic not in md.topics:
            return ids, last_plan
        parts = list(md.topics[topic].partitions)
        ends = {}
        for p in parts:
            _lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if hi > 0:
                ends[p] = hi
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        done: set[int] = set()
        idle_since = time.monotonic()
        while len(done) < len(ends):
            msgs = consumer.consume(500, timeout=0.1)
            if not msgs:
                if time.monotonic() - idle_since > 30:
                    raise RuntimeError(f"reading {topic} stalled")
                continue
            idle_since = time.monotonic()
            for msg in msgs:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        done.add(msg.partition())
                    continue
                if msg.offset() + 1 >= ends[msg.partition()]:
                    done.add(msg.partition())
                try:
                    name, rec = codec.decode_record(msg.value())
                except DecodeError:
                    continue
                cid = rec.get("command_id")
                if cid:
                    ids.add(cid)
                if rec.get("supersedes"):
                    # superseded on the topic already: re-deciding it (a replay that starts
                    # before the record that superseded it) must not publish it after its successor
                    ids.add(rec["supersedes"])
                if name in ("RollbackCommand", "QuarantineNotice", "PlanCleared"):
                    last_plan[rec["job_id"]] = (name, cid)
    finally:
        consumer.close()
    return ids, last_plan
