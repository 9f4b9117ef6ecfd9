"""``traintrace export``: the topics an auditor needs, into one archive file.

Reads each topic from the beginning with ``read_committed`` up to its end offsets at the start
of the read (or to ``until``) and writes the records byte for byte
(:mod:`streams.files.archive`), with the schemas of every record type embedded.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from streams.files.archive import LogRecord, default_codec, write_archive
from streams.codec import Codec
from streams.audit.log import TOPICS, Until, cut_order

if TYPE_CHECKING:  # confluent-kafka is imported only when exporting
    from streams.kafka.settings import KafkaSettings

#: what ``export`` writes by default: the log, the processor's input order and its outputs
DEFAULT_TOPICS = ("events", "input", "control", "manifests", "commitments", "dlq", "snapshots")
#: Avro container codecs ``export`` offers: ``null`` (uncompressed: any Avro reader, no extra
#: library), ``deflate`` (zlib, every Avro implementation), ``snappy`` (needs ``cramjam`` for
#: fastavro, to write and to read); default :func:`streams.files.archive.default_codec`
CODECS = ("null", "deflate", "snappy")


@dataclass
class ExportSummary:
    path: str
    records: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    seconds: float = 0.0
    until: dict[str, Any] | None = None
    codec: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "records": self.records, "total": sum(self.records.values()),
                "bytes": self.bytes, "seconds": round(self.seconds, 3), "until": self.until,
                "codec": self.codec}


def embedded_schemas(codec: Codec | None = None) -> dict[str, Any]:
    """Every writer schema the codec knows: fingerprint (hex) -> {name, version, schema}."""
    codec = codec or Codec()
    out: dict[str, Any] = {}
    for info in codec.schemas:
        out[info.fingerprint.hex()] = {"name": info.fullname, "version": info.version, "schema": info.schema_str}
    return out


def export(kafka: KafkaSettings | str, names: Any, path: str, until: Until | None = None,
           topics: tuple[str, ...] = DEFAULT_TOPICS,
           progress: Callable[[str, int], None] | None = None, codec: str | None = None) -> ExportSummary:
    """Write ``topics`` (logical names, see :data:`streams.audit.log.TOPICS`) to ``path``.

    ``codec``: the Avro container codec, one of :data:`CODECS` (default: snappy when ``cramjam``
    is installed, else deflate); ``"null"`` writes an uncompressed archive any Avro reader opens."""
    from streams.kafka.reader import TopicNotFound, end_offsets, read_to_end
    from streams.kafka.settings import KafkaSettings

    codec = codec or default_codec()
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}: choose from {', '.join(CODECS)}")
    if codec == "snappy":
        try:
            import cramjam  # noqa: F401  (fastavro's snappy support)
        except ImportError:
            raise ValueError("codec snappy needs the cramjam package (pip install cramjam); "
                             "or choose null or deflate") from None
    kafka = KafkaSettings.of(kafka)
    t0 = time.perf_counter()
    summary = ExportSummary(path, {t: 0 for t in topics}, until=until.describe() if until else None, codec=codec)

    # every end before any read, outputs first: one consistent cut
    by_name = end_offsets(kafka, [getattr(names, TOPICS[t]) for t in cut_order(topics)])
    ends = {t: by_name[getattr(names, TOPICS[t])] for t in topics if getattr(names, TOPICS[t]) in by_name}

    def records() -> Iterator[LogRecord]:
        for logical in topics:
            name = getattr(names, TOPICS[logical])
            if logical not in ends:
                continue
            try:
                for msg in read_to_end(kafka, name, ends=ends[logical]):
                    rec = LogRecord(logical, msg.partition, msg.offset, msg.timestamp or 0,
                                    msg.key.decode("utf-8", "replace") if msg.key is not None else None,
                                    msg.value)
                    if until is not None and not until.keeps(rec):
                        continue
                    summary.records[logical] += 1
                    if progress is not None:
                        progress(logical, summary.records[logical])
                    yield rec
            except TopicNotFound:
                continue

    meta = {
        "topics": {t: getattr(names, TOPICS[t]) for t in topics},
        "bootstrap": kafka.bootstrap,
        "exported_at_ms": int(time.time() * 1000),
        "until": summary.until,
        "schemas": embedded_schemas(),
    }
    tmp = f"{path}.partial"
    write_archive(tmp, records(), meta, codec=codec)
    os.replace(tmp, path)
    summary.bytes = os.path.getsize(path)
    summary.seconds = time.perf_counter() - t0
    return summary
