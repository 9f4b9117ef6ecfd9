"""What the operators' commands do on the live pipeline (no printing).

- :func:`publish_file`: a JSON Lines log onto ``lineage.events``, validated first, keyed by
  ``job_id``, in file order;
- :func:`read_control` / :func:`effective_plans`: the plans and halts in force, folded from
  ``lineage.control`` read to its end (the fold itself, :func:`fold_control` /
  :class:`ControlState`, is pure);
- :func:`release_job`: an operator's release of a halted job (``HaltCommand`` reason ``RELEASE``);
- :func:`alerts`: the ``Alert`` records of ``lineage.alerts``, to the end or following.

Errors: :class:`~streams.kafka.reader.TopicNotFound`,
:class:`~streams.kafka.reader.BrokerUnreachable` (both :class:`ReaderError`),
:class:`OperatorError` (a delivery failed, the registry is unreachable),
:class:`~streams.files.jsonl.JsonlError` (a bad input line, naming file, line and field).
"""

from __future__ import annotations

import getpass
import os
import struct
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable, Iterator, Mapping

from confluent_kafka import KafkaException, Producer

from streams.kafka import reader
from streams.files.jsonl import JsonlError, LineError, open_text, read_events
from streams.kafka.clients import TopicNames, producer_config
from streams.kafka.reader import BrokerUnreachable, ReaderError, TopicNotFound
from streams.codec import Codec, DecodeError, EncodeError, SchemaRegistryUnavailable
from streams.core.events import event_to_dict
from streams.core.ids import hash_parts

__all__ = [
    "BrokerUnreachable",
    "ControlState",
    "OperatorError",
    "PLAN_RECORDS",
    "PublishResult",
    "ReaderError",
    "TopicNotFound",
    "alerts",
    "effective_plans",
    "fold_control",
    "publish_file",
    "read_control",
    "release_command_id",
    "release_job",
]


class OperatorError(Exception):
    """An operator command could not complete; the message says what and why."""


# --------------------------------------------------------------------------------------------
# publish


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


def _producer(bootstrap: str, timeout: float) -> Producer:
    return Producer(producer_config(bootstrap, **{"message.timeout.ms": int(timeout * 1000)}))


def publish_file(path: str, bootstrap: str, topics: TopicNames, codec: Codec | None = None,
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
    codec = codec or Codec()
    topic = topics.events
    reader.topic_partitions(bootstrap, topic)
    with tempfile.TemporaryFile(prefix="traintrace-publish-") as spool:
        by_type, skipped, count = _spool_events(path, codec, spool, skip_invalid, progress)
        spool.seek(0)
        headers = [codec.headers.event(t) for t in codec.event_types]
        delivered = _produce_spool(spool, count, bootstrap, topic, timeout, progress, headers)
    return PublishResult(topic, delivered, dict(by_type), skipped)


def _produce_spool(spool: IO[bytes], count: int, bootstrap: str, topic: str, timeout: float,
                   progress: ProgressFn | None, headers: list[list[tuple[str, bytes]]]) -> int:
    producer = _producer(bootstrap, timeout)
    delivered = 0
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err.str() if hasattr(err, "str") else str(err))
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
            except KafkaException as exc:
                raise OperatorError(f"cannot produce to {topic!r} on {bootstrap}: {exc}") from exc
        produced += 1
        producer.poll(0)
        if progress is not None and produced % 5000 == 0:
            progress("publishing", delivered, count)
    deadline = time.monotonic() + timeout + 5
    remaining = producer.flush(timeout)
    while remaining > 0 and time.monotonic() < deadline:
        remaining = producer.flush(1.0)
    if errors:
        raise OperatorError(f"delivery to {topic!r} on {bootstrap} failed for "
                            f"{len(errors)} record(s) ({delivered} of {count} delivered): "
                            f"{errors[0]}")
    if remaining > 0:
        raise OperatorError(f"{remaining} record(s) to {topic!r} on {bootstrap} were not "
                            f"delivered within {timeout:g}s ({delivered} of {count} delivered)")
    if progress is not None:
        progress("publishing", delivered, count)
    return delivered


# --------------------------------------------------------------------------------------------
# plans and halts: the fold of lineage.control

#: The control records that carry a job's plan; the last one of a job is its plan in force.
PLAN_RECORDS = ("RollbackCommand", "QuarantineNotice", "PlanCleared")


