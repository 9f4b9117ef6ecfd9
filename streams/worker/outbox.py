"""The worker's one way out: every record a stage publishes goes through an idempotent producer,
and a batch counts as done only once :meth:`Outbox.wait` says everything it caused is on the
broker (at-least-once).

What a batch sent is a :class:`Ticket` (:meth:`Outbox.cut`): its records' delivery reports, so a
stage can wait for one batch's records while the next batch's are on their way
(:meth:`Stage.process <streams.worker.stages.Stage.process>`), and :meth:`Outbox.flush` waits for
what was sent since the last cut.

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
#: seconds of one ``producer.flush()`` while a ticket's records wait behind later ones (a flush
#: returns early only once every record is delivered, the later ones too)
WAIT_SLICE_S = 0.005


class Ticket:
    """The records an outbox sent between two cuts: how many, and the delivery report of each
    (None: delivered; else the error and its topic). Reports come on whichever thread serves
    the producer's callbacks: ``list.append`` is atomic."""

    __slots__ = ("sent", "reports", "first_topic", "acked_at")

    def __init__(self) -> None:
        self.sent = 0
        self.reports: list[tuple[KafkaError, str] | None] = []
        self.first_topic: str | None = None  # of its first record (for a refusal)
        self.acked_at: float | None = None  # epoch seconds of the last report

    def on_delivery(self, err, msg) -> None:
        self.reports.append(None if err is None else (err, msg.topic() if msg is not None else "?"))
        self.acked_at = time.time()

    @property
    def remaining(self) -> int:
        return self.sent - len(self.reports)

    def errors(self) -> list[tuple[KafkaError, str]]:
        return [r for r in self.reports if r is not None]


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
        #: what was sent since the last cut
        self._ticket = Ticket()
        #: the ticket of the last record sent (a wait for an older one cannot flush to the end)
        self._last = self._ticket
        #: a producer's fatal error raised by produce()/poll() in send(): a wait raises its refusal
        self.fatal: Exception | None = None
        self._first_topic: str | None = None  # of the first record of the ticket waited for (for a refusal)
        self._emitted: dict[str, Any] = {}  # record name -> its traintrace_records_emitted_total child

    def cut(self) -> Ticket:
        """What was sent since the last cut; what is sent from now on is another ticket's."""
        ticket, self._ticket = self._ticket, Ticket()
        return ticket

    def send(self, topic: str, key: bytes | None, value: bytes, headers: list | None = None,
             partition: int | None = None) -> None:
        """Produce one record (to ``partition``, or where its key goes); ``headers`` None:
        those of the record ``value`` encodes (an ``EventBatch``, ...), found by its frame header."""
        if headers is None:
            headers = self.headers.for_value(value)
        where = {} if partition is None else {"partition": partition}
        ticket = self._last = self._ticket
        if ticket.first_topic is None:
            ticket.first_topic = topic
        try:
            while True:
                try:
                    self.producer.produce(topic, key=key, value=value, headers=headers, on_delivery=ticket.on_delivery,
                                          **where)
                    ticket.sent += 1
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
        """Wait for every delivery of what was sent since the last cut (:meth:`wait`)."""
        await self.wait(self.cut())

    async def wait(self, ticket: Ticket) -> None:
        """Wait for every delivery of ``ticket``; raise if one failed: the refusal's one line
        (:meth:`refused`) when the cluster refused it, else a RuntimeError listing the errors."""
        loop = asyncio.get_running_loop()
        self._first_topic = ticket.first_topic or self._first_topic
        try:
            if self.fatal is not None:
                raise self.fatal
            remaining = ticket.remaining
            if remaining:
                remaining = await loop.run_in_executor(None, self._drain, ticket, FLUSH_ROUND_S)
            if remaining and not ticket.errors() and self.watch.failure is None:
                remaining = await self._wait_out(loop, ticket, remaining)
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
        errors = ticket.errors()
        if remaining or errors:
            refused = self.refused(errors)
            if refused is not None:
                raise refused
            raise RuntimeError(f"delivery failed ({remaining} undelivered): {[str(e) for e, _ in errors[:3]]}")

    async def _wait_out(self, loop: asyncio.AbstractEventLoop, ticket: Ticket, remaining: int) -> int:
        """Deliveries still pending after a round, none failed: a broker or the network is
        stalled (a paused broker, dropped packets), which is retriable — wait on, in rounds,
        saying so once and once when it is over, until every record is acknowledged or one
        fails (librdkafka fails a record after ``message.timeout.ms``, 300 s by default)."""
        t0 = time.monotonic()
        log.warning("outbox: %d record(s) not acknowledged by the broker after %.0f s; waiting (a broker or the "
                    "network is stalled; the batch is acknowledged only once they are)", remaining, FLUSH_ROUND_S)
        metrics.OUTBOX_STALLS.inc()
        while remaining and not ticket.errors() and self.watch.failure is None and self.fatal is None:
            remaining = await loop.run_in_executor(None, self._drain, ticket, FLUSH_ROUND_S)
        if not remaining:
            log.warning("outbox: every record acknowledged again after %.1f s more", time.monotonic() - t0)
        return remaining

    def _drain(self, ticket: Ticket, timeout: float) -> int:
        """Serve delivery reports (``producer.flush``, which sends what lingers at once) until
        ``ticket``'s records are all reported, ``timeout`` passed, or a refused login or TLS
        handshake (which librdkafka retries forever) came; the records still unreported. Short
        flushes while later records are on their way: a flush returns early only when every
        record is delivered."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = ticket.remaining
            if not remaining or self.watch.failure is not None:
                return remaining
            left = deadline - time.monotonic()
            if left <= 0:
                return remaining
            newest = ticket is self._last  # no later record: the flush returns once this ticket's are in
            self.producer.flush(min(0.5 if newest else WAIT_SLICE_S, left))

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
