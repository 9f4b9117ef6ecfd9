"""``traintrace publish``: a JSON Lines log onto ``lineage.events``, validated first, keyed by
``job_id``, in file order.

Errors: :class:`~streams.kafka.reader.TopicNotFound` / :class:`~streams.kafka.reader.BrokerUnreachable`
(before the file is read), :class:`~streams.files.jsonl.JsonlError` (a bad line: file, line,
field; nothing is published), :class:`~streams.operator_commands.errors.OperatorError` (a delivery failed),
:class:`~streams.kafka.errors.KafkaSecurityError` (the cluster refused the write: its one line
names principal, operation and resource)."""

from __future__ import annotations

import os
import struct
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any, Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from streams.codec import Codec, EncodeError
from streams.core.events import event_to_dict
from streams.files.jsonl import JsonlError, LineError, open_text, read_events
from streams.kafka import reader
from streams.kafka.errors import KafkaAdapterError
from streams.kafka.security import ErrorWatch, kafka_error_of
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames
from streams.operator_commands.errors import OperatorError


@dataclass
class PublishResult:
    topic: str
    produced: int
    by_type: dict[str, int]
    skipped: list[LineError] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"topic": self.topic, "produced": self.produced,
                "by_type": dict(sorted(self.by_type.items())),
                "skipped": [str(s) for s in self.skipped]}


_LEN = struct.Struct(">IIB")  # key length, value length, index of the event type in codec.event_types

#: progress(phase, done, total): phase "reading" counts bytes of the input (total 0 when
#: unknown, e.g. stdin), phase "publishing" counts records delivered.
ProgressFn = Callable[[str, int, int], None]


def _spool_events(path: str, codec: Codec, spool: IO[bytes], skip_invalid: bool,
                  progress: ProgressFn | None) -> tuple[Counter[str], list[LineError], int]:
    """Validate and encode every line into ``spool`` (length-prefixed key, value; the index of
    its type in ``codec.event_types``, for its headers).

    Nothing is produced before the whole input is known to be good, so a bad line publishes
    nothing (unless ``skip_invalid``).
    """
    by_type: Counter[str] = Counter()
    skipped: list[LineError] = []
    total = os.path.getsize(path) if path != "-" else 0
    name = "<stdin>" if path == "-" else path
    fh = open_text(path)
    count = 0
    try:
        nth = 0  # read_events yields one item per non-blank line
        for item in read_events(path, fh):
            nth += 1
            if isinstance(item, LineError):
                bad: LineError | None = item
            else:
                d = event_to_dict(item)
                try:
                    value = codec.encode_event(d)
                except EncodeError as exc:
                    # parse_event accepted it but it does not fit the Avro contract (a number
                    # out of range): as bad as a malformed line. read_events skips blank lines,
                    # so the line number is recovered by counting.
                    bad = LineError(name, _line_of(path, nth) or nth, exc.field, exc.message)
                else:
                    bad = None
                    key = d["job_id"].encode("utf-8")
                    spool.write(_LEN.pack(len(key), len(value), codec.event_types.index(d["type"])))
                    spool.write(key)
                    spool.write(value)
                    by_type[d["type"]] += 1
                    count += 1
            if bad is not None:
                if not skip_invalid:
                    raise JsonlError(bad)
                skipped.append(bad)
            if progress is not None and nth % 5000 == 0:
                progress("reading", _tell(fh), total)
    finally:
        if path != "-":
            fh.close()
    if progress is not None:
        progress("reading", total, total)
    return by_type, skipped, count


def _tell(fh: IO[str]) -> int:
    """Bytes of the input read so far (approximate: the text layer reads ahead), 0 on a pipe."""
    try:
        return fh.buffer.tell()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return 0


def _line_of(path: str, nth: int) -> int | None:
    """The line number of the ``nth`` non-blank line of ``path`` (slow path, errors only)."""
    if path == "-":
        return None
    seen = 0
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                seen += 1
                if seen == nth:
                    return lineno
    return None


def _producer(kafka: KafkaSettings, timeout: float) -> tuple[Producer, ErrorWatch]:
    """An operator's producer: the settings' idempotent one, giving up after ``timeout``, and
    the watch keeping the cluster's refusal of it (a login, TLS, the protocol)."""
    watch = kafka.error_watch()
    return kafka.producer(**{"message.timeout.ms": int(timeout * 1000), "error_cb": watch}), watch