def _plan_of(name: str, rec: Mapping[str, Any]) -> dict[str, Any] | None:
    if name == "PlanCleared":
        return None
    plan: dict[str, Any] = {
        "job_id": rec["job_id"],
        "incarnation": rec["incarnation"],
        "action": None,
        "target_checkpoint_id": None,
        "target_step": None,
        "incident_ids": sorted(rec["incident_ids"]),
        "command_id": rec["command_id"],
    }
    if name == "QuarantineNotice":
        plan["action"] = "QUARANTINE"
        plan["quarantined_checkpoint_ids"] = sorted(rec["quarantined_checkpoint_ids"])
    else:
        plan["action"] = rec["action"]
        plan["target_checkpoint_id"] = rec.get("target_checkpoint_id")
        plan["target_step"] = rec.get("target_step")
    return plan


@dataclass
class ControlState:
    """The fold of ``lineage.control``: per job the plan and the halt in force.

    Feed it the decoded records of a job in their order (the topic is keyed by ``job_id``, so
    partition order is a job's order); records of different jobs may interleave in any way.

    - Plans: the last of a job's ``RollbackCommand`` / ``QuarantineNotice`` / ``PlanCleared``
      is in force; a ``PlanCleared`` means no plan; a command superseded by a later one is
      folded away. A ``QuarantineNotice`` is the plan ``QUARANTINE`` (no target).
    - Halts: the last ``HaltCommand`` of a job is in force; reason ``RELEASE`` means not halted.
    - Records that do not decode (or decode to something malformed) are counted in
      ``undecodable``; decoded records of other types in ``ignored``.
    """

    plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    halts: dict[str, dict[str, Any]] = field(default_factory=dict)
    records: int = 0
    undecodable: int = 0
    ignored: int = 0
    undecodable_reasons: Counter[str] = field(default_factory=Counter)

    def add(self, name: str, record: Mapping[str, Any]) -> None:
        self.records += 1
        if name not in PLAN_RECORDS and name != "HaltCommand":
            self.ignored += 1
            return
        try:
            job_id = record["job_id"]
            if not isinstance(job_id, str):
                raise TypeError("job_id")
            if name in PLAN_RECORDS:
                plan = _plan_of(name, record)
                if plan is None:
                    self.plans.pop(job_id, None)
                else:
                    self.plans[job_id] = plan
            elif name == "HaltCommand":
                reason = record["reason"]
                if reason == "RELEASE":
                    self.halts.pop(job_id, None)
                else:
                    self.halts[job_id] = {"job_id": job_id, "reason": reason,
                                          "detail": record.get("detail") or ""}
        except (KeyError, TypeError, AttributeError):
            self.records -= 1
            self.add_undecodable("MALFORMED")

    def add_undecodable(self, reason: str = "UNDECODABLE") -> None:
        self.records += 1
        self.undecodable += 1
        self.undecodable_reasons[reason] += 1

    def to_dict(self) -> dict[str, list[dict[str, Any]]]:
        """``{"plans": [...], "halts": [...]}``, each sorted by ``job_id`` (SPEC §11 shapes,
        plans with their ``command_id``)."""
        return {"plans": [dict(self.plans[j]) for j in sorted(self.plans)],
                "halts": [dict(self.halts[j]) for j in sorted(self.halts)]}


def fold_control(items: Iterable[tuple[str, Mapping[str, Any]] | BaseException | None]) -> ControlState:
    """Fold decoded control records: each item is ``(record name, record)``, or an exception
    (e.g. a :class:`DecodeError`) or ``None`` for a record that did not decode."""
    state = ControlState()
    for item in items:
        if item is None:
            state.add_undecodable()
        elif isinstance(item, BaseException):
            state.add_undecodable(getattr(item, "reason", type(item).__name__))
        else:
            name, record = item
            state.add(name, record)
    return state


def _decoded(messages: Iterable[reader.Message], codec: Codec
             ) -> Iterator[tuple[str, dict[str, Any]] | BaseException]:
    for msg in messages:
        try:
            yield codec.decode_record(msg.value)  # a tombstone (None) is DecodeError EMPTY
        except DecodeError as exc:
            yield exc
        except SchemaRegistryUnavailable as exc:
            raise OperatorError(f"cannot decode {msg.topic!r}: {exc}") from exc


def read_control(bootstrap: str, topics: TopicNames, codec: Codec | None = None,
                 timeout: float = 30.0) -> ControlState:
    """Read ``topics.control`` to its end and fold it (see :class:`ControlState`)."""
    codec = codec or Codec()
    return fold_control(_decoded(reader.read_to_end(bootstrap, topics.control, timeout), codec))


