"""Reading a topic without a consumer group: to its end, or following it.

Both readers ``assign`` every partition themselves (no group membership, no commits, nothing
left behind on the broker) with ``isolation.level=read_committed``:

- :func:`read_to_end` reads every partition from the beginning up to the end offsets taken when
  it starts (the last stable offsets under ``read_committed``), then stops. Records written
  afterwards are not read, so the answer is a snapshot.
- :func:`follow` keeps yielding new records until interrupted (or until idle for
  ``idle_timeout`` seconds, or ``max_messages`` records).
- :func:`read_range` reads given offset ranges of given partitions (a worker's replay of a
  partition, records its Faust consumer skipped, the partitions of a map it owns).

Records of one partition come out in offset order; partitions are interleaved in arrival order.
Topics are looked up with a consumer that never asks the broker to auto-create them, so reading
a topic that does not exist raises :class:`TopicNotFound` and creates nothing.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from streams.kafka.retry import is_transient  # noqa: F401 - re-exported: the one policy
from streams.kafka.retry import retry_transient as _retry_transient
from streams.kafka.settings import KafkaSettings, client_logger
from streams.kafka.errors import (
    KafkaAdapterError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaSecurityError,
    KafkaTlsError,
)

#: How long to wait for the broker's metadata before saying it cannot be reached.
CONNECT_TIMEOUT = 10.0
#: seconds "all brokers down" must stand, with no sign of a wrong security.protocol in the client's
#: log, before a read says the broker cannot be reached (CI: a TLS client at a SASL_SSL listener was
#: told "0/2 brokers are down": the log line that tells the mismatch came after that error)
DOWN_GRACE_S = 2.0


class ReaderError(KafkaAdapterError):
    """Reading a topic failed; the message says which topic and why."""


class BrokerUnreachable(ReaderError):
    pass


class ReadRefused(ReaderError, KafkaSecurityError):
    """The broker refused the reader: its credentials, its TLS, or an ACL (the message names
    the principal, the topic and the operation)."""


class ReadUnauthenticated(ReadRefused, KafkaAuthenticationError):
    pass


class ReadTlsFailed(ReadRefused, KafkaTlsError):
    pass


class ReadUnauthorized(ReadRefused, KafkaAuthorizationError):
    pass


def _as_read_error(exc: KafkaSecurityError) -> ReadRefused:
    """The reader's error (a :class:`ReaderError` too) of a refusal."""
    for base, cls in ((KafkaAuthenticationError, ReadUnauthenticated), (KafkaTlsError, ReadTlsFailed),
                      (KafkaAuthorizationError, ReadUnauthorized)):
        if isinstance(exc, base):
            return cls(str(exc))
    return ReadRefused(str(exc))


class TopicNotFound(ReaderError):
    def __init__(self, topic: str, bootstrap: str) -> None:
        super().__init__(f"topic {topic!r} does not exist on {bootstrap}")
        self.topic = topic
        self.bootstrap = bootstrap


