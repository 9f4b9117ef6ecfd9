"""Every checkpoint's last status, for ``/checkpoints/{id}`` of any worker: the compacted
``lineage.checkpoints`` followed by a background thread."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from streams.codec import Codec, DecodeError
from streams.kafka.reader import follow
from streams.worker.settings import WorkerSettings

log = logging.getLogger("traintrace.worker")


class CheckpointView:
    """Every checkpoint's last status, from the compacted ``lineage.checkpoints`` (all
    partitions), kept up to date by a background thread: what ``/checkpoints/{id}`` answers.

    Every worker keeps an entry for every checkpoint of every cohort, so an entry is a tuple
    ``(status, job_id, incarnation, step, content_hash, incident_ids)`` with the strings that
    repeat interned and a lower-case hex content hash as its 32 bytes, not the decoded record
    (a dict of ten fields: ~0.85 KB a checkpoint, ~0.2 KB so)."""

    def __init__(self, settings: WorkerSettings, codec: Codec) -> None:
        self.settings = settings
        self.codec = codec
        self.status: dict[str, tuple[str, str, int, int, bytes | str, tuple[str, ...]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-view", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop following, at the next record (the thread is a daemon: an idle one goes with the
        process)."""
        self._stop.set()

    def put(self, rec: dict[str, Any]) -> None:
        """Keep a decoded ``CheckpointStatus`` record (the last one of a checkpoint wins)."""
        ids = rec["incident_ids"]
        content: bytes | str = rec["content_hash"]
        try:
            raw = bytes.fromhex(content)
            if raw.hex() == content:  # kept as given otherwise: get() must return it unchanged
                content = raw
        except ValueError:
            pass
        self.status[rec["checkpoint_id"]] = (
            sys.intern(rec["status"]), sys.intern(rec["job_id"]), rec["incarnation"], rec["step"],
            content, tuple(map(sys.intern, ids)) if ids else ())

    def get(self, checkpoint_id: str) -> dict[str, Any] | None:
        """The checkpoint's last status (the fields ``/checkpoints/{id}`` shows), or None."""
        entry = self.status.get(checkpoint_id)
        if entry is None:
            return None
        status, job_id, incarnation, step, content, ids = entry
        return {"checkpoint_id": checkpoint_id, "status": status, "job_id": job_id,
                "incarnation": incarnation, "step": step,
                "content_hash": content.hex() if isinstance(content, bytes) else content,
                "incident_ids": list(ids)}

    def _run(self) -> None:
        try:
            for msg in follow(self.settings.kafka, self.settings.topics.checkpoints, from_beginning=True,
                              connect_timeout=30.0):
                if self._stop.is_set():
                    return
                try:
                    _name, rec = self.codec.decode_record(msg.value)
                except DecodeError:
                    continue
                self.put(rec)
        except Exception:  # pragma: no cover - logged, the view is best effort
            log.exception("checkpoint view stopped")
