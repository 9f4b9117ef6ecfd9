"""Every checkpoint's last status, for ``/checkpoints/{id}`` of any worker: the compacted
``lineage.checkpoints`` followed by a background thread, kept on disk (RocksDB in the worker's
data directory) so a worker's memory does not grow with every checkpoint ever written.

The thread keeps each record as it came (its Avro bytes) and a record is decoded only when
``/checkpoints/{id}`` asks for it: every worker reads every ``CheckpointStatus`` the fold
publishes (one every six events of a training cohort), and decoding each one on arrival cost a
worker 3–4 µs of CPU an event, in a thread that held the GIL from the fold (issue 27)."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any, MutableMapping

from streams.codec import Codec, DecodeError
from streams.kafka.reader import follow_batches
from streams.worker.rocks import open_disk_map
from streams.worker.settings import WorkerSettings

log = logging.getLogger("traintrace.worker")


class CheckpointView:
    """Every checkpoint's last status, from the compacted ``lineage.checkpoints`` (all
    partitions), kept up to date by a background thread: what ``/checkpoints/{id}`` answers.

    Every worker keeps an entry for every checkpoint of every cohort: the record's Avro bytes as
    the topic holds them (the thread's :meth:`put_raw`, decoded by :meth:`get`), or a tuple
    ``(status, job_id, incarnation, step, content_hash, incident_ids)`` of a decoded record
    (:meth:`put`), not the decoded dict (~0.85 KB a checkpoint). With the RocksDB store (the
    worker's default) the entries live in ``DATA_DIR/checkpoint-view`` (a cache of the topic,
    rebuilt at every start: about 0.2 KB a checkpoint on disk and a few MB of memory whatever
    their number); with ``--store memory`` in a dict (~0.3 KB a checkpoint)."""

    def __init__(self, settings: WorkerSettings, codec: Codec) -> None:
        self.settings = settings
        self.codec = codec
        # the RocksDB opens at start(): building the app (``faust -A ... agents``) touches no disk
        self.status: MutableMapping[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-view", daemon=True)

    def start(self) -> None:
        if self.settings.store.startswith("rocksdb"):
            self.status = open_disk_view(self.settings.data_dir / "checkpoint-view")
        self._thread.start()

    def stop(self) -> None:
        """Stop following, at the next record (the thread is a daemon: an idle one goes with the
        process)."""
        self._stop.set()

    def put(self, rec: dict[str, Any]) -> None:
        """Keep a decoded ``CheckpointStatus`` record (the last one of a checkpoint wins)."""
        self.status[rec["checkpoint_id"]] = _entry(rec)

    def put_raw(self, key: bytes | None, value: bytes | None) -> None:
        """Keep a ``lineage.checkpoints`` record as it came (keyed by its checkpoint id; the last
        one of a checkpoint wins), undecoded: :meth:`get` decodes it when asked."""
        if key is not None and value is not None:
            self.status[key.decode("utf-8", "replace")] = value

    def get(self, checkpoint_id: str) -> dict[str, Any] | None:
        """The checkpoint's last status (the fields ``/checkpoints/{id}`` shows), or None."""
        entry = self.status.get(checkpoint_id)
        if entry is None:
            return None
        if isinstance(entry, bytes):  # as put_raw kept it
            try:
                _name, rec = self.codec.decode_record(entry)
            except DecodeError:
                return None
            if rec.get("checkpoint_id") != checkpoint_id:  # a record under another's key: not its status
                return None
            entry = _entry(rec)
        status, job_id, incarnation, step, content, ids = entry
        return {"checkpoint_id": checkpoint_id, "status": status, "job_id": job_id,
                "incarnation": incarnation, "step": step,
                "content_hash": content.hex() if isinstance(content, bytes) else content,
                "incident_ids": list(ids)}

    def _run(self) -> None:
        try:
            put = self.put_raw
            for records in follow_batches(self.settings.kafka, self.settings.topics.checkpoints, from_beginning=True,
                                          connect_timeout=30.0, stop=self._stop):
                for key, value in records:
                    put(key, value)
        except Exception:  # pragma: no cover - logged, the view is best effort
            log.exception("checkpoint view stopped")


def _entry(rec: dict[str, Any]) -> tuple[str, str, int, int, bytes | str, tuple[str, ...]]:
    """A decoded ``CheckpointStatus`` as the view's tuple (what :meth:`CheckpointView.get` shows)."""
    ids = rec["incident_ids"]
    content: bytes | str = rec["content_hash"]
    try:
        raw = bytes.fromhex(content)
        if raw.hex() == content:  # kept as given otherwise: get() must return it unchanged
            content = raw
    except ValueError:
        pass
    return (sys.intern(rec["status"]), sys.intern(rec["job_id"]), rec["incarnation"], rec["step"],
            content, tuple(map(sys.intern, ids)) if ids else ())


def open_disk_view(path: Path) -> MutableMapping[str, tuple]:
    """The view's RocksDB at ``path``; a dict when RocksDB cannot be opened there (logged: the
    view then grows with the checkpoints in memory, as with ``--store memory``). Small memtables
    and a small block cache: 150k checkpoints (a 1M-event history) cost a worker +4 MB with
    these, +18 MB with 4 MB memtables and RocksDB's default cache (issue 27)."""
    disk = open_disk_map(path, "the checkpoint view", write_buffer=1024 * 1024, cache=2 * 1024 * 1024)
    return {} if disk is None else disk
