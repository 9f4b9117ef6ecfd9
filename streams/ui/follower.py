"""Following the pipeline's topics into a :class:`~streams.ui.state.UIState`.

One thread per topic reads it from the beginning and then follows it (no consumer group: every
partition assigned, nothing committed, as :mod:`streams.kafka.reader` reads), and hands each
record to the state. Unlike :func:`streams.kafka.reader.follow` the loop checks a stop flag on
every poll, so the page's server stops its followers at once (``traintrace demo --ui-port``
stops it before the run's topics are deleted). A topic that does not exist yet is waited for:
the page may be started before the pipeline.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from streams.codec import Codec, DecodeError
from streams.files.archive import LogRecord
from streams.kafka.reader import ReaderError, topic_partitions
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.records import Alert
from streams.ui.state import UIState

#: seconds between two looks for a topic that does not exist yet (or a broker that is down)
RETRY_S = 2.0


def _record(logical: str, msg: Any) -> LogRecord:
    key = msg.key()
    ts_type, ts = msg.timestamp()
    return LogRecord(logical, msg.partition(), msg.offset(), ts if ts_type and ts >= 0 else 0,
                     key.decode("utf-8", "replace") if key is not None else None, msg.value())


class TopicFollower(threading.Thread):
    """Reads ``topic`` from the beginning, then follows it, calling ``on_record`` for each."""

    def __init__(self, kafka: KafkaSettings, topic: str, on_record: Callable[[Any], None],
                 state: UIState, stop: threading.Event) -> None:
        super().__init__(name=f"traintrace-ui-{topic}", daemon=True)
        self.kafka, self.topic, self.on_record, self.state, self.stop_flag = kafka, topic, on_record, state, stop

    def run(self) -> None:
        parts = self._wait_for_partitions()
        if parts is None:
            return
        consumer = self.kafka.consumer(f"traintrace-ui-{uuid.uuid4().hex}", **{
            "enable.auto.offset.store": False, "allow.auto.create.topics": False})
        try:
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
            while not self.stop_flag.is_set():
                msg = consumer.poll(0.25)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        self.state.note_error(self.topic, err.str())
                    continue
                self.on_record(msg)
        finally:
            consumer.close()

    def _wait_for_partitions(self) -> list[int] | None:
        while not self.stop_flag.is_set():
            try:
                parts = topic_partitions(self.kafka, self.topic)
                self.state.note_error(self.topic, None)
                return parts
            except ReaderError as exc:
                self.state.note_error(self.topic, f"{exc} (retrying)")
            self.stop_flag.wait(RETRY_S)
        return None


def start_followers(kafka: KafkaSettings | str, topics: TopicNames, state: UIState,
                    stop: threading.Event) -> list[TopicFollower]:
    """The three followers of the page (input, control, alerts), started."""
    kafka = KafkaSettings.of(kafka)

    codec = Codec()  # this thread's own: the state's is used under its lock

    def alert(msg: Any) -> None:
        try:
            name, rec = codec.decode_record(msg.value() or b"")
        except DecodeError:
            return
        if name == "Alert":
            state.add_alert(Alert.from_value(rec))

    threads = [
        TopicFollower(kafka, topics.by_cohort, lambda m: state.add_input(_record("input", m)), state, stop),
        TopicFollower(kafka, topics.control, lambda m: state.add_control(_record("control", m)), state, stop),
        TopicFollower(kafka, topics.alerts, alert, state, stop),
    ]
    for t in threads:
        t.start()
    return threads


def join_followers(threads: list[TopicFollower], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