@dataclass(frozen=True, slots=True)
class Message:
    """One record read from Kafka (the fields of confluent-kafka's ``Message`` that matter)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None  # milliseconds since the epoch, None when the broker gave none


def _text(exc: KafkaException) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.str() if isinstance(arg, KafkaError) else str(arg)


#: Errors that end a read: the topic went away or may not be read. Others (a broker
#: connection dropping, a leader moving) are retried by librdkafka and only reported.
_FATAL_CODES = frozenset({
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
})


def _fatal(err: KafkaError) -> bool:
    return err.fatal() or err.code() in _FATAL_CODES


def _message(msg: Any) -> Message:
    ts_type, ts = msg.timestamp()
    return Message(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                   ts if ts_type != 0 and ts >= 0 else None)


#: a reader's prefetch queue (librdkafka's ``queued.max.messages.kbytes``) and the most one fetch
#: brings (``fetch.max.bytes``; a larger record still comes whole): a reader goes through a topic
#: once, and what larger buffers held stays in the process's heap after it. Reading 150k records
#: of 220 B: peak RSS +55 MB with librdkafka's defaults (64 MB, 50 MB) or 16 MB and 50 MB, +15 MB
#: with 2 MB and 2 MB, as fast (issue 27: a worker's memory after taking over a long history)
READER_QUEUE_KB = 2 * 1024
READER_FETCH_BYTES = 2 * 1024 * 1024


class _Consumer:
    """A confluent-kafka Consumer that remembers the client-level errors it was told of."""

    def __init__(self, kafka: KafkaSettings, **overrides: Any) -> None:
        self.down: str | None = None
        self.kafka = kafka
        self.watch = kafka.error_watch()
        # the group id is never joined nor committed to (assign() only)
        self.consumer = kafka.consumer(f"traintrace-reader-{uuid.uuid4().hex}", **{
            "enable.auto.offset.store": False,
            "allow.auto.create.topics": False,
            "enable.partition.eof": True,
            # small buffers (see READER_QUEUE_KB); a full queue is fetched again after 10 ms, not
            # librdkafka's 1 s (which would make the small queue slow)
            "queued.max.messages.kbytes": READER_QUEUE_KB,
            "fetch.max.bytes": READER_FETCH_BYTES,
            "fetch.queue.backoff.ms": 10,
            "error_cb": self._on_error,
            "logger": self.watch,  # reads what librdkafka only logs: a wrong security.protocol
            **overrides,
        })

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self.down = err.str()
        self.watch(err)

    def check(self) -> None:
        """Raise :class:`ReadRefused` when the broker refused the credentials or TLS."""
        if self.watch.failure is not None:
            raise _as_read_error(self.watch.failure) from self.watch.failure

    def refused(self, err: KafkaError, topic: str, operation: str = "READ") -> None:
        """Raise :class:`ReadRefused` when ``err`` is a refusal (an ACL, the credentials)."""
        known = self.kafka.refusal(err, operation=operation, resource=topic)
        if known is not None:
            raise _as_read_error(known) from known


def _consumer(kafka: KafkaSettings, **overrides: Any) -> _Consumer:
    return _Consumer(kafka, **overrides)


def _partitions(c: _Consumer, bootstrap: str, topic: str, timeout: float) -> list[int]:
    """The topic's partitions; fails fast when every broker refuses the connection."""
    consumer = c.consumer
    deadline = time.monotonic() + timeout
    down_since: float | None = None
    while True:
        try:
            md = consumer.list_topics(topic=topic,  # retried: this loop, until the deadline
                                      timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            break
        except KafkaException as exc:
            consumer.poll(0)  # serves error_cb and the log
            c.check()
            if time.monotonic() >= deadline and c.watch.suspect is not None:
                raise _as_read_error(c.watch.suspect) from exc
            # every broker down: unless the connections failed as a wrong security.protocol
            # does, which the next rounds confirm (ErrorWatch.MISMATCH_REPEATS); the log line
            # that says so may come after the "brokers are down" error, so that is believed once it
            # has stood DOWN_GRACE_S with no such line
            if c.down is not None and c.watch.suspect is None:
                if down_since is None:
                    down_since = time.monotonic()
                if time.monotonic() - down_since >= DOWN_GRACE_S:
                    raise BrokerUnreachable(f"cannot reach Kafka at {bootstrap}: {c.down}") from exc
            else:
                down_since = None
            if time.monotonic() >= deadline:
                raise BrokerUnreachable(f"cannot reach Kafka at {bootstrap}: {c.down or _text(exc)}") from exc
    meta = md.topics.get(topic)
    if meta is not None and meta.error is not None and meta.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
        # first: a topic the principal may not DESCRIBE comes without partitions, as if missing
        c.refused(meta.error, topic, "DESCRIBE")
    if meta is None or (meta.error is not None
                        and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART) or not meta.partitions:
        raise TopicNotFound(topic, bootstrap)
    if meta.error is not None:
        raise ReaderError(f"cannot read topic {topic!r} on {bootstrap}: {meta.error.str()}")
    return sorted(meta.partitions)


def topic_partitions(kafka: KafkaSettings | str, topic: str, timeout: float = CONNECT_TIMEOUT) -> list[int]:
    """The partition ids of ``topic``; raises :class:`TopicNotFound` or :class:`BrokerUnreachable`.

    Never creates the topic (a producer's metadata request could, on a broker with
    ``auto.create.topics.enable``).
    """
    kafka = KafkaSettings.of(kafka)
    bootstrap = kafka.bootstrap
    c = _consumer(kafka)
    try:
        return _partitions(c, bootstrap, topic, timeout)
    finally:
        c.consumer.close()


T = TypeVar("T")

def retry_transient(call: Callable[[float], T], what: str, timeout: float) -> T:
    """:func:`streams.kafka.retry.retry_transient` (the one policy), failing as :class:`ReaderError`."""
    try:
        return _retry_transient(call, what, timeout)
    except KafkaAdapterError as exc:
        raise ReaderError(str(exc)) from exc.__cause__


def _watermarks(consumer: Consumer, bootstrap: str, topic: str, partition: int,
                timeout: float) -> tuple[int, int]:
    """(low, high) of one partition, retrying what a fresh topic or a moving leader causes."""
    return retry_transient(
        lambda left: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=left, cached=False),
        f"the end offsets of {topic!r}[{partition}] on {bootstrap}", timeout)


