"""The :class:`AuditContext`: what the checks of one audit share, passed into each of them —
the log, the codec, a :class:`~streams.audit.report.Check` per verdict, the decoded events by
position, the fold order — and the helpers they use. The checks (``chains``, ``input_check``,
``replay``, ``commitments``, ``snapshots``, ``compare``) import this module, never the
:class:`~streams.audit.auditor.Auditor` that runs them in order: no import circle."""

from __future__ import annotations

from typing import Any, Callable, Iterator

from streams.codec import Codec, DecodeError
from streams.core.events import Event
from streams.core.state import Config
from streams.files.archive import LogRecord
from streams.audit.log import AuditLog, codec_for
from streams.audit.items import FoldItem, where
from streams.audit.report import CHECKS, Check, Finding


class AuditContext:
    def __init__(self, log: AuditLog, config: Config | None = None, trusted_keys: Any = None,
                 codec: Codec | None = None, cut: bool = False,
                 progress: Callable[[str, int, int], None] | None = None) -> None:
        self.log = log
        self.config = config or Config()
        self.trusted = trusted_keys
        self.codec = codec or codec_for(log)
        self.cut = cut or bool(log.meta.get("until"))
        self.progress = progress
        self.checks = {name: Check(name) for name in CHECKS}
        self.checks["commitments"].trusted = trusted_keys is not None
        # events position -> (record, event or None, error)
        self.by_origin: dict[tuple[int, int], tuple[LogRecord, Event | None, str | None]] = {}
        self.items: list[FoldItem] = []
        self.dead: set[tuple[int, int]] = set()
        #: id(event) -> its canonical bytes (computed once for the chain check, reused by the fold;
        #: the events are kept alive by by_origin, so their ids are stable)
        self.canonical: dict[int, Any] = {}
        #: events the replay's seal gate refused: (item, event, kind, reason) (streams.core.seals)
        self.refused: list[tuple[Any, Any, str, str]] = []

    # ------------------------------------------------------------------ shared by the checks

    def decoded(self, topic: str, chk: Check, what: str) -> Iterator[tuple[LogRecord, str, dict[str, Any]]]:
        """The records of ``topic`` decoded: (record, name, value); an undecodable one fails
        ``chk``; tombstones are skipped."""
        for rec in self.log.topic(topic):
            if rec.value is None:
                continue
            try:
                name, value = self.codec.decode_record(rec.value)
            except DecodeError as exc:
                chk.fail(Finding(f"undecodable {what}: {exc}", job_id=rec.key if topic == "control" else None,
                                 where=where(rec)))
                continue
            yield rec, name, value

    def tick(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)

    def present(self, topic: str) -> bool:
        return topic in self.log.records or topic in (self.log.meta.get("topics") or {})

    def missing(self, chk: Check, f: Finding) -> None:
        """A record the log implies and the topic lacks: a failure, unless the log was cut
        (``--until``) before it could be published."""
        if self.cut:
            f.what += ": not yet published when the log was read or cut"
            chk.warn(f)
        else:
            chk.fail(f)
