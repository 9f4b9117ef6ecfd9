"""The worker's one way out: every record it publishes goes through one idempotent producer,
and a batch counts as done only once :meth:`Outbox.flush` says everything it caused is on the
broker (at-least-once)."""

from __future__ import annotations

import asyncio
from typing import Any

from streams.codec import Codec
from streams.referee.records import Emission
from streams.worker import metrics
from streams.worker.settings import WorkerSettings


class Outbox:
    """Encodes emissions and produces them with one idempotent producer; ``flush`` waits for
    every delivery and raises if any failed (the batch is then not acknowledged).

    Every record goes out with the Kafka headers naming its type and schema
    (``streams.codec.headers``, computed once per record name); a dead letter with its error
    kind and the original record's headers besides."""

    def __init__(self, settings: WorkerSettings, codec: Codec) -> None:
        self.topics = settings.topics
        self.codec = codec
        self.headers = codec.headers
        self.producer = settings.kafka.producer(**{"linger.ms": 2})
        self.errors: list[str] = []

    def _cb(self, err, _msg) -> None:
        if err is not None:
            self.errors.append(str(err))

    def send(self, topic: str, key: bytes | None, value: bytes, headers: list | None = None,
             partition: int | None = None) -> None:
        """Produce one record (to ``partition``, or where its key goes); ``headers`` None:
        those of the record ``value`` encodes (an ``EventBatch``, ...), found by its frame header."""
        if headers is None:
            headers = self.headers.for_value(value)
        where = {} if partition is None else {"partition": partition}
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, headers=headers, on_delivery=self._cb, **where)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def emit(self, em: Emission) -> None:
        topic = getattr(self.topics, em.topic)
        self.send(topic, em.key.encode(), self.codec.encode_record(em.record, em.value),
                  self.headers.record(em.record))
        metrics.EMITTED.labels(em.record).inc()

    def dead_letter(self, record: dict[str, Any], original_headers: Any = None) -> None:
        """Produce a ``DeadLetter``; the original record's headers are ``original_headers`` or
        those a ``DeadLetterRecord`` (:func:`streams.worker.router.dead_letter`) carries."""
        if original_headers is None:
            original_headers = getattr(record, "original_headers", None)
        self.send(self.topics.dlq, record.get("original_key"), self.codec.encode_record("DeadLetter", record),
                  self.headers.dead_letter(record["error_kind"], original_headers))
        metrics.DLQ.labels(record["error_kind"]).inc()

    async def flush(self) -> None:
        loop = asyncio.get_running_loop()
        remaining = await loop.run_in_executor(None, self.producer.flush, 30.0)
        if remaining or self.errors:
            errors, self.errors = self.errors, []
            raise RuntimeError(f"delivery failed ({remaining} undelivered): {errors[:3]}")