def read_to_end(kafka: KafkaSettings | str, topic: str, timeout: float = 30.0,
                connect_timeout: float = CONNECT_TIMEOUT, ends: Mapping[int, int] | None = None) -> Iterator[Message]:
    """Every record of ``topic`` from the beginning to the end offsets taken at the start (or to
    ``ends``, partition -> end offset, taken earlier by :func:`end_offsets`).

    ``timeout`` bounds each wait for the broker (metadata, end offsets, and any stretch with no
    progress while reading), not the whole read, so a large topic is read whole. Raises
    :class:`TopicNotFound`, :class:`BrokerUnreachable` or :class:`ReaderError`.
    """
    kafka = KafkaSettings.of(kafka)
    given = {topic: ends} if ends is not None else None
    for batch in _batches_to_end(kafka, [topic], timeout, connect_timeout, 5000, missing_ok=False, given=given):
        for msg in batch:
            yield _message(msg)


def end_offsets(kafka: KafkaSettings | str, topics: list[str], timeout: float = 30.0,
                connect_timeout: float = CONNECT_TIMEOUT) -> dict[str, dict[int, int]]:
    """topic -> partition -> end offset of each non-empty partition of ``topics`` now, taken in
    the order given, by one consumer (for :func:`read_to_end`'s ``ends``). A missing topic is left
    out. Raises :class:`BrokerUnreachable`."""
    kafka = KafkaSettings.of(kafka)
    c = _consumer(kafka)
    try:
        out: dict[str, dict[int, int]] = {}
        for topic in topics:
            try:
                parts = _partitions(c, kafka.bootstrap, topic, min(timeout, connect_timeout))
            except TopicNotFound:
                continue
            out[topic] = _ends(c.consumer, kafka.bootstrap, topic, parts, timeout)
        return out
    finally:
        c.consumer.close()


def _ends(consumer: Consumer, bootstrap: str, topic: str, parts: list[int], timeout: float) -> dict[int, int]:
    """partition -> end offset of each non-empty partition of ``parts`` of ``topic``, now."""
    ends: dict[int, int] = {}
    for p in parts:
        low, high = _watermarks(consumer, bootstrap, topic, p, timeout)
        if high > low:
            ends[p] = high
    return ends


def read_topics_to_end(kafka: KafkaSettings | str, topics: list[str], timeout: float = 30.0,
                       connect_timeout: float = CONNECT_TIMEOUT, batch: int = 5000) -> dict[str, list[Any]]:
    """Every record of each of ``topics`` (that exists) from the beginning to its end offsets
    taken at the start, read by one consumer at once: topic -> confluent-kafka messages (per
    partition in offset order). A missing topic is left out."""
    kafka = KafkaSettings.of(kafka)
    out: dict[str, list[Any]] = {}
    for msgs in _batches_to_end(kafka, topics, timeout, connect_timeout, batch, missing_ok=True, found=out):
        for msg in msgs:
            out[msg.topic()].append(msg)
    return out


