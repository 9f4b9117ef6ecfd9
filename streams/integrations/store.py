"""Where a cohort's checkpoints live: one directory every job of the cohort can read.

A checkpoint ``ID`` is the file ``ROOT/ID.pt`` (``torch.save``) or the directory ``ROOT/ID/``
(safetensors, or a framework's own checkpoint folder). Jobs find each other's checkpoints by id,
which is what the lineage records; the record's ``uri`` says where it was written.
"""

from __future__ import annotations

import os
import shutil
import re
from pathlib import Path

from streams.client.hashing import hash_directory, hash_file
from streams.integrations.errors import IntegrationError

def checkpoint_id_of(job_id: str, step: int, incarnation: int) -> str:
    """The id of a job's checkpoint of ``step``: ``JOB-STEP`` in incarnation 0, ``JOB-STEP-iN``
    after the N-th rollback (a step trained again never reuses an id: SPEC §8 halts a job that
    writes an id twice)."""
    return f"{job_id}-{step}" + (f"-i{incarnation}" if incarnation else "")


_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=-]*$")


class CheckpointStore:
    """The checkpoint directory ``root`` (created on first use)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"CheckpointStore({str(self.root)!r})"

    @staticmethod
    def check_id(checkpoint_id: str) -> str:
        if not isinstance(checkpoint_id, str) or not _SAFE.match(checkpoint_id) or ".." in checkpoint_id:
            raise IntegrationError(f"checkpoint id {checkpoint_id!r} is not a safe file name "
                                   "(letters, digits and . _ @ + = -, no leading dot)")
        return checkpoint_id

    def file(self, checkpoint_id: str) -> Path:
        """Where a one-file checkpoint ``checkpoint_id`` is (or goes)."""
        return self.root / f"{self.check_id(checkpoint_id)}.pt"

    def folder(self, checkpoint_id: str) -> Path:
        """Where a folder checkpoint ``checkpoint_id`` is (or goes)."""
        return self.root / self.check_id(checkpoint_id)

    def locate(self, checkpoint_id: str) -> Path:
        """The checkpoint ``checkpoint_id`` (file or folder); IntegrationError when neither exists."""
        for p in (self.file(checkpoint_id), self.folder(checkpoint_id)):
            if p.exists():
                return p
        raise IntegrationError(f"checkpoint {checkpoint_id!r} is not in {self.root} "
                               f"(neither {checkpoint_id}.pt nor {checkpoint_id}/)")

    def remove(self, checkpoint_id: str) -> int:
        """Delete ``checkpoint_id``'s file or folder; the bytes freed (0: it was not there)."""
        freed = 0
        for p in (self.file(checkpoint_id), self.folder(checkpoint_id)):
            if p.is_dir():
                freed += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                shutil.rmtree(p)
            elif p.exists():
                freed += p.stat().st_size
                p.unlink()
        return freed

    def unusable(self, checkpoint_id: str, content_hash: str | None) -> str | None:
        """Why ``checkpoint_id`` cannot be restored from the store (None: it can): not there (a
        rotation deleted it), or no longer the content recorded (``content_hash``, when known)."""
        try:
            p = self.locate(checkpoint_id)
        except IntegrationError:
            return "deleted (rotated away?)"
        if content_hash is None:
            return None
        try:
            got = hash_directory(p) if p.is_dir() else hash_file(p)
        except OSError as exc:
            return f"{p} cannot be read: {exc}"
        return None if got == content_hash else f"{p} changed since it was recorded"
