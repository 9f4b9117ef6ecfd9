"""The job's local journal: what a restarted process needs to continue its record.

Two files in ``journal_dir`` (next to the job's checkpoints), plus a lock file:

``traintrace-journal.json`` — the **snapshot**, rewritten atomically (write to a temporary file,
fsync, rename, fsync the directory)::

    {"format": 1, "job_id", "cohort_id", "base_model", "started", "finished",
     "next_seq", "incarnation", "head_hash", "last_ts", "acked_seq",
     "applied_commands": [command_id, ...], "halt": {...} | null,
     "control": {"topic": name, "positions": {"<partition>": next offset}}, "updated_ts"}

``traintrace-journal.wal`` — the **write-ahead log** of events, append-only: one line per event
the job emitted, ``<crc32 hex8> <json>\\n`` with the event's ``seq``, ``incarnation``, ``hash``,
``ts``, ``type``, the ``command_id`` of a ``RolledBack`` and ``v``, the exact Avro bytes
(base64). A line is appended and fsynced *before* the event is handed to the Kafka producer, so:

- the chain continues across a crash at any point: on open, the WAL entries past the snapshot's
  ``next_seq`` are replayed into the state (seq, incarnation, head hash, applied commands);
- nothing is lost: entries past ``acked_seq`` (not yet known to be on the broker) are sent again,
  the same bytes, when the client starts. An event that was in fact delivered just before the
  crash arrives twice, identical; the processor drops identical duplicates by (job_id, seq)
  (SPEC §8), so this is at-least-once delivery with an exact chain.

A torn last line (the process died while appending) fails its CRC; it and anything after it are
cut off (such an event was never handed to the producer). The WAL is compacted — rewritten to
hold only the unacknowledged entries and the head — when it grows past ``compact_at`` entries
while little is pending, after a fresh snapshot has recorded the acknowledged position.

Sealed events (:mod:`streams.client.sealing`): a line of a sealed event says ``"sealed": true``
(its ``v`` carries the ``signature``), the ``JobStarted`` of a keyed job its ``public_key``
(also kept in the snapshot, so a restart checks it has the key the job declared). The head entry
survives every compaction: a restarted process whose head was never sealed re-sends it sealed
(a *seal record*), which needs its exact content. Seal records themselves are not journaled.

``traintrace-journal.lock`` is held (``flock``) by the one client using the journal: a second
process on the same journal would fork the chain, so it is refused.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from streams.client.errors import ClientError
from streams.files.atomic import atomic_write

JOURNAL_FILE = "traintrace-journal.json"
WAL_FILE = "traintrace-journal.wal"
LOCK_FILE = "traintrace-journal.lock"
FORMAT = 1


@dataclass
class WalEntry:
    seq: int
    incarnation: int
    hash: str
    ts: int
    type: str
    value: bytes
    command_id: str | None = None
    #: ``value`` carries the event's ``signature`` (its seal)
    sealed: bool = False
    #: the public key a ``JobStarted`` declares
    public_key: str | None = None

    def to_line(self) -> bytes:
        d = {"seq": self.seq, "incarnation": self.incarnation, "hash": self.hash, "ts": self.ts,
             "type": self.type, "command_id": self.command_id,
             "v": base64.b64encode(self.value).decode("ascii")}
        if self.sealed:  # written only when set: the lines of an unsealed job stay as they were
            d["sealed"] = True
        if self.public_key is not None:
            d["public_key"] = self.public_key
        body = json.dumps(d, separators=(",", ":"), sort_keys=True).encode("utf-8")
        return b"%08x %s\n" % (zlib.crc32(body), body)

    @classmethod
    def from_line(cls, line: bytes) -> "WalEntry | None":
        """The entry of one line, or None when the line is torn or corrupt."""
        if not line.endswith(b"\n") or len(line) < 10 or line[8:9] != b" ":
            return None
        body = line[9:-1]
        try:
            if int(line[:8], 16) != zlib.crc32(body):
                return None
            d = json.loads(body)
            return cls(int(d["seq"]), int(d["incarnation"]), str(d["hash"]), int(d["ts"]), str(d["type"]),
                       base64.b64decode(d["v"]), d.get("command_id"), bool(d.get("sealed", False)),
                       d.get("public_key"))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass
class JournalState:
    job_id: str
    cohort_id: str
    base_model: str
    started: bool = False
    finished: bool = False
    next_seq: int = 0
    incarnation: int = 0
    head_hash: str | None = None
    last_ts: int = 0
    acked_seq: int = -1
    applied_commands: list[str] = field(default_factory=list)
    halt: dict[str, Any] | None = None
    control_topic: str | None = None
    control_positions: dict[int, int] = field(default_factory=dict)
    #: the public key (hex) the job's JobStarted declared: its events are sealed by it
    public_key: str | None = None
    #: the last QuarantineNotice applied: [command_id, [checkpoint ids]] (a notice published
    #: again under its id with a longer list is applied again: streams.control.obey)
    quarantine: list[Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = {
            "format": FORMAT,
            "job_id": self.job_id,
            "cohort_id": self.cohort_id,
            "base_model": self.base_model,
            "started": self.started,
            "finished": self.finished,
            "next_seq": self.next_seq,
            "incarnation": self.incarnation,
            "head_hash": self.head_hash,
            "last_ts": self.last_ts,
            "acked_seq": self.acked_seq,
            "applied_commands": list(self.applied_commands),
            "halt": self.halt,
            "control": {"topic": self.control_topic,
                        "positions": {str(p): o for p, o in sorted(self.control_positions.items())}},
            "updated_ts": int(time.time() * 1000),
        }
        if self.public_key is not None:
            d["public_key"] = self.public_key
        if self.quarantine is not None:
            d["quarantine"] = self.quarantine
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "JournalState":
        if d.get("format") != FORMAT:
            raise ClientError(f"journal format {d.get('format')!r} is not supported (expected {FORMAT})")
        control = d.get("control") or {}
        return cls(
            job_id=d["job_id"], cohort_id=d["cohort_id"], base_model=d["base_model"],
            started=bool(d["started"]), finished=bool(d.get("finished", False)),
            next_seq=int(d["next_seq"]), incarnation=int(d["incarnation"]),
            head_hash=d.get("head_hash"), last_ts=int(d.get("last_ts", 0)),
            acked_seq=int(d.get("acked_seq", -1)),
            applied_commands=list(d.get("applied_commands") or ()),
            halt=d.get("halt"),
            control_topic=control.get("topic"),
            control_positions={int(p): int(o) for p, o in (control.get("positions") or {}).items()},
            public_key=d.get("public_key"),
            quarantine=d.get("quarantine"),
        )

    def apply(self, e: WalEntry) -> None:
        """Advance the state by one event (the WAL replay and the live path share this)."""
        if e.seq != self.next_seq:
            raise ClientError(f"journal: event seq {e.seq} does not follow next_seq {self.next_seq}")
        self.next_seq = e.seq + 1
        self.incarnation = e.incarnation
        self.head_hash = e.hash
        self.last_ts = max(self.last_ts, e.ts)
        if e.type == "JobStarted":
            self.started = True
            self.public_key = e.public_key
        elif e.type == "JobFinished":
            self.finished = True
        elif e.type == "RolledBack":
            self.finished = False
            if e.command_id and e.command_id not in self.applied_commands:
                self.applied_commands.append(e.command_id)


class Journal:
    """The snapshot and the WAL of one job in ``directory`` (see the module doc).

    Not thread-safe by itself: the client serialises calls with its own lock.
    """

    def __init__(self, directory: str | os.PathLike[str], job_id: str, cohort_id: str, base_model: str,
                 *, fsync: bool = True, compact_at: int = 10_000, group_commit: bool = False) -> None:
        self.dir = Path(directory)
        #: group commit: append() only writes; sync() (the delivery's sync thread) fsyncs
        self.group_commit = group_commit
        self._io = threading.Lock()  # append/sync/compact/close: sync runs in another thread
        self.dir.mkdir(parents=True, exist_ok=True)
        self.snapshot_path = self.dir / JOURNAL_FILE
        self.wal_path = self.dir / WAL_FILE
        self.fsync = fsync
        self.compact_at = compact_at
        self._lock_fh = open(self.dir / LOCK_FILE, "a+b")
        try:
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_fh.close()
            raise ClientError(f"the journal in {self.dir} is in use by another process "
                              "(one client per job at a time)") from None
        try:
            self.state, self.unacked, self.wal_entries, self.head_entry = self._load(job_id, cohort_id, base_model)
            self._wal = open(self.wal_path, "ab")
            self.save()
        except BaseException:
            self._release()
            raise

    # -- loading ---------------------------------------------------------------------------------

    def _load(self, job_id: str, cohort_id: str,
              base_model: str) -> tuple[JournalState, list[WalEntry], int, WalEntry | None]:
        if self.snapshot_path.exists():
            try:
                state = JournalState.from_json(json.loads(self.snapshot_path.read_bytes()))
            except (ValueError, KeyError, TypeError) as exc:
                raise ClientError(f"the journal {self.snapshot_path} is unreadable: {exc}") from exc
            if state.job_id != job_id:
                raise ClientError(f"the journal in {self.dir} belongs to job {state.job_id!r}, not {job_id!r}")
            if state.cohort_id != cohort_id:
                raise ClientError(f"the journal in {self.dir} says job {job_id!r} is in cohort "
                                  f"{state.cohort_id!r}, not {cohort_id!r}")
        else:
            state = JournalState(job_id, cohort_id, base_model)
        unacked: list[WalEntry] = []
        count = 0
        head: WalEntry | None = None
        if self.wal_path.exists():
            good_end = 0
            with open(self.wal_path, "rb") as fh:
                for line in fh:
                    e = WalEntry.from_line(line)
                    if e is None:
                        break  # a torn tail: never handed to the producer
                    if e.seq >= state.next_seq:
                        state.apply(e)
                    if e.seq > state.acked_seq:
                        unacked.append(e)
                    good_end += len(line)
                    count += 1
                    head = e
            if good_end != self.wal_path.stat().st_size:
                with open(self.wal_path, "r+b") as fh:
                    fh.truncate(good_end)
                    os.fsync(fh.fileno())
        if head is not None and head.seq != state.next_seq - 1:
            head = None  # not the head the snapshot knows (a WAL of an older format, compacted away)
        return state, unacked, count, head

    # -- writing ---------------------------------------------------------------------------------

    def append(self, entry: WalEntry) -> None:
        """Record one event and advance the state. Call before producing it: fsynced here, or
        with ``group_commit`` by :meth:`sync` before the delivery produces it."""
        probe = JournalState(self.state.job_id, self.state.cohort_id, self.state.base_model,
                             next_seq=self.state.next_seq)
        probe.apply(entry)  # validates seq before anything is written
        with self._io:
            self._wal.write(entry.to_line())
            self._wal.flush()
            if self.fsync and not self.group_commit:
                os.fsync(self._wal.fileno())
        self.state.apply(entry)
        self.wal_entries += 1
        self.head_entry = entry

    def sync(self) -> None:
        """Make every line appended so far durable (group commit: the delivery's sync thread)."""
        with self._io:
            if self.fsync and not self._wal.closed:
                os.fsync(self._wal.fileno())

    def save(self) -> None:
        """Rewrite the snapshot atomically."""
        atomic_write(self.snapshot_path,
                     json.dumps(self.state.to_json(), indent=1, sort_keys=True).encode("utf-8"))

    def needs_compaction(self, pending: int) -> bool:
        return self.wal_entries >= self.compact_at and pending <= max(100, self.compact_at // 10)

    def compact(self, acked_seq: int, unacked: Iterable[WalEntry]) -> None:
        """Record ``acked_seq`` in the snapshot, then rewrite the WAL with ``unacked`` and the
        head entry only."""
        by_seq = {e.seq: e for e in unacked}
        if self.head_entry is not None:
            by_seq.setdefault(self.head_entry.seq, self.head_entry)
        keep = [by_seq[s] for s in sorted(by_seq)]
        self.state.acked_seq = max(self.state.acked_seq, acked_seq)
        self.save()
        data = b"".join(e.to_line() for e in keep)
        with self._io:
            self._wal.close()
            atomic_write(self.wal_path, data)  # fsynced: what it keeps is durable
            self._wal = open(self.wal_path, "ab")
        self.wal_entries = len(keep)

    def close(self) -> None:
        with self._io, contextlib.suppress(Exception):
            self._wal.close()
        self._release()

    def _release(self) -> None:
        with contextlib.suppress(Exception):
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
        with contextlib.suppress(Exception):
            self._lock_fh.close()
