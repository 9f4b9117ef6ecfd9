"""The log an auditor reads: records of the traintrace topics, from Kafka, an archive or JSONL.

An :class:`AuditLog` holds, per logical topic, the records in (partition, offset) order:

``events``       what the jobs wrote (``lineage.events``)
``input``        what the processor folded, in the order it folded it (``lineage.by-cohort``:
                 ``EventBatch`` records, each routed event carrying its events-topic position
                 and its original bytes)
``control``      commands; ``manifests``; ``commitments``; ``dlq``; ``alerts``

:func:`fold_order` yields the events in the processor's order: from ``input`` when the log has
it (the order decisions were actually made in, which manifest versions and commitment roots
depend on), else in the events' own order (a JSON Lines file's line order; for an events-only
log of several partitions, partition by partition).
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from streams.files.archive import LogRecord, read_archive
from streams.codec import Codec, DecodeError
from streams.core.cohorts import CohortRouter
from streams.core.errors import InvalidEvent
from streams.core.events import Event
from streams.referee.input import BadBatch, parse_routed, read_batch
from streams.audit.errors import AuditError

if TYPE_CHECKING:  # confluent-kafka is imported only to read the topics
    from streams.kafka.settings import KafkaSettings

#: logical topic -> TopicNames field
TOPICS: dict[str, str] = {
    "events": "events",
    "input": "by_cohort",
    "control": "control",
    "manifests": "manifests",
    "commitments": "commitments",
    "dlq": "dlq",
    "alerts": "alerts",
    "snapshots": "snapshots",
}


#: the order in which the topics' end offsets are taken before any is read (``export``, an audit
#: of the topics): what a topic holds is made from the topics after it (the processor's outputs
#: from its input, its input from the events), so every output record read was made from records
#: that were in the log before the output's end was taken, and are read too. A live log is read as
#: one consistent cut. Taken in the other order, or topic by topic as each is read, a snapshot or
#: command written meanwhile could cover input that was not read ("covers input the log does not
#: have"). Topics not named here come first.
CUT_ORDER = ("alerts", "snapshots", "commitments", "manifests", "control", "dlq", "input", "events")


def cut_order(topics: Iterable[str]) -> list[str]:
    """``topics`` (logical names) in :data:`CUT_ORDER`."""
    return sorted(topics, key=lambda t: CUT_ORDER.index(t) if t in CUT_ORDER else -1)


class AuditLogError(AuditError):
    """The log cannot be read (named source, what is wrong)."""


@dataclass
class AuditLog:
    records: dict[str, list[LogRecord]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    #: records an archive held after a later offset of their topic partition (tampering, or a
    #: file not written by ``export``)
    disorder: list[str] = field(default_factory=list)

    def topic(self, name: str) -> list[LogRecord]:
        return self.records.get(name, [])

    @property
    def has_input(self) -> bool:
        return bool(self.records.get("input"))

    def count(self) -> int:
        return sum(len(v) for v in self.records.values())

    def add(self, rec: LogRecord) -> None:
        self.records.setdefault(rec.topic, []).append(rec)

    def sort(self) -> None:
        for recs in self.records.values():
            recs.sort(key=lambda r: (r.partition, r.offset))


@dataclass(frozen=True, slots=True)
class Until:
    """Where a log is cut: records with a timestamp after ``ts_ms``, or at/after a per-
    (topic, partition) offset, are left out."""

    ts_ms: int | None = None
    offsets: tuple[tuple[str, int, int], ...] = ()

    def keeps(self, rec: LogRecord) -> bool:
        if self.ts_ms is not None and rec.timestamp > self.ts_ms:
            return False
        for topic, partition, offset in self.offsets:
            if rec.topic == topic and rec.partition == partition and rec.offset >= offset:
                return False
        return True

    def describe(self) -> dict[str, Any]:
        return {"ts_ms": self.ts_ms, "offsets": [list(o) for o in self.offsets]}


def parse_time(text: str) -> int:
    """Milliseconds since the epoch from ``text``: an integer (ms), or an ISO 8601 time (UTC when
    no zone is given). Raises ValueError with a readable message."""
    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time "
                         "(e.g. 2026-11-29T18:30:00Z)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def parse_offsets(text: str) -> tuple[tuple[str, int, int], ...]:
    """``events:0=120,input:1=40`` -> ((topic, partition, offset), ...): stop before each offset."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            tp, off = part.split("=")
            topic, partition = tp.split(":")
            if topic not in TOPICS:
                raise ValueError
            out.append((topic, int(partition), int(off)))
        except ValueError:
            raise ValueError(f"bad offset bound {part!r}: want TOPIC:PARTITION=OFFSET with TOPIC one of "
                             f"{', '.join(TOPICS)}") from None
    return tuple(out)