def _batches_to_end(kafka: KafkaSettings, topics: list[str], timeout: float, connect_timeout: float, batch: int,
                    missing_ok: bool, found: dict[str, list[Any]] | None = None,
                    given: Mapping[str, Mapping[int, int]] | None = None) -> Iterator[list[Any]]:
    """One consumer over every partition of ``topics``, from the beginning to the end offsets
    taken at the start (or ``given``: topic -> partition -> end); yields the records in lists. A
    missing topic raises :class:`TopicNotFound` unless ``missing_ok`` (then ``found`` gets the
    topics that exist)."""
    bootstrap = kafka.bootstrap
    c = _consumer(kafka)
    consumer = c.consumer
    try:
        ends: dict[tuple[str, int], int] = {}
        for topic in topics:
            try:  # for given ends too: the metadata it fetches connects the consumer before it reads
                parts = _partitions(c, bootstrap, topic, min(timeout, connect_timeout))
            except TopicNotFound:
                if not missing_ok:
                    raise
                continue
            if found is not None:
                found[topic] = []
            mine = given[topic] if given is not None and topic in given else \
                _ends(consumer, bootstrap, topic, parts, timeout)
            ends.update(((topic, p), end) for p, end in mine.items())
        if not ends:
            return
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in sorted(ends)])
        pending = set(ends)
        last_progress = time.monotonic()
        while pending:
            # consume() waits for the whole count or the timeout: keep the timeout short
            msgs = consumer.consume(batch, timeout=0.05)
            if not msgs:
                if time.monotonic() - last_progress > timeout:
                    raise ReaderError(
                        f"reading {', '.join(topics)} on {bootstrap} made no progress for {timeout:g}s "
                        f"(partitions {sorted(pending)} not read to their end)")
                continue
            out = []
            for msg in msgs:
                tp = (msg.topic(), msg.partition())
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # the end of what is readable now: at or past the snapshot's end (a
                        # transaction marker can make the last offset unreadable)
                        last_progress = time.monotonic()
                        pending.discard(tp)
                        continue
                    if _fatal(err):
                        c.refused(err, tp[0])
                        raise ReaderError(f"reading {tp[0]!r} on {bootstrap} failed: {err.str()}")
                    client_logger.warning("reading %s: %s", tp[0], err.str())
                    continue
                last_progress = time.monotonic()
                if tp not in pending:
                    continue
                off = msg.offset()
                if off >= ends[tp]:
                    pending.discard(tp)
                    continue
                if off >= ends[tp] - 1:
                    pending.discard(tp)
                out.append(msg)
            if out:
                yield out
    finally:
        consumer.close()


def _assign_all(c: _Consumer, bootstrap: str, topic: str, from_beginning: bool, connect_timeout: float) -> None:
    """Assign every partition of ``topic`` to ``c``, at its beginning or (only new records) its end."""
    parts = _partitions(c, bootstrap, topic, connect_timeout)
    start = OFFSET_BEGINNING if from_beginning else OFFSET_END
    c.consumer.assign([TopicPartition(topic, p, start) for p in parts])


def _told(c: _Consumer, err: KafkaError, topic: str, bootstrap: str) -> None:
    """A record's error while following ``topic``: a fatal one raises :class:`ReaderError` (a
    refusal its one line), any other is logged and the follow goes on."""
    if _fatal(err):
        c.refused(err, topic)
        raise ReaderError(f"reading {topic!r} on {bootstrap} failed: {err.str()}")
    client_logger.warning("reading %s: %s", topic, err.str())