def effective_plans(bootstrap: str, topics: TopicNames, codec: Codec | None = None,
                    timeout: float = 30.0) -> dict[str, list[dict[str, Any]]]:
    """The plans and halts in force: ``{"plans": [...], "halts": [...]}`` sorted by job_id.

    Use :func:`read_control` for the counts of records read and undecodable.
    """
    return read_control(bootstrap, topics, codec, timeout).to_dict()


# --------------------------------------------------------------------------------------------
# release


def release_command_id(job_id: str, issued_ts: int) -> str:
    """SHA-256 over ("RELEASE", job_id, issued_ts), SPEC §10 encoding."""
    return hash_parts(("RELEASE", job_id, issued_ts))


def _operator_name() -> str:
    name = os.environ.get("USER")
    if name:
        return name
    try:
        return getpass.getuser()
    except Exception:  # no user name anywhere (containers)
        return "unknown"


def release_job(bootstrap: str, topics: TopicNames, job_id: str, operator: str | None = None,
                cohort_id: str | None = None, *, codec: Codec | None = None,
                issued_ts: int | None = None, timeout: float = 30.0) -> dict[str, Any]:
    """Release a halted job: produce a ``HaltCommand`` with reason ``RELEASE`` to
    ``topics.control`` keyed by ``job_id``, and return the record.

    ``detail`` names the operator (``$USER`` by default). Raises :class:`TopicNotFound`,
    :class:`BrokerUnreachable` or :class:`OperatorError` (delivery failed).
    """
    if not job_id:
        raise ValueError("job_id must not be empty")
    codec = codec or Codec()
    topic = topics.control
    reader.topic_partitions(bootstrap, topic)
    ts = int(time.time() * 1000) if issued_ts is None else int(issued_ts)
    record = {
        "command_id": release_command_id(job_id, ts),
        "job_id": job_id,
        "cohort_id": cohort_id,
        "reason": "RELEASE",
        "detail": f"released by operator {operator or _operator_name()}",
        "seq": None,
        "issued_ts": ts,
    }
    value = codec.encode_record("HaltCommand", record)
    headers = codec.headers.record("HaltCommand")
    producer = _producer(bootstrap, timeout)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err.str() if hasattr(err, "str") else str(err))

    try:
        producer.produce(topic, key=job_id.encode("utf-8"), value=value, headers=headers,
                         on_delivery=on_delivery)
    except KafkaException as exc:
        raise OperatorError(f"cannot produce to {topic!r} on {bootstrap}: {exc}") from exc
    remaining = producer.flush(timeout + 5)
    if errors or remaining:
        raise OperatorError(f"the release of {job_id!r} was not delivered to {topic!r} on "
                            f"{bootstrap}: {errors[0] if errors else 'timed out'}")
    return {**record, "type": "HaltCommand"}


# --------------------------------------------------------------------------------------------
# alerts


def alerts(bootstrap: str, topics: TopicNames, codec: Codec | None = None, follow: bool = False,
           from_beginning: bool = False, *, idle_timeout: float | None = None,
           max_messages: int | None = None,
           on_skip: Callable[[reader.Message, str], None] | None = None) -> Iterator[dict[str, Any]]:
    """The ``Alert`` records of ``topics.alerts`` as decoded dicts.

    Without ``follow``: the whole topic read to its end. With ``follow``: new alerts as they
    arrive (from the beginning with ``from_beginning``) until interrupted, ``idle_timeout``
    seconds without a record, or ``max_messages`` alerts. Records that do not decode or are not
    alerts are skipped (``on_skip(message, reason)`` is told).
    """
    codec = codec or Codec()
    if max_messages is not None and max_messages <= 0:
        return
    if follow:
        messages: Iterable[reader.Message] = reader.follow(
            bootstrap, topics.alerts, from_beginning, idle_timeout=idle_timeout)
    else:
        messages = reader.read_to_end(bootstrap, topics.alerts)
    seen = 0
    for msg in messages:
        try:
            name, rec = codec.decode_record(msg.value)
        except DecodeError as exc:
            if on_skip is not None:
                on_skip(msg, exc.reason)
            continue
        except SchemaRegistryUnavailable as exc:
            raise OperatorError(f"cannot decode {msg.topic!r}: {exc}") from exc
        if name != "Alert":
            if on_skip is not None:
                on_skip(msg, f"a {name}, not an Alert")
            continue
        yield rec
        seen += 1
        if max_messages is not None and seen >= max_messages:
            return
