"""The job client's retention (SPEC §13): :class:`RetentionMixin`, the part of
:class:`~streams.client.job.JobClient` that keeps the referee's last ``RetentionNotice`` for the
job (signed like every command: one that does not verify is rejected) and records deletions.

The job never guesses: it may delete a checkpoint only when the last notice lists it as
deletable, and it records ``CheckpointDeleted`` *before* the files go (:meth:`may_delete` then
:meth:`deleted`, or :meth:`delete` doing both around the caller's removal). Without a notice
— no settle horizon, the referee not reached yet, a keyring that rejects it — nothing is
deletable. The last notice is kept in the journal directory (``RETENTION.json``), so a job that
restarts does not forget what it was allowed before its control position.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

from streams.control.commands import ControlCommand
from streams.files.atomic import atomic_write
from streams.signing import check_control

log = logging.getLogger("traintrace.client")

#: the record name of a retention notice on lineage.control
NOTICE = "RetentionNotice"
#: the file the last notice is kept in, in the journal directory
RETENTION_FILE = "RETENTION.json"


def notice_command(rec: dict[str, Any], partition: int | None, offset: int | None) -> ControlCommand:
    """A decoded RetentionNotice as the fetcher hands records over (it is no command: the
    client takes it aside before the control fold, :meth:`RetentionMixin._take_notices`)."""
    for key in ("command_id", "job_id"):
        if not isinstance(rec.get(key), str):
            raise TypeError(f"{NOTICE}.{key} is not a string")
    return ControlCommand(kind=NOTICE, command_id=rec["command_id"], job_id=rec["job_id"], action="RETENTION",
                          issued_ts=rec.get("issued_ts"), partition=partition, offset=offset, record=dict(rec))


class RetentionMixin:
    """What a JobClient knows of its checkpoints' retention (a part of ``JobClient``)."""

    journal_dir: Path
    job_id: str
    trusted_keys: Any
    _retention: dict[str, Any] | None
    _deleted: set[str]

    def _load_retention(self) -> None:
        self._retention = None
        self._deleted = set()
        path = self.journal_dir / RETENTION_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            self._retention = data.get("notice")
            self._deleted = set(data.get("deleted") or ())
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("traintrace client: %s unreadable (%s): nothing is deletable until the next notice",
                        path, exc)

    def _save_retention(self) -> None:
        atomic_write(self.journal_dir / RETENTION_FILE, json.dumps(
            {"notice": self._retention, "deleted": sorted(self._deleted)}, default=_jsonable).encode("utf-8"))

    def _take_notices(self, batch: list[ControlCommand],
                      reject: Callable[[ControlCommand, str], None]) -> list[ControlCommand]:
        """Keep the newest verified RetentionNotice of the batch; return the other records."""
        rest: list[ControlCommand] = []
        newest = None
        for c in batch:
            if c.kind != NOTICE:
                rest.append(c)
                continue
            if self.trusted_keys is not None:
                chk = check_control(NOTICE, c.record, self.trusted_keys)
                if not chk.ok:
                    reject(c, f"{chk.reason}: {chk.detail}")
                    continue
            version = c.record.get("version") or 0
            if newest is None or version > (newest.get("version") or 0):
                newest = dict(c.record)
        if newest is not None and (self._retention is None or
                                   newest["version"] > (self._retention.get("version") or 0)):
            newest.pop("signature", None)
            self._retention = newest
            self._save_retention()
            log.info("traintrace client %s: retention notice v%s: %d deletable, %d kept", self.job_id,
                     newest["version"], len(newest.get("deletable") or ()), len(newest.get("kept") or ()))
        return rest

    # ------------------------------------------------------------------ the API

    @property
    def retention(self) -> dict[str, Any] | None:
        """The referee's last verified RetentionNotice for this job (None: none yet)."""
        return self._retention

    def deletable_checkpoints(self) -> list[str]:
        """The checkpoints this job may delete now, oldest first (empty without a notice)."""
        if self._retention is None:
            return []
        return [d["checkpoint_id"] for d in self._retention.get("deletable") or ()
                if d["checkpoint_id"] not in self._deleted]

    def may_delete(self, checkpoint_id: str) -> bool:
        """Whether the last notice lists ``checkpoint_id`` as deletable."""
        return checkpoint_id in self.deletable_checkpoints()

    def kept_reason(self, checkpoint_id: str) -> str | None:
        """Why the referee keeps ``checkpoint_id`` (``not-settled``, ``latest``, ``base``,
        ``needed``; ``unknown``: no notice names it), None when it may be deleted."""
        if self.may_delete(checkpoint_id):
            return None
        for k in (self._retention or {}).get("kept") or ():
            if k["checkpoint_id"] == checkpoint_id:
                return str(k["reason"])
        return "unknown"

    def deleted(self, checkpoint_id: str) -> bool:
        """Record ``CheckpointDeleted`` for a checkpoint the last notice lists as deletable, and
        return True: the caller may remove its files now. False (nothing recorded, keep the
        files) when it is not deletable; the event is recorded once per checkpoint."""
        if checkpoint_id in self._deleted:
            return True
        if not self.may_delete(checkpoint_id):
            log.warning("traintrace client %s: %s is not deletable (%s): kept", self.job_id, checkpoint_id,
                        self.kept_reason(checkpoint_id))
            return False
        self._emit("CheckpointDeleted", {"checkpoint_id": checkpoint_id})  # type: ignore[attr-defined]
        self._deleted.add(checkpoint_id)
        self._save_retention()
        return True

    def delete(self, checkpoint_id: str, remove: Callable[[], object]) -> bool:
        """:meth:`deleted`, then ``remove()`` (the caller's deletion of the files) when it was
        allowed; whether it was."""
        if not self.deleted(checkpoint_id):
            return False
        remove()
        return True


def _jsonable(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if isinstance(v, tuple):
        return list(v)
    raise TypeError(f"not JSON: {type(v).__name__}")


__all__ = ["NOTICE", "RETENTION_FILE", "RetentionMixin", "notice_command"]