def follow(kafka: KafkaSettings | str, topic: str, from_beginning: bool = False, *,
           idle_timeout: float | None = None, max_messages: int | None = None,
           connect_timeout: float = CONNECT_TIMEOUT, poll_interval: float = 0.5) -> Iterator[Message]:
    """Yield the records of ``topic`` as they arrive, until interrupted.

    Starts at the end of every partition (only new records), or at the beginning with
    ``from_beginning``. Stops after ``max_messages`` records or after ``idle_timeout`` seconds
    with no record, when given (for scripts and tests). Ctrl-C raises ``KeyboardInterrupt``
    within ``poll_interval`` seconds; the consumer is closed either way.
    """
    kafka = KafkaSettings.of(kafka)
    bootstrap = kafka.bootstrap
    if max_messages is not None and max_messages <= 0:
        return
    c = _consumer(kafka)
    consumer = c.consumer
    try:
        _assign_all(c, bootstrap, topic, from_beginning, connect_timeout)
        seen = 0
        last = time.monotonic()
        while True:
            msg = consumer.poll(poll_interval)
            if msg is None or (msg.error() is not None
                               and msg.error().code() == KafkaError._PARTITION_EOF):
                if idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                    return
                continue
            err = msg.error()
            if err is not None:
                _told(c, err, topic, bootstrap)
                continue
            last = time.monotonic()
            yield _message(msg)
            seen += 1
            if max_messages is not None and seen >= max_messages:
                return
    finally:
        consumer.close()


def follow_batches(kafka: KafkaSettings | str, topic: str, from_beginning: bool = False, *, batch: int = 500,
                   connect_timeout: float = CONNECT_TIMEOUT, poll_interval: float = 0.5,
                   stop: Any = None) -> Iterator[list[tuple[bytes | None, bytes | None]]]:
    """Like :func:`follow`, for a thread that keeps a table of a topic: the ``(key, value)`` of
    its records as they arrive, up to ``batch`` at a time (one ``consume()`` call each: the
    thread gives the GIL up once a batch, not once a record), until ``stop`` (an Event) is set."""
    kafka = KafkaSettings.of(kafka)
    c = _consumer(kafka)
    consumer = c.consumer
    try:
        _assign_all(c, kafka.bootstrap, topic, from_beginning, connect_timeout)
        while stop is None or not stop.is_set():
            out = []
            for msg in consumer.consume(batch, poll_interval):
                err = msg.error()
                if err is None:
                    out.append((msg.key(), msg.value()))
                elif err.code() != KafkaError._PARTITION_EOF:
                    _told(c, err, topic, kafka.bootstrap)
            if out:
                yield out
    finally:
        consumer.close()


class PartitionNotFound(ReaderError):
    """A partition asked for that the topic does not have."""


