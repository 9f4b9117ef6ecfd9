"""A worker's data directory: whose it is, and whether its table cache matches the Kafka log.

Faust keeps each table in RocksDB under ``{datadir}/v{version}/tables`` (``conf.tabledir``),
one database per changelog partition, ``{table}-{partition}.db``, and in each database the
offset of the last changelog record it holds, under the key ``b"__faust\\0offset__"`` (the
offset as decimal ASCII). At recovery Faust compares that offset with the changelog
partition's high watermark and raises ``ConsistencyError`` when the store is ahead of the log
(``faust/tables/recovery.py``, ``Recovery._restart_recovery``) — the worker then crashes, and
crashes again at every restart. That happens when the directory was filled from another log:
another application id (the path holds no app id, the changelog topic
``{app_id}-{table}-changelog`` does), or the same app id against another or wiped cluster, or a
changelog topic deleted and recreated. When the new log is *longer* than the stale store, Faust
does not even notice and serves the stale keys.

The table store is only a cache of its changelog topic, so :func:`prepare_data_dir`, called
once at worker start before the Faust app is created, checks the directory and either

- refuses with a one-line :class:`DataDirError` when the directory belongs to another app id
  (unless ``reset``), or
- discards the table store (``conf.tabledir``, nothing else) when it holds a cache of another
  Kafka log — another cluster id, a changelog topic id that changed, or a persisted offset at or
  beyond its partition's high watermark — so that Faust rebuilds it from the changelog,

and writes the marker file ``traintrace-worker.json`` (app id, topics, Kafka cluster id, the
changelog topics' ids, times) for the next start. The memory store has nothing to check.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from streams.kafka.settings import client_logger
from streams.worker.errors import WorkerError

log = logging.getLogger("traintrace.worker")

MARKER_NAME = "traintrace-worker.json"
MARKER_FORMAT = 1
#: the tables of the worker (``create_app``): their changelogs are described in the marker even
#: before a store exists on disk
WORKER_TABLES: tuple[str, ...] = ("job-cohort",)
#: where Faust's RocksDB store keeps the last changelog offset a partition's database holds
#: (``faust.stores.rocksdb.Store.offset_key``)
OFFSET_KEY = b"__faust\x00offset__"
_STORE_RE = re.compile(r"^(?P<table>.+)-(?P<partition>\d+)\.db$")


class DataDirError(WorkerError):
    """The data directory cannot be used by this worker; the message says why and what to do."""


# -- what Faust would use --------------------------------------------------------------------


@dataclass(frozen=True)
class FaustPaths:
    """The Faust application id (with its version), app directory and table directory."""

    faust_id: str
    appdir: Path
    tabledir: Path
    store_scheme: str

    def changelog_topic(self, table: str) -> str:
        # faust/tables/base.py Collection._changelog_topic_name
        return f"{self.faust_id}-{table}-changelog"


def faust_paths(settings: Any) -> FaustPaths:
    """Ask Faust's own settings class (as ``create_app`` configures the app) for the paths, so
    that ``version``, ``APP_TABLEDIR`` and the like are honoured exactly as the worker will."""
    from faust.types.settings import Settings

    conf = Settings(settings.app_id, datadir=str(settings.data_dir), store=settings.store)
    return FaustPaths(faust_id=conf.id, appdir=Path(conf.appdir), tabledir=Path(conf.tabledir),
                      store_scheme=str(conf.store.scheme or ""))


# -- the local store -------------------------------------------------------------------------


@dataclass
class LocalStore:
    """The RocksDB databases of the table directory: (table, partition) -> persisted offset
    (None: no offset recorded), and the databases that could not be read."""

    offsets: dict[tuple[str, int], int | None] = field(default_factory=dict)
    unreadable: dict[tuple[str, int], str] = field(default_factory=dict)
    in_use: list[Path] = field(default_factory=list)

    @property
    def tables(self) -> set[str]:
        return {t for t, _p in self.offsets} | {t for t, _p in self.unreadable}

    @property
    def exists(self) -> bool:
        return bool(self.offsets or self.unreadable)


def store_databases(tabledir: Path) -> dict[tuple[str, int], Path]:
    """Every ``{table}-{partition}.db`` database directory Faust's RocksDB store made."""
    out: dict[tuple[str, int], Path] = {}
    if not tabledir.is_dir():
        return out
    for entry in tabledir.iterdir():
        m = _STORE_RE.match(entry.name)
        if m and entry.is_dir():
            out[(m["table"], int(m["partition"]))] = entry
    return out


