"""Delivery of a job's events to ``lineage.events``: one idempotent producer, nothing lost.

- The producer is confluent-kafka's, configured by :meth:`KafkaSettings.producer_config
  <streams.kafka.settings.KafkaSettings.producer_config>` (``acks=all``, ``enable.idempotence``,
  ``partitioner=murmur2_random``), key = ``job_id``, so a job's events land in one partition in
  ``seq`` order and a retry inside librdkafka cannot duplicate or reorder them.
- Outages: ``message.timeout.ms=0`` (librdkafka never gives up on a message; it reconnects and
  retries for as long as it takes) and ``queue.buffering.max.messages`` above ``buffer_max``,
  so an outage of minutes loses nothing: the events wait in librdkafka's queue and go out, in
  order, when the broker is back. :meth:`Delivery.pending` counts what the broker has not yet
  acknowledged.
- Every event is also kept here, by seq, until its delivery report says it is on the broker.
  ``enable.gapless.guarantee`` makes librdkafka stop (a fatal error) rather than leave a gap, so
  what reached the broker is always a prefix of what was sent. A delivery that still fails stops
  new sends, waits for everything in flight to report, then sends every unacknowledged event
  again, the same bytes, in seq order (after ``retry_backoff`` seconds; a fatal error gets a new
  producer). Order is kept; an event that did land but was not reported arrives twice,
  identical, and the processor drops identical duplicates.
- A background thread serves the delivery reports (``poll``); :meth:`Delivery.flush` waits until
  nothing is pending.
- Each event goes out with the Kafka headers it is given (``send(seq, value, headers)``: its
  type and schema, :mod:`streams.codec.headers`), on every resend too.
- ``buffer_max`` bounds the events kept unacknowledged: :meth:`wait_capacity` blocks the caller
  (up to a timeout) while it is reached — the training loop waits for Kafka rather than drop
  part of its record.
- A refusal is not an outage: when the cluster rejects the client's login or TLS handshake, or
  denies the write (``TOPIC_AUTHORIZATION_FAILED``, no ``IDEMPOTENT_WRITE``), waiting cannot
  help. :meth:`wait_capacity` (so the next event, before it is recorded) and :meth:`flush` raise
  :class:`~streams.client.errors.ClientError` with the one line of :meth:`KafkaSettings.refusal
  <streams.kafka.settings.KafkaSettings.refusal>` (principal, resource, operation); the events
  stay unacknowledged (in the journal) and are still sent again, so fixing the ACL or the
  credentials while the job runs lets it go on (a delivery clears the refusal).
- **Group commit** (``sync``, the journal's fsync): an event is handed to the producer only once
  the journal line holding it is on disk, but the caller does not wait for the disk. ``send``
  registers the event (it is pending from then on) and a sync thread makes everything appended
  meanwhile durable with one fsync, then produces it all in seq order. A training step pays for a
  buffered write, not an fsync; a crash of the process loses nothing (the written line is in the
  page cache), and a crash of the machine loses only events that never reached Kafka either. A
  resend sends only what is durable; the rest follows its sync.
- Seal records (:mod:`streams.client.sealing`: the head event again, now signed) are kept apart
  from the events (:meth:`send_seal`, by the seq they re-send): they do not count as pending
  events nor move the acknowledged position, but :meth:`flush` waits for them and a resend sends
  each right after its event, so the order on the topic is kept.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

from confluent_kafka import KafkaError, KafkaException, Producer

from streams.client.errors import ClientError
from streams.kafka.security import kafka_error_of
from streams.kafka.settings import KafkaSettings

log = logging.getLogger("traintrace.client")


class Delivery:
    def __init__(self, kafka: KafkaSettings | str, topic: str, key: str, *, buffer_max: int = 100_000,
                 retry_backoff: float = 1.0, overrides: Mapping[str, Any] | None = None,
                 on_ack: Callable[[int], None] | None = None, sync: Callable[[], None] | None = None) -> None:
        kafka = KafkaSettings.of(kafka)
        self.kafka = kafka
        self.bootstrap = kafka.bootstrap
        self.topic = topic
        self.key = key.encode("utf-8")
        self.buffer_max = max(1, int(buffer_max))
        self.retry_backoff = retry_backoff
        #: what librdkafka only logs: a wrong security.protocol (the watch is the producer's logger)
        self.watch = kafka.error_watch(on_failure=self._watched)
        self.conf = kafka.producer_config(**{
            "message.timeout.ms": 0,                      # never expire: wait out any outage
            # an error that could leave a gap is fatal instead: what is on the broker is always a
            # prefix of what was sent, so sending the unacknowledged events again keeps the order
            "enable.gapless.guarantee": True,
            "queue.buffering.max.messages": max(self.buffer_max * 2, 100_000),
            "queue.buffering.max.kbytes": 2_097_151,
            "reconnect.backoff.max.ms": 2000,
            "error_cb": self._on_error,
            "logger": self.watch,
            **dict(overrides or {}),
        })
        self.on_ack = on_ack
        self._cond = threading.Condition()
        self._unacked: dict[int, bytes] = {}   # seq -> bytes, until delivered
        self._headers: dict[int, list] = {}    # seq -> its Kafka headers (when it has any)
        self._seals: dict[int, tuple[bytes, list | None]] = {}  # seq -> seal record, until delivered
        self._resend = False                   # a delivery failed: resend everything unacked
        self._resend_at = 0.0
        self._fatal = False
        self._last_warning = -1e9
        self.acked = 0
        self.failures = 0
        self.resends = 0
        self.last_error: str | None = None
        self.down_since: float | None = None
        #: the cluster's refusal (principal, resource, operation), until a delivery succeeds
        self.refused: Exception | None = None
        self._closed = False
        #: group commit (module doc): what waits for the journal's sync, and how far it is durable
        self._sync = sync
        self._waiting: list[tuple[bool, int]] = []  # (a seal record?, seq), in the order sent
        self._durable = -1 if sync is not None else float("inf")
        self.syncs = 0
        # Producer(conf) rather than kafka.producer(): a fatal error needs a new producer of the
        # same config (and the tests put a fake Producer in this module)
        self._producer = Producer(self.conf)
        self._thread = threading.Thread(target=self._loop, name=f"traintrace-delivery-{key}", daemon=True)
        self._thread.start()
        self._syncer: threading.Thread | None = None
        if sync is not None:
            self._syncer = threading.Thread(target=self._sync_loop, name=f"traintrace-sync-{key}", daemon=True)
            self._syncer.start()

    # -- the caller's side ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def pending(self) -> int:
        with self._cond:
            return len(self._unacked)

    def unacked(self) -> dict[int, bytes]:
        with self._cond:
            return dict(self._unacked)

    def acked_through(self, next_seq: int) -> int:
        """The highest seq such that it and every smaller seq are delivered (given ``next_seq``,
        the seq the next event will get)."""
        with self._cond:
            return (min(self._unacked) - 1) if self._unacked else next_seq - 1

    def check_refused(self) -> None:
        """Raise :class:`ClientError` with the cluster's refusal, if it refused this client."""
        refused = self.refused
        if refused is not None:
            raise ClientError(f"the job's events cannot be delivered: {refused}") from refused

    def wait_capacity(self, timeout: float | None) -> bool:
        """Block while ``buffer_max`` events are pending; False if still full after ``timeout``.
        Raises :class:`ClientError` when the cluster refuses this client (module doc)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.check_refused()
        with self._cond:
            while len(self._unacked) >= self.buffer_max:
                self.check_refused()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.5 if left is None else min(0.5, left))
            return True

    def send(self, seq: int, value: bytes, headers: list | None = None) -> None:
        """Hand one event (and its Kafka headers) to the producer (or to the next resend, while
        one is due)."""
        with self._cond:
            self._unacked[seq] = value
            if headers:
                self._headers[seq] = headers
            if self._sync is not None:
                self._waiting.append((False, seq))
                self._cond.notify_all()
            elif not self._resend:
                self._produce(seq, value)

    def send_seal(self, seq: int, value: bytes, headers: list | None = None) -> None:
        """Hand a seal record of the event ``seq`` to the producer (module doc)."""
        with self._cond:
            self._seals[seq] = (value, headers)
            if self._sync is not None:
                self._waiting.append((True, seq))
                self._cond.notify_all()
            elif not self._resend:
                self._produce_seal(seq)

    def seals_pending(self) -> int:
        with self._cond:
            return len(self._seals)

    def flush(self, timeout: float = 30.0) -> int:
        """Wait until every event is acknowledged, at most ``timeout`` s; the number still pending.
        Raises :class:`ClientError` as soon as the cluster refuses this client (module doc)."""
        return self._flush(timeout, fail_fast=True)

    def _flush(self, timeout: float, fail_fast: bool) -> int:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._unacked or self._seals:
                if fail_fast:
                    self.check_refused()
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(0.2, left))
            return len(self._unacked)

    def close(self, timeout: float = 30.0) -> int:
        """Flush (up to ``timeout``), stop the delivery thread; the number still pending."""
        left = self._flush(0 if self.refused is not None else timeout, fail_fast=False)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(10)
        if self._syncer is not None:
            self._syncer.join(10)
        return left

    # -- the producer ---------------------------------------------------------------------------

    def _produce(self, seq: int, value: bytes) -> None:
        """Produce an event under self._cond (so sends and resends never interleave)."""
        self._produce_value(value, self._headers.get(seq),
                            lambda err, msg, seq=seq: self._on_delivery(seq, err))

    def _produce_seal(self, seq: int) -> None:
        value, headers = self._seals[seq]
        self._produce_value(value, headers, lambda err, msg, seq=seq, value=value: self._on_seal(seq, value, err))

    def _produce_value(self, value: bytes, headers: list | None, on_delivery: Callable) -> None:
        extra = {"headers": headers} if headers else {}
        while True:
            try:
                self._producer.produce(self.topic, key=self.key, value=value, on_delivery=on_delivery, **extra)
                return
            except BufferError:  # librdkafka's queue is full (it is sized above buffer_max)
                self._cond.release()
                try:
                    self._producer.poll(0.1)
                finally:
                    self._cond.acquire()
            except KafkaException as exc:
                # e.g. a fatal producer error: schedule a resend with a new producer
                self._fail(f"produce failed: {exc}", fatal=True)
                return

    def _on_delivery(self, seq: int, err: KafkaError | None) -> None:
        with self._cond:
            if err is None:
                if self._unacked.pop(seq, None) is not None:
                    self.acked += 1
                self._headers.pop(seq, None)
                self.down_since = None
                self.refused = None
                self.watch.reset()
                self._cond.notify_all()
            else:
                self._refusal(err, "WRITE")
                self._fail(f"delivery of seq {seq} failed: {err.str()}{self._missing(err)}", fatal=err.fatal())
        if err is None and self.on_ack is not None:
            self.on_ack(seq)

    def _on_seal(self, seq: int, value: bytes, err: KafkaError | None) -> None:
        with self._cond:
            if err is None:
                if self._seals.get(seq, (None,))[0] == value:
                    del self._seals[seq]
                self._cond.notify_all()
            else:
                self._refusal(err, "WRITE")
                self._fail(f"delivery of the seal record of seq {seq} failed: {err.str()}", fatal=err.fatal())

    def _missing(self, err: KafkaError) -> str:
        """What to do when ``err`` says the topic does not exist: the producer never creates it (a
        topic a broker auto-creates gets its defaults, e.g. a week's retention the worker then
        refuses, and its first writes can be lost: docs/operations.md)."""
        if err.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            return ""
        return (f" ({self.topic} does not exist yet: `traintrace worker` creates the topics; the events wait "
                f"in the journal and go out once it does)")

    def _fail(self, reason: str, fatal: bool) -> None:
        self.failures += 1
        self.last_error = reason
        now = time.monotonic()
        if not self._resend and self.refused is None and now - self._last_warning >= 30.0:
            self._last_warning = now
            log.warning("traintrace client: %s; every unacknowledged event will be sent again "
                        "(%d failure(s) so far)", reason, self.failures)
        self._resend = True
        self._fatal = self._fatal or fatal
        self._resend_at = time.monotonic() + self.retry_backoff

    def _refusal(self, err: KafkaError, operation: str) -> None:
        """Keep the cluster's refusal of ``err`` (if it is one) and wake the waiting caller (a
        denial of the cluster, no IDEMPOTENT_WRITE, names its own resource and operation)."""
        refused = self.kafka.refusal(err, operation=operation, resource=self.topic)
        if refused is not None:
            self._keep_refusal(refused)

    def _watched(self, refused: Exception) -> None:
        """The watch's failure: the producer's log says the client speaks another protocol."""
        self._keep_refusal(refused)
        self.last_error = str(refused)

    def _keep_refusal(self, refused: Exception) -> None:
        if self.refused is None:
            log.error("traintrace client: %s", refused)
        self.refused = refused
        with self._cond:
            self._cond.notify_all()

    def _on_error(self, err: KafkaError) -> None:
        self._refusal(err, "WRITE")
        # the cause, while the cluster refuses this client, rather than "1/1 brokers are down"
        self.last_error = err.str() if self.refused is None else str(self.refused)
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT) and self.down_since is None:
            self.down_since = time.time()
        if err.fatal():
            with self._cond:
                self._fail(f"fatal producer error: {err.str()}", fatal=True)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    break
                producer = self._producer
            try:
                producer.poll(0.1)
            except Exception as exc:  # librdkafka raises a fatal error (a gap-less stop, no IDEMPOTENT_WRITE)
                # here: a KafkaException, or a SystemError of it when a delivery report ran meanwhile
                err = kafka_error_of(exc)
                if err is not None:
                    self._on_error(err)
                if err is None or (not isinstance(exc, KafkaException) and not err.fatal()):
                    # a delivery report may have been lost with it: send everything unacked again
                    with self._cond:
                        self._fail(f"fatal producer error: {exc!r}", fatal=True)
            with self._cond:
                if self._resend and time.monotonic() >= self._resend_at and len(self._producer) == 0:
                    self._do_resend()

    def _sync_loop(self) -> None:
        """Group commit: make what was sent meanwhile durable (one sync), then produce it."""
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait(0.5)
                if not self._waiting:
                    return
                batch, self._waiting = self._waiting, []
            try:
                self._sync()
            except Exception as exc:  # a journal that cannot sync: nothing may be produced
                log.error("traintrace client: the journal could not be synced (%s); retrying", exc)
                with self._cond:
                    self._waiting[:0] = batch
                    self.last_error = f"journal sync failed: {exc}"
                    self._cond.wait(1.0)
                continue
            with self._cond:
                self.syncs += 1
                self._durable = max(self._durable, max(seq for _seal, seq in batch))
                for seal, seq in batch:
                    if self._resend:
                        break  # the resend sends everything durable, in order
                    if not seal and seq in self._unacked:
                        self._produce(seq, self._unacked[seq])
                    elif seal and seq in self._seals:
                        self._produce_seal(seq)
                self._cond.notify_all()

    def _do_resend(self) -> None:
        """Under self._cond, with nothing in flight: send every unacknowledged event again."""
        if self._fatal:
            try:
                self._producer.flush(0)
            except Exception:  # pragma: no cover
                pass
            self._producer = Producer(self.conf)
            self._fatal = False
        self._resend = False
        self.resends += 1
        for seq in sorted(set(self._unacked) | set(self._seals)):
            if seq > self._durable:
                break  # not on disk yet: its sync produces it
            if seq in self._unacked:
                self._produce(seq, self._unacked[seq])
            if seq in self._seals and not self._resend:
                self._produce_seal(seq)
            if self._resend:  # failed again while resending: start over later
                break
