"""The job's side of ``lineage.control``: the fetcher of its records.

:class:`ControlFetcher` is a background thread with a confluent-kafka consumer that *only
fetches*: it assigns every partition of the control topic itself (no consumer group), starts at
the positions kept in the journal (the beginning the first time), keeps the records keyed by the
job's id and puts them, as :class:`~streams.control.ControlCommand`, on a queue. The first time
it catches up (to the end offsets found when it starts) it hands over everything read so far as
one batch, so a restarted or late job sees a command and the one superseding it together. What
the job makes of them is :func:`streams.control.obey`, run by :meth:`JobClient.poll
<streams.client.job.JobClient.poll>`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from streams.codec import Codec, DecodeError
from streams.client.retention import NOTICE, notice_command
from streams.control.commands import ControlCommand, command_from_record
from streams.kafka.settings import KafkaSettings

__all__ = ["ControlFetcher", "Fetched"]

log = logging.getLogger("traintrace.client")


@dataclass
class Fetched:
    """One item of the fetcher's queue: the job's commands (maybe none) and the positions
    (partition -> next offset) the fetcher had read up to when it queued them."""

    commands: list[ControlCommand]
    positions: dict[int, int]


class ControlFetcher(threading.Thread):
    """Fetches the job's control records into ``out`` (see the module doc)."""

    def __init__(self, kafka: KafkaSettings | str, topic: str, job_id: str, positions: Mapping[int, int],
                 out: "queue.Queue[Fetched]", codec: Codec, *, poll_interval: float = 0.2,
                 marker_interval: float = 1.0) -> None:
        super().__init__(name=f"traintrace-control-{job_id}", daemon=True)
        self.kafka = KafkaSettings.of(kafka)
        self.topic = topic
        self.key = job_id.encode("utf-8")
        self.positions: dict[int, int] = dict(positions)
        self.out = out
        self.codec = codec
        self.poll_interval = poll_interval
        self.marker_interval = marker_interval
        self.caught_up = threading.Event()
        self.records_seen = 0       # records of the job fetched
        self.undecodable = 0
        self.last_error: str | None = None
        self._stopping = threading.Event()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout)

    # -- the thread ------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            consumer = self._consumer()
        except Exception as exc:  # pragma: no cover - configuration errors
            self.last_error = f"cannot create the control consumer: {exc}"
            log.error("traintrace client: %s", self.last_error)
            return
        try:
            self._run(consumer)
        except Exception as exc:  # pragma: no cover - never expected; keep the reason
            self.last_error = f"control fetcher stopped: {exc!r}"
            log.exception("traintrace client: control fetcher failed")
        finally:
            consumer.close()

    def _consumer(self) -> Consumer:
        # librdkafka wants a group id even for assign(); it is never joined nor committed to
        return self.kafka.consumer(f"traintrace-client-{uuid.uuid4().hex}", **{
            "enable.auto.offset.store": False,
            "allow.auto.create.topics": False,
            "enable.partition.eof": True,
            "reconnect.backoff.max.ms": 2000,
            "error_cb": self._on_error,
        })

    def _on_error(self, err: KafkaError) -> None:
        self.last_error = err.str()

    def _partitions(self, consumer: Consumer) -> dict[int, int] | None:
        """partition -> high watermark, or None while the topic or the broker is not there."""
        try:
            md = consumer.list_topics(topic=self.topic, timeout=2.0)
            meta = md.topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return None
            highs = {}
            for p in sorted(meta.partitions):
                _lo, hi = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5.0)
                highs[p] = hi
            return highs
        except KafkaException as exc:
            self.last_error = str(exc)
            return None

    def _run(self, consumer: Consumer) -> None:
        highs = None
        while not self._stopping.is_set():
            highs = self._partitions(consumer)
            if highs is not None:
                break
            self._stopping.wait(1.0)
        if highs is None:
            return
        consumer.assign([TopicPartition(self.topic, p, self.positions.get(p, OFFSET_BEGINNING))
                         for p in sorted(highs)])
        behind = {p for p, hi in highs.items() if self.positions.get(p, 0) < hi}
        held: list[ControlCommand] | None = []
        if not behind:
            self._release_held(held)
            held = None
        moved = False
        last_marker = time.monotonic()
        while not self._stopping.is_set():
            msg = consumer.poll(self.poll_interval)
            if msg is not None:
                err = msg.error()
                p = msg.partition()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        behind.discard(p)
                    else:
                        self.last_error = err.str()
                else:
                    off = msg.offset()
                    self.positions[p] = off + 1
                    moved = True
                    if held is not None and off + 1 >= highs.get(p, 0):
                        behind.discard(p)
                    if msg.key() == self.key:
                        cmd = self._decode(msg.value(), p, off)
                        if cmd is not None:
                            self.records_seen += 1
                            if held is not None:
                                held.append(cmd)
                            else:
                                self.out.put(Fetched([cmd], dict(self.positions)))
                                moved = False
                                last_marker = time.monotonic()
            if held is not None and not behind:
                self._release_held(held)
                held = None
                moved = False
                last_marker = time.monotonic()
            elif held is None and moved and time.monotonic() - last_marker >= self.marker_interval:
                # other jobs' records moved the positions: let the journal keep up
                self.out.put(Fetched([], dict(self.positions)))
                moved = False
                last_marker = time.monotonic()

    def _release_held(self, held: list[ControlCommand]) -> None:
        self.out.put(Fetched(held, dict(self.positions)))
        self.caught_up.set()

    def _decode(self, value: bytes | None, partition: int, offset: int) -> ControlCommand | None:
        try:
            name, rec = self.codec.decode_record(value)
            if name == NOTICE:  # not a command: the client keeps the last one (streams.client.retention)
                return notice_command(rec, partition, offset)
            cmd = command_from_record(name, rec, partition, offset)
        except (DecodeError, KeyError, TypeError) as exc:
            self.undecodable += 1
            log.warning("traintrace client: control record at %s[%d]@%d skipped: %s",
                        self.topic, partition, offset, exc)
            return None
        if cmd is None:
            log.debug("traintrace client: control record %s at %s[%d]@%d ignored", name, self.topic,
                      partition, offset)
        return cmd
