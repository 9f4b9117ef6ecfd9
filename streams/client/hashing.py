"""Content hashes of checkpoints (SPEC §2: hex SHA-256 of its bytes), computed by streaming.

Scheme (``hash_path``):

- a **file**: SHA-256 of its bytes, exactly ``sha256sum FILE`` — read in 1 MiB chunks into one
  reused buffer, never loaded whole;
- a **directory**: SHA-256 over every regular file below it, in the order of their relative
  paths (POSIX ``/`` separators, UTF-8 bytes, sorted bytewise), each contributing::

      relative-path bytes  0x00  size in decimal (ASCII)  0x00  the file's bytes

  The size makes the framing unambiguous (no two different trees give the same stream). Empty
  directories contribute nothing; symbolic links to files are hashed as the file they point to;
  symbolic links to directories are not followed (they contribute nothing); any other entry
  (socket, FIFO, device) raises :class:`ValueError`. A file that changes size while it is read
  raises :class:`ValueError` (the checkpoint is still being written).

The result is lower-case hex, deterministic across machines and file systems.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20  # 1 MiB


def _feed_file(h: "hashlib._Hash", fh, buf: bytearray, view: memoryview) -> int:
    total = 0
    while True:
        n = fh.readinto(buf)
        if not n:
            return total
        h.update(view[:n])
        total += n


def hash_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of one file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    with open(path, "rb", buffering=0) as fh:
        _feed_file(h, fh, buf, memoryview(buf))
    return h.hexdigest()


def directory_files(root: str | os.PathLike[str]) -> list[tuple[bytes, Path]]:
    """The regular files below ``root`` as (relative path bytes, path), in hashing order."""
    root = Path(root)
    out: list[tuple[bytes, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        # a symlink to a directory shows up in dirnames and is not descended into
        for name in filenames:
            p = base / name
            try:
                st = p.stat()  # follows a symlink to a file
            except FileNotFoundError:
                if p.is_symlink():  # a dangling link: nothing to hash
                    continue
                raise
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{p} is neither a regular file nor a directory")
            rel = p.relative_to(root).as_posix().encode("utf-8", "surrogateescape")
            out.append((rel, p))
    out.sort(key=lambda t: t[0])
    return out


def hash_directory(root: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a directory tree (see the module's scheme)."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    for rel, p in directory_files(root):
        with open(p, "rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            h.update(rel + b"\x00" + str(size).encode("ascii") + b"\x00")
            read = _feed_file(h, fh, buf, view)
        if read != size:
            raise ValueError(f"{p} changed size while it was hashed ({size} -> {read} bytes)")
    return h.hexdigest()


def hash_path(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a checkpoint: a file's bytes, or a directory by the module's scheme."""
    p = Path(path)
    if p.is_dir():
        return hash_directory(p)
    if p.is_file():
        return hash_file(p)
    if not p.exists():
        raise FileNotFoundError(f"checkpoint path {p} does not exist")
    raise ValueError(f"{p} is neither a regular file nor a directory")


@dataclass(frozen=True)
class LoadedContent:
    """What a loader actually loaded, hashed by the loader itself: a loader that reads a file's
    bytes once, hashes them and deserialises those same bytes returns this, so the hash checked
    is the hash of what was loaded (no second read of a file that could have changed)."""

    path: Path
    content_hash: str

    @classmethod
    def of_bytes(cls, path: str | os.PathLike[str], data: bytes) -> "LoadedContent":
        return cls(Path(path), hashlib.sha256(data).hexdigest())
