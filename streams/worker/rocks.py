"""The worker's RocksDBs: caches of a topic it rebuilds at every start, kept out of memory.

What a worker must remember of its whole history would otherwise grow with everything that
ever happened (issue 27): the checkpoint view of ``lineage.checkpoints``
(:mod:`streams.worker.checkpoint_view`), and every command id on ``lineage.control`` and each
job's plan in force there (the referee's ``published`` and ``in_force``). Each lives in a
RocksDB under the data directory, opened empty (what the topic says now, not what it said
before), without a write-ahead log (the topic is the record) and with small memtables and a
small block cache.
"""

from __future__ import annotations

import logging
import marshal
import shutil
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, MutableSet
from pathlib import Path
from typing import Any, Callable, TypeVar

log = logging.getLogger("traintrace.worker")
_K = TypeVar("_K", bound="_Keyed")


def open_rdict(path: Path, write_buffer: int = 1024 * 1024, cache: int = 2 * 1024 * 1024) -> Any:
    """An empty RocksDB at ``path`` (anything there before is removed), raw keys and values,
    no write-ahead log, two memtables of ``write_buffer`` bytes and a block cache of ``cache``."""
    from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteOptions

    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(write_buffer)
    opts.set_max_write_buffer_number(2)
    table = BlockBasedOptions()
    table.set_block_cache(Cache(cache))
    opts.set_block_based_table_factory(table)
    db = Rdict(str(path), opts)
    wo = WriteOptions()
    wo.disable_wal = True  # type: ignore[method-assign, assignment]  # a property at run time; the stubs say a method
    db.set_write_options(wo)
    return db


class _Keyed:
    """A RocksDB of string keys and the count of them (it is opened empty)."""

    def __init__(self, path: Path, write_buffer: int, cache: int) -> None:
        self.db = open_rdict(path, write_buffer, cache)
        self.n = 0

    def __iter__(self) -> Iterator[str]:
        return (k.decode() for k in self.db.keys())

    def __len__(self) -> int:
        return self.n

    def close(self) -> None:
        self.db.close()


class DiskMap(_Keyed, MutableMapping[str, Any]):
    """A RocksDB of string -> value (``marshal``: bytes, str, int, float, None and tuples, lists
    and dicts of them), for maps looked up once in a while: a checkpoint's entry in the view, a
    resting cohort's rows, a job's plan in force."""

    def __init__(self, path: Path, write_buffer: int = 1024 * 1024, cache: int = 2 * 1024 * 1024) -> None:
        super().__init__(path, write_buffer, cache)

    def __getitem__(self, key: str) -> Any:
        raw = self.db.get(key.encode())
        if raw is None:
            raise KeyError(key)
        return marshal.loads(raw)

    def get(self, key: str, default: Any = None) -> Any:
        raw = self.db.get(key.encode())
        return default if raw is None else marshal.loads(raw)

    def __setitem__(self, key: str, value: Any) -> None:
        k = key.encode()
        if self.db.get(k) is None:
            self.n += 1
        self.db.put(k, marshal.dumps(value))

    def __delitem__(self, key: str) -> None:
        if self.db.get(key.encode()) is None:
            raise KeyError(key)
        self.db.delete(key.encode())
        self.n -= 1


def _opened(make: Callable[[], _K], path: Path, what: str) -> _K | None:
    """``make()``, or None (logged, naming ``what``) when RocksDB cannot be opened at ``path``:
    the caller keeps its map or set in memory then (the worker runs on without RocksDB)."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - best effort
        log.warning("%s cannot use RocksDB at %s (%s): kept in memory instead", what, path, exc)
        return None


def open_disk_map(path: Path, what: str, now: Mapping[str, Any] | None = None,
                  write_buffer: int = 1024 * 1024, cache: int = 2 * 1024 * 1024) -> MutableMapping[str, Any] | None:
    """A :class:`DiskMap` at ``path`` holding ``now``, or None (:func:`_opened`)."""
    disk = _opened(lambda: DiskMap(path, write_buffer, cache), path, what)
    if disk is not None:
        disk.update(now or {})
    return disk


class DiskSet(_Keyed, MutableSet[str]):
    """A set of strings in a RocksDB (keys only). A lookup costs a few microseconds: for sets
    asked once in a while (a command about to be published), not once an event."""

    def __init__(self, path: Path, write_buffer: int = 256 * 1024, cache: int = 256 * 1024) -> None:
        super().__init__(path, write_buffer, cache)

    def __contains__(self, item: object) -> bool:
        return isinstance(item, str) and self.db.get(item.encode()) is not None

    def add(self, item: str) -> None:
        k = item.encode()
        if self.db.get(k) is None:
            self.n += 1
            self.db.put(k, b"")

    def discard(self, item: str) -> None:
        k = item.encode()
        if self.db.get(k) is not None:
            self.n -= 1
            self.db.delete(k)


def open_disk_set(path: Path, what: str, now: Iterable[str] = ()) -> MutableSet[str] | None:
    """A :class:`DiskSet` at ``path`` holding ``now``, or None (:func:`_opened`)."""
    disk = _opened(lambda: DiskSet(path), path, what)
    if disk is not None:
        disk |= set(now)
    return disk