def _not_delivered(kafka: KafkaSettings, watch: ErrorWatch, error: BaseException | KafkaError, topic: str,
                   what: str) -> Exception:
    """The one line of a failed produce/flush/delivery: the cluster's refusal (principal,
    operation, resource: a missing WRITE on ``topic``, the FATAL ``CLUSTER_AUTHORIZATION_FAILED``
    of the idempotent producer's PID request, a rejected login), else an :class:`OperatorError`
    saying ``what`` failed. confluent-kafka may raise a producer's fatal error as a
    ``SystemError`` out of ``flush()`` (a delivery callback ran while it was pending); its cause
    is the KafkaError (:func:`streams.kafka.security.kafka_error_of`)."""
    refused = kafka.refusal(error, operation="WRITE", resource=topic)
    if refused is None:  # what the error callback was told, with the topic
        refused = watch.failure_for("WRITE", topic)
    if refused is not None:
        return refused
    err = kafka_error_of(error)
    why = err.str() if err is not None else (str(error) or type(error).__name__)
    return OperatorError(f"{what} on {kafka.bootstrap}: {why}")


def publish_file(path: str, kafka: KafkaSettings | str, topics: TopicNames, codec: Codec | None = None,
                 skip_invalid: bool = False, progress: ProgressFn | None = None,
                 timeout: float = 60.0) -> PublishResult:
    """Publish the events of a JSON Lines file (``-`` for stdin) to ``topics.events``.

    Every line is validated (and Avro-encoded) before anything is produced: a bad line raises
    :class:`JsonlError` naming file, line and field and publishes nothing, unless
    ``skip_invalid`` (then it is skipped and listed in the result). Each event is produced as
    ``codec.encode_event(event_to_dict(event))``, keyed by ``job_id`` (UTF-8), in file order, by
    one idempotent producer (so a job's events stay in order in their partition), with the
    Kafka headers of its type (``codec.headers.event``: ``traintrace.type``, ...). Raises
    :class:`OperatorError` when any delivery fails or does not complete within ``timeout``;
    :class:`TopicNotFound` / :class:`BrokerUnreachable` before reading the file when the topic
    is missing or Kafka cannot be reached (the topic is never auto-created).
    """
    kafka = KafkaSettings.of(kafka)
    codec = codec or Codec()
    topic = topics.events
    reader.topic_partitions(kafka, topic)
    with tempfile.TemporaryFile(prefix="traintrace-publish-") as spool:
        by_type, skipped, count = _spool_events(path, codec, spool, skip_invalid, progress)
        spool.seek(0)
        headers = [codec.headers.event(t) for t in codec.event_types]
        delivered = _produce_spool(spool, count, kafka, topic, timeout, progress, headers)
    return PublishResult(topic, delivered, dict(by_type), skipped)


def _produce_spool(spool: IO[bytes], count: int, kafka: KafkaSettings, topic: str, timeout: float,
                   progress: ProgressFn | None, headers: list[list[tuple[str, bytes]]]) -> int:
    producer, watch = _producer(kafka, timeout)
    try:
        return _produce_all(spool, count, kafka, producer, watch, topic, timeout, progress, headers)
    except (OperatorError, KafkaAdapterError):
        raise
    except Exception as exc:  # a fatal producer error (KafkaException, or a SystemError of it)
        raise _not_delivered(kafka, watch, exc, topic, f"cannot produce to {topic!r}") from exc


def _produce_all(spool: IO[bytes], count: int, kafka: KafkaSettings, producer: Producer, watch: ErrorWatch,
                 topic: str, timeout: float, progress: ProgressFn | None,
                 headers: list[list[tuple[str, bytes]]]) -> int:
    bootstrap = kafka.bootstrap
    delivered = 0
    errors: list[KafkaError] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1

    produced = 0
    header = _LEN.size
    while produced < count and not errors:
        lens = spool.read(header)
        if len(lens) < header:  # pragma: no cover - the spool is ours
            raise OperatorError("internal error: publish spool truncated")
        klen, vlen, tix = _LEN.unpack(lens)
        key = spool.read(klen)
        value = spool.read(vlen)
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers[tix], on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        produced += 1
        producer.poll(0)
        if watch.failure is not None:  # refused: every record would be
            raise watch.failure
        if progress is not None and produced % 5000 == 0:
            progress("publishing", delivered, count)
    deadline = time.monotonic() + timeout + 5
    remaining = producer.flush(min(1.0, timeout))
    while remaining > 0 and watch.failure is None and time.monotonic() < deadline:
        remaining = producer.flush(1.0)
    if errors or watch.failure is not None:
        failed = _not_delivered(kafka, watch, errors[0] if errors else KafkaException(), topic,
                                f"delivery to {topic!r} failed for {len(errors)} record(s) ({delivered} of "
                                f"{count} delivered)")
        raise failed
    if remaining > 0:
        raise OperatorError(f"{remaining} record(s) to {topic!r} on {bootstrap} were not "
                            f"delivered within {timeout:g}s ({delivered} of {count} delivered)")
    if progress is not None:
        progress("publishing", delivered, count)
    return delivered
