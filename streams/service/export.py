"""``traintrace export``: the topics an auditor needs, into one archive file.

Reads each topic from the beginning with ``read_committed`` up to its end offsets at the start
of the read (or to ``until``) and writes the records byte for byte
(:mod:`streams.adapters.archive`), with the schemas of every record type embedded.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from streams.adapters.archive import LogRecord, write_archive
from streams.codec import Codec
from streams.service.auditlog import TOPICS, Until

#: what ``export`` writes by default: the log, the processor's input order and its outputs
DEFAULT_TOPICS = ("events", "input", "control", "manifests", "commitments", "dlq")


@dataclass
class ExportSummary:
    path: str
    records: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    seconds: float = 0.0
    until: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "records": self.records, "total": sum(self.records.values()),
                "bytes": self.bytes, "seconds": round(self.seconds, 3), "until": self.until}


def embedded_schemas(codec: Codec | None = None) -> dict[str, Any]:
    """Every writer schema the codec knows: fingerprint (hex) -> {name, version, schema}."""
    codec = codec or Codec()
    out: dict[str, Any] = {}
    for info in codec.schemas:
        out[info.fingerprint.hex()] = {"name": info.fullname, "version": info.version, "schema": info.schema_str}
    return out


def export(bootstrap: str, names: Any, path: str, until: Until | None = None,
           topics: tuple[str, ...] = DEFAULT_TOPICS,
           progress: Callable[[str, int], None] | None = None) -> ExportSummary:
    """Write ``topics`` (logical names, see :data:`streams.service.auditlog.TOPICS`) to ``path``."""
    from streams.adapters.reader import TopicNotFound, read_to_end

    t0 = time.perf_counter()
    summary = ExportSummary(path, {t: 0 for t in topics}, until=until.describe() if until else None)

    def records() -> Iterator[LogRecord]:
        for logical in topics:
            name = getattr(names, TOPICS[logical])
            try:
                for msg in read_to_end(bootstrap, name):
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
        "bootstrap": bootstrap,
        "exported_at_ms": int(time.time() * 1000),
        "until": summary.until,
        "schemas": embedded_schemas(),
    }
    tmp = f"{path}.partial"
    write_archive(tmp, records(), meta)
    os.replace(tmp, path)
    summary.bytes = os.path.getsize(path)
    summary.seconds = time.perf_counter() - t0
    return summary