def codec_for(log: AuditLog) -> Codec:
    """A codec that also reads what an archive's embedded writer schemas wrote (an archive of
    another traintrace version: records of a schema this one does not ship still decode, into
    the current shape)."""
    embedded = log.meta.get("schemas") if isinstance(log.meta.get("schemas"), dict) else {}
    if not embedded:
        return Codec()
    from streams.codec.schemas import default_schema_set

    known = {info.fingerprint.hex() for info in default_schema_set()}
    extra = [v["schema"] for fp, v in sorted(embedded.items())
             if fp not in known and isinstance(v, dict) and isinstance(v.get("schema"), str)]
    if not extra:
        return Codec()
    try:
        return Codec(default_schema_set().with_writers(*extra))
    except Exception:  # an unusable embedded schema: the records it wrote are reported undecodable
        return Codec()


@contextmanager
def no_gc() -> Iterator[None]:
    """Reading and auditing a log allocate a large, acyclic heap: the cyclic collector would
    scan it over and over (a third of an audit's time), and in forked workers it would copy
    every inherited page. Freeze what exists and pause collection for the duration."""
    enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


# ---------------------------------------------------------------------------- loaders


def load_archive(path: str, until: Until | None = None) -> AuditLog:
    with no_gc():
        return _load_archive(path, until)


def _load_archive(path: str, until: Until | None) -> AuditLog:
    meta, rows = read_archive(path)
    log = AuditLog(meta=meta, source=path)
    last: dict[tuple[str, int], int] = {}
    for rec in rows:
        tp = (rec.topic, rec.partition)
        if last.get(tp, -1) >= rec.offset:
            log.disorder.append(rec.where)
        last[tp] = rec.offset
        if until is None or until.keeps(rec):
            log.add(rec)
    log.sort()
    return log


def load_topics(kafka: KafkaSettings | str, names: Any, until: Until | None = None,
                topics: Iterable[str] = tuple(TOPICS),
                progress: Callable[[str, int], None] | None = None) -> AuditLog:
    """Read every named logical topic from the beginning (``read_committed``) to its end now."""
    from streams.kafka.settings import KafkaSettings

    kafka = KafkaSettings.of(kafka)
    with no_gc():
        return _load_topics(kafka, names, until, topics, progress)


def _load_topics(kafka: KafkaSettings, names, until, topics, progress) -> AuditLog:
    from streams.kafka.reader import read_topics_to_end

    topics = tuple(topics)
    log = AuditLog(meta={"topics": {t: getattr(names, TOPICS[t]) for t in topics},
                         "bootstrap": kafka.bootstrap, "read_at_ms": int(time.time() * 1000)},
                   source=f"kafka://{kafka.bootstrap}")
    logical_of = {getattr(names, TOPICS[t]): t for t in cut_order(topics)}  # ends taken in this order
    # one consumer for every topic at once: the small topics cost no set-up of their own
    for name, msgs in read_topics_to_end(kafka, list(logical_of)).items():
        logical = logical_of[name]
        out = log.records.setdefault(logical, [])
        for m in msgs:
            key = m.key()
            ts_type, ts = m.timestamp()
            rec = LogRecord(logical, m.partition(), m.offset(), ts if ts_type and ts >= 0 else 0,
                            key.decode("utf-8", "replace") if key is not None else None, m.value())
            if until is None or until.keeps(rec):
                out.append(rec)
        if progress is not None:
            progress(logical, len(msgs))
    log.records = {t: log.records[t] for t in topics if t in log.records}  # in the order asked for
    log.sort()
    return log