def read_range(kafka: KafkaSettings | str, topic: str, ranges: dict[int, tuple[int, int | None]],
               timeout: float = 30.0, batch: int = 500, complete: set[int] | None = None) -> Iterator[Any]:
    """The records of ``topic``'s partitions at offsets ``ranges[partition] = (start, end)``
    (``end`` None: the partition's end offset when the read starts), as confluent-kafka messages
    (headers included), in offset order within a partition.

    A partition's read stops at its end: a record at or past ``end``, or the end of what is
    readable now (records not written yet), so fewer records than asked for may come back:
    ``complete`` (when given) gets the partitions read up to their ``end``. ``timeout`` bounds
    each stretch with no progress. Raises :class:`TopicNotFound`, :class:`BrokerUnreachable` or
    :class:`ReaderError` (:class:`PartitionNotFound` for a partition the topic does not have)."""
    kafka = KafkaSettings.of(kafka)
    bootstrap = kafka.bootstrap
    c = _consumer(kafka)
    consumer = c.consumer
    try:
        have = _partitions(c, bootstrap, topic, min(timeout, CONNECT_TIMEOUT))
        missing = sorted(set(ranges) - set(have))
        if missing:
            raise PartitionNotFound(f"topic {topic!r} on {bootstrap} has no partition {missing}")
        ends: dict[int, int] = {}
        for p, (start, end) in ranges.items():
            if end is None:
                end = _watermarks(consumer, bootstrap, topic, p, timeout)[1]
            if end > start:
                ends[p] = end
            elif complete is not None:
                complete.add(p)
        if not ends:
            return
        consumer.assign([TopicPartition(topic, p, ranges[p][0]) for p in sorted(ends)])
        nxt = {p: ranges[p][0] for p in ends}  # the next offset of each partition still read
        last_progress = time.monotonic()
        while ends:
            # consume() waits for the whole count or the timeout: keep the timeout short, and ask
            # for no more than the ranges still hold (a record, or a partition's end, each), so
            # that the last records of a read (or the one record a snapshot's read wants) do not
            # wait the timeout out (issue 27: 100 ms of every one-record read)
            want = max(1, min(batch, sum(max(1, ends[p] - nxt[p]) for p in ends)))
            msgs = consumer.consume(want, timeout=0.1)
            if not msgs:
                if time.monotonic() - last_progress > timeout:
                    raise ReaderError(f"reading {topic!r}{sorted(ends)} on {bootstrap} made no progress "
                                      f"for {timeout:g}s")
                continue
            last_progress = time.monotonic()
            for msg in msgs:
                p = msg.partition()
                if p not in ends:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        del ends[p]
                    elif _fatal(err):
                        c.refused(err, topic)
                        raise ReaderError(f"reading {topic!r} on {bootstrap} failed: {err.str()}")
                    else:
                        client_logger.warning("reading %s: %s", topic, err.str())
                    continue
                offset, end = msg.offset(), ends[p]
                nxt[p] = offset + 1
                if offset + 1 >= end:  # the last one asked for, or one past it (a gap before it)
                    del ends[p]
                    if complete is not None:
                        complete.add(p)
                if offset < end:
                    yield msg
    finally:
        consumer.close()


class RecordReader:
    """Single records of one topic at known offsets, through one consumer kept open: a snapshot
    brought back into memory costs one fetch, not a new client's connection and metadata
    (issue 27: ~60 ms of a fresh client's, against a few ms). One read at a time (a lock: the
    fold and the HTTP views' threads share it). Anything but the record asked for (an error, the
    partition's end, another offset) is read again through :func:`read_range`, with a fresh
    consumer, and this one is opened anew at the next read."""

    def __init__(self, kafka: KafkaSettings | str, topic: str) -> None:
        self.kafka = KafkaSettings.of(kafka)
        self.topic = topic
        self._c: _Consumer | None = None
        self._lock = threading.Lock()

    def read(self, partition: int, offset: int, timeout: float = 30.0) -> Any | None:
        """The confluent-kafka message at ``offset`` of ``partition``, or None when there is none
        (compacted away, or not written). Raises :class:`ReaderError` as :func:`read_range`."""
        with self._lock:
            try:
                msg = self._fast(partition, offset, min(timeout, 5.0))
            except Exception:  # noqa: BLE001 - read again the sure way, below
                self._close()
                msg = None
            if msg is not None:
                return msg
            msgs = list(read_range(self.kafka, self.topic, {partition: (offset, offset + 1)}, timeout=timeout))
            return msgs[0] if msgs and msgs[0].offset() == offset else None

    def _fast(self, partition: int, offset: int, timeout: float) -> Any | None:
        if self._c is None:
            # a fetch waits for data at most 5 ms (librdkafka's 500 ms would hold the next read
            # behind the broker's long poll of the one before)
            self._c = _consumer(self.kafka, **{"fetch.wait.max.ms": 5})
        consumer = self._c.consumer
        consumer.assign([TopicPartition(self.topic, partition, offset)])
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for msg in consumer.consume(1, timeout=0.1):
                    if msg.error() is None and msg.partition() == partition and msg.offset() == offset:
                        return msg
                    return None  # the end, an error, another record: the sure way
            return None
        finally:
            consumer.unassign()  # no fetching ahead between reads

    def _close(self) -> None:
        c, self._c = self._c, None
        if c is not None:
            try:
                c.consumer.close()
            except Exception:  # noqa: BLE001 - it is being replaced
                pass

    def close(self) -> None:
        with self._lock:
            self._close()
