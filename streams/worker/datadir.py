"""A worker's data directory: whose it is.

Faust keeps its files under the data directory, and the worker keeps no Faust table (the
router's map is :mod:`streams.worker.jobmap`, read from Kafka at every assignment; the
referee's state is rebuilt from ``lineage.by-cohort``), so nothing in it is a cache that could
disagree with the Kafka log (the RocksDBs of :mod:`streams.worker.rocks` are emptied at every
start: the checkpoint view's, ``checkpoint-view/``, is refilled from ``lineage.checkpoints``; the
command ids and plans in force on ``lineage.control``, ``published-commands/`` and
``plans-in-force/``, from that topic at each takeover). What is checked is ownership: :func:`prepare_data_dir`, called
once at worker start before the Faust app is created,

- refuses with a one-line :class:`DataDirError` when the directory belongs to another app id
  (unless ``reset``: ``traintrace worker --reset-data-dir`` takes it over), and
- writes the marker file ``traintrace-worker.json`` (app id, topics, the Kafka cluster id,
  times) for the next start.

The memory store keeps nothing between runs: nothing to check.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from streams.kafka.settings import KafkaSettings
from streams.worker.errors import WorkerError
from streams.worker.settings import WorkerSettings

log = logging.getLogger("traintrace.worker")

MARKER_NAME = "traintrace-worker.json"
MARKER_FORMAT = 1


class DataDirError(WorkerError):
    """The data directory cannot be used by this worker; the message says why and what to do."""


# -- Kafka -----------------------------------------------------------------------------------


def read_cluster_id(admin: Any, timeout: float = 15.0) -> str | None:
    """The Kafka cluster id, with a confluent-kafka ``AdminClient`` (``describe_cluster``) or
    any object with the same method."""
    cluster = admin.describe_cluster(request_timeout=timeout).result(timeout)
    return getattr(cluster, "cluster_id", None)


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
    if not isinstance(marker.get("kafka", {}), dict):
        return None, "malformed kafka"
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


def prepare_data_dir(settings: WorkerSettings, *, reset: bool = False, admin: Any = None, timeout: float = 15.0) -> str | None:
    """Check the worker's data directory before the Faust app is created (see the module).

    Returns a one-line note of what was done (a directory of another app id taken over), or
    None when there was nothing to say. Raises :class:`DataDirError` (one line) when the
    directory belongs to another app id and ``reset`` is false, or when Kafka cannot be asked
    its cluster id. ``admin``: an ``AdminClient``-like object (tests; default: one of
    ``settings.kafka``).
    """
    if str(settings.store).split("://", 1)[0] != "rocksdb":
        return None  # memory://: nothing is kept between runs, nothing to check
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    app_id = settings.app_id

    marker, _problem = read_marker(data_dir)  # an unreadable marker is rewritten below
    owner = marker["app_id"] if marker else None
    if owner is not None and owner != app_id and not reset:
        raise DataDirError(
            f"data dir {data_dir} belongs to app id {owner!r} (see {marker_path(data_dir)}), not {app_id!r}: "
            f"give this worker another --data-dir, or remove {data_dir} (the worker's state is in Kafka)")

    kafka: KafkaSettings = settings.kafka
    try:
        cluster_id = read_cluster_id(admin if admin is not None else kafka.admin(), timeout)
    except Exception as exc:
        raise DataDirError(f"cannot check data dir {data_dir} against Kafka at {kafka.bootstrap}: "
                           f"{_one_line(exc)}") from exc

    note = None
    if owner is not None and owner != app_id:
        note = f"data dir {data_dir}: reset, it belonged to app id {owner!r}, now to {app_id!r}"
        log.info("%s", note)
    now = _now_iso()
    created = marker.get("created") if marker and marker.get("app_id") == app_id else None
    write_marker(data_dir, {
        "format": MARKER_FORMAT,
        "app_id": app_id,
        "store": str(settings.store),
        "topics": settings.topics.all(),
        "kafka": {"bootstrap": kafka.bootstrap, "cluster_id": cluster_id},
        "created": created or now,
        "updated": now,
    })
    return note


def _one_line(exc: BaseException | str) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