def locked_by_other_process(db_path: Path) -> bool:
    """Whether another process holds the RocksDB ``LOCK`` of ``db_path`` (RocksDB takes an
    fcntl write lock on it while the database is open). Must not be called while this process
    has the database open: closing our descriptor would drop its lock."""
    lock = db_path / "LOCK"
    if not lock.exists():
        return False
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return False
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return True
            return False
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def read_persisted_offset(db_path: Path) -> int | None:
    """The changelog offset Faust persisted in one partition database (read only, no Faust).
    Raises on an unreadable database; ImportError without a RocksDB binding."""
    try:
        from rocksdict import AccessType, Options, Rdict
    except ImportError:
        Rdict = None  # type: ignore[assignment]
    if Rdict is not None:
        db = Rdict(str(db_path), options=Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            raw = db.get(OFFSET_KEY)
        finally:
            db.close()
    else:  # pragma: no cover - the python-rocksdb driver of Faust
        import rocksdb  # type: ignore[import-not-found]

        raw = rocksdb.DB(str(db_path), rocksdb.Options(), read_only=True).get(OFFSET_KEY)
    if raw is None:
        return None
    return int(bytes(raw).decode("ascii"))


def read_local_store(tabledir: Path) -> LocalStore:
    store = LocalStore()
    for key, path in sorted(store_databases(tabledir).items()):
        if locked_by_other_process(path):
            store.in_use.append(path)
        try:
            store.offsets[key] = read_persisted_offset(path)
        except ImportError:  # no RocksDB binding: the offsets cannot be checked
            store.offsets[key] = None
        except Exception as exc:  # a corrupt database: Faust could not open it either
            store.unreadable[key] = _one_line(exc)
    return store


def discard_tables(paths: FaustPaths, data_dir: Path) -> None:
    """Remove the table store. The table directory is first renamed away (atomic), so a crash
    half-way never leaves a partial RocksDB database for Faust to open. Inside the data
    directory (the default) the whole table directory goes; a table directory configured
    elsewhere (``APP_TABLEDIR``) loses only the entries Faust's store makes in it."""
    tabledir = paths.tabledir
    if not tabledir.exists():
        return
    data_dir = Path(data_dir).resolve()
    resolved = tabledir.resolve()
    if data_dir in resolved.parents:
        trash = tabledir.with_name(f"{tabledir.name}.discarded-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(tabledir, trash)
        shutil.rmtree(trash, ignore_errors=True)
        return
    for entry in tabledir.iterdir():
        if entry.is_dir() and (_STORE_RE.match(entry.name) or entry.name.endswith("-backups")):
            trash = entry.with_name(f"{entry.name}.discarded-{os.getpid()}-{time.monotonic_ns()}")
            os.replace(entry, trash)
            shutil.rmtree(trash, ignore_errors=True)


# -- Kafka -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicFacts:
    topic_id: str | None
    high_watermarks: dict[int, int]  # partition -> high watermark (next offset)


@dataclass(frozen=True)
class KafkaFacts:
    cluster_id: str | None
    changelogs: dict[str, TopicFacts | None]  # None: the topic does not exist


def _unknown_topic(exc: BaseException) -> bool:
    err = exc.args[0] if getattr(exc, "args", None) else None
    name = getattr(err, "name", None)
    if callable(name):
        try:
            return name() == "UNKNOWN_TOPIC_OR_PART"
        except Exception:  # pragma: no cover
            pass
    return "UNKNOWN_TOPIC_OR_PART" in str(exc)


def read_kafka_facts(admin: Any, topics: Iterable[str], timeout: float = 15.0) -> KafkaFacts:
    """The cluster id, and for each topic its id and high watermarks, with a confluent-kafka
    ``AdminClient`` (``describe_cluster``, ``describe_topics``, ``list_offsets``) or any object
    with the same methods."""
    from confluent_kafka import TopicCollection, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    cluster = admin.describe_cluster(request_timeout=timeout).result(timeout)
    cluster_id = getattr(cluster, "cluster_id", None)
    names = sorted(set(topics))
    changelogs: dict[str, TopicFacts | None] = {}
    if not names:
        return KafkaFacts(cluster_id, changelogs)
    described = admin.describe_topics(TopicCollection(names), request_timeout=timeout)
    for name in names:
        try:
            desc = described[name].result(timeout)
        except Exception as exc:
            if _unknown_topic(exc):
                changelogs[name] = None
                continue
            raise
        parts = [p.id for p in desc.partitions]
        hws: dict[int, int] = {}
        if parts:
            got = admin.list_offsets({TopicPartition(name, p): OffsetSpec.latest() for p in parts},
                                     request_timeout=timeout)
            for tp, fut in got.items():
                hws[tp.partition] = int(fut.result(timeout).offset)
        tid = getattr(desc, "topic_id", None)
        changelogs[name] = TopicFacts(topic_id=str(tid) if tid is not None else None, high_watermarks=hws)
    return KafkaFacts(cluster_id, changelogs)


# -- the marker ------------------------------------------------------------------------------


def marker_path(data_dir: Path | str) -> Path:
    return Path(data_dir) / MARKER_NAME


def read_marker(data_dir: Path | str) -> tuple[dict[str, Any] | None, str | None]:
    """(marker, None), (None, None) when there is none, or (None, why) when it is unreadable."""
    path = marker_path(data_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8
        return None, _one_line(exc)
    try:
        marker = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON ({_one_line(exc)})"
    if not isinstance(marker, dict) or not isinstance(marker.get("app_id"), str) or not marker["app_id"]:
        return None, "no app_id"
    if not isinstance(marker.get("kafka", {}), dict) or not isinstance(marker.get("changelogs", {}), dict):
        return None, "malformed kafka/changelogs"
    return marker, None


def write_marker(data_dir: Path | str, marker: Mapping[str, Any]) -> None:
    path = marker_path(data_dir)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DataDirError(f"cannot write {path}: {_one_line(exc)}") from exc


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- the check -------------------------------------------------------------------------------


def stale_reasons(store: LocalStore, marker: Mapping[str, Any] | None, facts: KafkaFacts,
                  paths: FaustPaths) -> list[str]:
    """Why the local table store is not a cache of the changelog topics Kafka holds now
    (empty: it is, as far as can be told)."""
    reasons: list[str] = []
    kafka = (marker or {}).get("kafka") or {}
    old_cluster = kafka.get("cluster_id")
    if old_cluster and facts.cluster_id and old_cluster != facts.cluster_id:
        reasons.append(f"Kafka cluster {old_cluster}, now {facts.cluster_id}")
    replaced: set[str] = set()  # changelog topics deleted or recreated: their offsets say nothing more
    for topic, old in sorted(((marker or {}).get("changelogs") or {}).items()):
        old_id = old.get("topic_id") if isinstance(old, dict) else None
        if not old_id or topic not in facts.changelogs:
            continue
        now = facts.changelogs[topic]
        if now is None:
            reasons.append(f"changelog topic {topic} (id {old_id}) was deleted")
            replaced.add(topic)
        elif now.topic_id and now.topic_id != old_id:
            reasons.append(f"changelog topic {topic} was recreated (id {old_id}, now {now.topic_id})")
            replaced.add(topic)
    for (table, partition), why in sorted(store.unreadable.items()):
        reasons.append(f"store {table}-{partition}.db unreadable: {why}")
    for (table, partition), offset in sorted(store.offsets.items()):
        if offset is None:
            continue
        topic = paths.changelog_topic(table)
        if topic in replaced:
            continue
        now = facts.changelogs.get(topic)
        if now is None:
            reasons.append(f"changelog topic {topic} does not exist, the store holds up to offset {offset}")
            continue
        hw = now.high_watermarks.get(partition)
        if hw is None:
            reasons.append(f"changelog topic {topic} has no partition {partition} "
                           f"({len(now.high_watermarks)} partitions), the store holds up to offset {offset}")
        elif offset >= hw:
            # the store holds a record the log does not have (Faust's recovery: ConsistencyError
            # when persisted > highwater - 1, unless either side is 0)
            reasons.append(f"persisted offset {offset} of {topic} partition {partition} "
                           f"is past its end (high watermark {hw})")
    # the same reason once per topic is enough for one line
    seen: set[str] = set()
    out = []
    for r in reasons:
        key = re.sub(r"\d+", "#", r)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def new_admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "logger": client_logger})


def prepare_data_dir(settings: Any, *, reset: bool = False, admin: Any = None,
                     tables: Iterable[str] = WORKER_TABLES, timeout: float = 15.0) -> str | None:
    """Check the worker's data directory before the Faust app is created (see the module).

    Returns a one-line note of what was done (the table store discarded), or None when there
    was nothing to do. Raises :class:`DataDirError` (one line) when the directory belongs to
    another app id and ``reset`` is false, when a table store to discard is open in another
    process, or when Kafka cannot be asked. ``admin``: an ``AdminClient``-like object (tests).
    """
    paths = faust_paths(settings)
    if paths.store_scheme != "rocksdb":
        return None  # memory://: nothing is kept between runs, nothing to check
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    app_id = settings.app_id

    marker, marker_problem = read_marker(data_dir)
    owner = marker["app_id"] if marker else None
    if owner is not None and owner != app_id and not reset:
        raise DataDirError(
            f"data dir {data_dir} belongs to app id {owner!r} (see {marker_path(data_dir)}), not {app_id!r}: "
            f"give this worker another --data-dir, or remove {data_dir} (its table cache is rebuilt "
            f"from the changelog)")

    store = read_local_store(paths.tabledir)
    changelogs = sorted({paths.changelog_topic(t) for t in (*tables, *store.tables)})
    try:
        facts = read_kafka_facts(admin if admin is not None else new_admin(settings.bootstrap), changelogs, timeout)
    except Exception as exc:
        raise DataDirError(f"cannot check data dir {data_dir} against Kafka at {settings.bootstrap}: "
                           f"{_one_line(exc)}") from exc

    other_owner = owner is not None and owner != app_id
    if reset:
        reasons = [f"reset, it belonged to app id {owner!r}" if other_owner else "reset"]
    else:
        reasons = [f"its marker {MARKER_NAME} is unreadable: {marker_problem}"] if marker_problem else []
        reasons += stale_reasons(store, marker, facts, paths)

    note = None
    if reasons and store.exists:
        if store.in_use:
            raise DataDirError(
                f"cannot discard the table cache of data dir {data_dir} ({reasons[0]}): {store.in_use[0]} is "
                f"open in another process; stop that worker, or give this one its own --data-dir")
        discard_tables(paths, data_dir)
        if reset:
            note = (f"data dir {data_dir}: {reasons[0]}; discarded its table cache {paths.tabledir}, "
                    f"it is rebuilt from the changelog")
        else:
            note = (f"data dir {data_dir} held a table cache of another Kafka log ({'; '.join(reasons[:3])}); "
                    f"discarded {paths.tabledir}, it is rebuilt from the changelog")
        log.info("%s", note)
    elif reset and other_owner:
        note = f"data dir {data_dir}: reset, it belonged to app id {owner!r}, now to {app_id!r}"

    now = _now_iso()
    created = marker.get("created") if marker and marker.get("app_id") == app_id else None
    topics = settings.topics.all() if hasattr(settings.topics, "all") else dict(settings.topics)
    write_marker(data_dir, {
        "format": MARKER_FORMAT,
        "app_id": app_id,
        "faust_id": paths.faust_id,
        "store": str(settings.store),
        "tabledir": str(paths.tabledir),
        "topics": topics,
        "kafka": {"bootstrap": settings.bootstrap, "cluster_id": facts.cluster_id},
        "changelogs": {
            topic: {"topic_id": f.topic_id if f else None, "partitions": len(f.high_watermarks) if f else None}
            for topic, f in sorted(facts.changelogs.items())
        },
        "created": created or now,
        "updated": now,
    })
    return note


def _one_line(exc: BaseException | str) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