def load_jsonl(path: str, codec: Codec | None = None) -> AuditLog:
    """An events-only log from a JSON Lines file (SPEC §11): line N is offset N-1 of partition
    0, its timestamp the event's ``ts``. Raises :class:`JsonlError` on a bad line."""
    return read_jsonl(path, codec=codec)[0]


def read_jsonl(path: str, skip_invalid: bool = False, codec: Codec | None = None) -> tuple[AuditLog, list[Any]]:
    """An events-only log from a JSON Lines file (``-``: stdin): valid event N is offset N of
    partition 0, its timestamp the event's ``ts``. Returns ``(log, skipped LineErrors)``;
    raises :class:`JsonlError` on the first bad line unless ``skip_invalid``."""
    from streams.files.jsonl import JsonlError, LineError, read_events
    from streams.core.events import event_to_dict

    codec = codec or Codec()
    log = AuditLog(meta={"format": "jsonl"}, source="<stdin>" if path == "-" else path)
    skipped: list[LineError] = []
    offset = 0
    for item in read_events(path):
        if isinstance(item, LineError):
            if not skip_invalid:
                raise JsonlError(item)
            skipped.append(item)
            continue
        log.add(LogRecord("events", 0, offset, item.ts, item.job_id, codec.encode_event(event_to_dict(item))))
        offset += 1
    return log, skipped


def load(source: str, until: Until | None = None, kafka: KafkaSettings | str | None = None,
         names: Any = None) -> AuditLog:
    """An archive (``.avro``), a JSON Lines file, or ``kafka`` (the topics, needs ``kafka``)."""
    if source == "kafka":
        if kafka is None or names is None:
            raise AuditLogError("reading the topics needs a bootstrap and topic names")
        return load_topics(kafka, names, until)
    with open(source, "rb") as fh:
        head = fh.read(4)
    if head == b"Obj\x01":
        return load_archive(source, until)
    log = load_jsonl(source)
    if until is not None:
        log.records["events"] = [r for r in log.topic("events") if until.keeps(r)]
    return log


# ---------------------------------------------------------------------------- fold order


@dataclass(frozen=True, slots=True)
class Folded:
    """One event as the processor folded it (or failed to decode it)."""

    cohort: str
    event: Event | None
    ts: int                      # the processor's clock for it: the input record's timestamp
    origin: tuple[int, int]      # (partition, offset) on lineage.events
    value: bytes | None          # the event's bytes as routed
    via: LogRecord               # the record it came from (an input batch or the event itself)
    error: str | None = None


def fold_order(log: AuditLog, codec: Codec | None = None) -> Iterator[Folded]:
    codec = codec or codec_for(log)
    if log.has_input:
        yield from _from_input(log, codec)
    else:
        yield from _from_events(log, codec)


def _from_input(log: AuditLog, codec: Codec) -> Iterator[Folded]:
    for rec in log.topic("input"):
        try:
            batch = read_batch(codec, rec.value)
        except BadBatch as exc:
            yield Folded("", None, rec.timestamp, (-1, -1), rec.value, rec, str(exc))
            continue
        for r in batch.events:
            origin = (r["partition"], r["offset"])
            try:
                event = parse_routed(codec, r)
            except (DecodeError, InvalidEvent) as exc:
                yield Folded(batch.cohort, None, rec.timestamp, origin, r["value"], rec, str(exc))
                continue
            yield Folded(batch.cohort, event, rec.timestamp, origin, r["value"], rec)


def _from_events(log: AuditLog, codec: Codec) -> Iterator[Folded]:
    router = CohortRouter()
    for rec in log.topic("events"):
        try:
            event = codec.decode_event_typed(rec.value or b"")
        except (DecodeError, InvalidEvent) as exc:
            yield Folded("", None, rec.timestamp, (rec.partition, rec.offset), rec.value, rec, str(exc))
            continue
        yield Folded(router.route(event), event, rec.timestamp, (rec.partition, rec.offset), rec.value, rec)
