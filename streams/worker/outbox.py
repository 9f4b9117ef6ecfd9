"""The worker's one way out: every record it publishes goes through one idempotent producer,
and a batch counts as done only once :meth:`Outbox.flush` says everything it caused is on the
broker (at-least-once).

A delivery the cluster refuses (a missing ACL, a rejected SASL login, a failed TLS handshake)
fails the flush with the one line of :meth:`KafkaSettings.refusal
<streams.kafka.settings.KafkaSettings.refusal>` (:class:`~streams.kafka.errors.KafkaSecurityError`:
principal, resource, operation) instead of a list of librdkafka codes; the worker then exits with
that line (:func:`streams.worker.stages.die`), since no retry can succeed until someone fixes the
credentials or the ACLs."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from streams.codec import Codec
from streams.referee.records import Emission
from streams.worker import metrics
from streams.worker.settings import WorkerSettings


log = logging.getLogger("traintrace.worker")

#: one round of waiting for the deliveries of a batch (a stalled broker makes several)
FLUSH_ROUND_S = 30.0


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
        self.kafka = settings.kafka
        # error_cb: a refused login or TLS handshake (librdkafka would retry it forever) is kept
        self.watch = settings.kafka.error_watch()
        self.producer = settings.kafka.producer(**{"linger.ms": 2, "error_cb": self.watch})
        self.errors: list[tuple[KafkaError, str]] = []   # (error, topic) of failed deliveries
        #: a producer's fatal error raised by produce()/poll() in send(): flush() raises its refusal
        self.fatal: Exception | None = None
        self._first_topic: str | None = None  # of the first record since the last flush (for a refusal)
        self._emitted: dict[str, Any] = {}  # record name -> its traintrace_records_emitted_total child

    def _cb(self, err, msg) -> None:
        if err is not None:
            self.errors.append((err, msg.topic() if msg is not None else "?"))

    def send(self, topic: str, key: bytes | None, value: bytes, headers: list | None = None,
             partition: int | None = None) -> None:
        """Produce one record (to ``partition``, or where its key goes); ``headers`` None:
        those of the record ``value`` encodes (an ``EventBatch``, ...), found by its frame header."""
        if headers is None:
            headers = self.headers.for_value(value)
        where = {} if partition is None else {"partition": partition}
        self._first_topic = self._first_topic or topic
        try:
            while True:
                try:
                    self.producer.produce(topic, key=key, value=value, headers=headers, on_delivery=self._cb,
                                          **where)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
        except Exception as exc:  # a fatal producer error (no IDEMPOTENT_WRITE: a KafkaException, or the
            # SystemError of a delivery report run while it was pending): the batch's flush fails with it
            self.fatal = self.fatal or exc

    def emit(self, em: Emission) -> None:
        topic = getattr(self.topics, em.topic)
        self.send(topic, em.key.encode(), self.codec.encode_record(em.record, em.value),
                  self.headers.record(em.record))
        counter = self._emitted.get(em.record)
        if counter is None:  # (the labelled counter, looked up once a record type)
            counter = self._emitted[em.record] = metrics.EMITTED.labels(em.record)
        counter.inc()

    def dead_letter(self, record: dict[str, Any], original_headers: Any = None) -> None:
        """Produce a ``DeadLetter``; the original record's headers are ``original_headers`` or
        those a ``DeadLetterRecord`` (:func:`streams.worker.router.dead_letter`) carries."""
        if original_headers is None:
            original_headers = getattr(record, "original_headers", None)
        self.send(self.topics.dlq, record.get("original_key"), self.codec.encode_record("DeadLetter", record),
                  self.headers.dead_letter(record["error_kind"], original_headers))
        metrics.DLQ.labels(record["error_kind"]).inc()

    async def flush(self) -> None:
        """Wait for every delivery; raise if one failed: the refusal's one line
        (:meth:`refused`) when the cluster refused it, else a RuntimeError listing the errors."""
        loop = asyncio.get_running_loop()
        try:
            if self.fatal is not None:
                raise self.fatal
            remaining = await loop.run_in_executor(None, self._flush, FLUSH_ROUND_S)
            if remaining and not self.errors and self.watch.failure is None:
                remaining = await self._wait_out(loop, remaining)
        except Exception as exc:  # a producer's fatal error (e.g. no IDEMPOTENT_WRITE) is raised here,
            # sometimes as a bare SystemError: the error callback has it then
            refused = self.kafka.refusal(exc, operation="WRITE", resource=self._first_topic or "") or self._watched()
            if refused is None and isinstance(exc, SystemError):
                # no cause attached: the fatal error's log line or error_cb may still be queued
                try:
                    self.producer.poll(0)
                except Exception:  # the same fatal error again
                    pass
                refused = self._watched()
            if refused is None:
                raise
            raise refused from exc
        if remaining or self.errors:
            errors, self.errors = self.errors, []
            refused = self.refused(errors)
            if refused is not None:
                raise refused
            raise RuntimeError(f"delivery failed ({remaining} undelivered): {[str(e) for e, _ in errors[:3]]}")
        self._first_topic = None

    async def _wait_out(self, loop: asyncio.AbstractEventLoop, remaining: int) -> int:
        """Deliveries still pending after a round, none failed: a broker or the network is
        stalled (a paused broker, dropped packets), which is retriable — wait on, in rounds,
        saying so once and once when it is over, until every record is acknowledged or one
        fails (librdkafka fails a record after ``message.timeout.ms``, 300 s by default)."""
        t0 = time.monotonic()
        log.warning("outbox: %d record(s) not acknowledged by the broker after %.0f s; waiting (a broker or the "
                    "network is stalled; the batch is acknowledged only once they are)", remaining, FLUSH_ROUND_S)
        metrics.OUTBOX_STALLS.inc()
        while remaining and not self.errors and self.watch.failure is None and self.fatal is None:
            remaining = await loop.run_in_executor(None, self._flush, FLUSH_ROUND_S)
        if not remaining:
            log.warning("outbox: every record acknowledged again after %.1f s more", time.monotonic() - t0)
        return remaining

    def _flush(self, timeout: float) -> int:
        """``producer.flush(timeout)``, cut short by a refused login or TLS handshake (which
        librdkafka retries forever, so the flush would only time out)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = self.producer.flush(min(0.5, max(0.0, deadline - time.monotonic())))
            if not remaining or self.watch.failure is not None or time.monotonic() >= deadline:
                return remaining

    def refused(self, errors: list[tuple[KafkaError, str]]) -> Exception | None:
        """The one-line refusal among ``errors`` or of the error callback (None: no refusal)."""
        for err, topic in errors:
            # a cluster-level denial (no IDEMPOTENT_WRITE) names its own resource and operation
            refusal = self.kafka.refusal(KafkaException(err), operation="WRITE", resource=topic)
            if refusal is not None:
                return refusal
        return self._watched()

    def _watched(self) -> Exception | None:
        """The error callback's refusal, told as one of the write this flush was for (the
        callback and the delivery reports race: either may come first)."""
        return self.watch.failure_for("WRITE", self._first_topic or "")
