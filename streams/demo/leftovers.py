"""What a demo run leaves behind: its work directory (new or empty at the start; a temporary one
is removed at the end unless it is kept) and, once it is over, its topics and consumer groups."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from streams.demo.errors import WorkDirNotEmpty
from streams.demo.roles import DemoKafka
from streams.kafka.topics import delete_run

log = logging.getLogger("traintrace.demo")


def ensure_empty(work: Path) -> None:
    """Raises :class:`WorkDirNotEmpty` when ``work`` holds anything (the jobs' journals are there:
    a previous run's would make them continue)."""
    if work.exists() and any(work.iterdir()):
        raise WorkDirNotEmpty(work)


def make_work_dir(work_dir: Path | None) -> tuple[Path, bool]:
    """The run's work directory (resolved; :class:`WorkDirNotEmpty` if it holds anything), or a
    new temporary one; and whether it is temporary."""
    if work_dir is None:
        return Path(tempfile.mkdtemp(prefix="traintrace-demo-")), True
    work = work_dir.resolve()
    ensure_empty(work)
    return work, False


def tidy_up(kafka: Any, work: Path, report: dict[str, Any] | None, *, temporary: bool,
            keep: bool, interrupted: bool) -> bool:
    """Remove a temporary work directory, and the run's topics with it, unless ``keep`` or the run
    went wrong (its logs are what one looks at then; an interrupted run is removed too). Returns
    whether the directory was kept (also noted in ``report['work_dir_kept']``)."""
    failed = report is None or not report.get("story_ok")
    kept = not temporary or keep or (failed and not interrupted)
    if not kept:  # and the run's topics with it (kept with the work directory)
        shutil.rmtree(work, ignore_errors=True)
        if report is not None:
            delete_run_topics(kafka, report)
    if report is not None:
        report["work_dir_kept"] = kept
    return kept


def delete_run_topics(kafka: Any, report: dict[str, Any], timeout: float = 30.0) -> int:
    """Delete the topics and consumer groups of a finished run (its prefix's topics, the
    workers' internal ``<app_id>-…`` topics), as admin, and on the secure demo the ACLs granted on
    them: a local broker that runs the demo often does not collect them. ``kafka``: a
    :class:`~streams.demo.roles.DemoKafka`, one ``KafkaSettings`` or bootstrap servers. Returns
    the number of topics deleted; best effort (errors are ignored)."""
    prefix, app_id = report["topics"]["prefix"], report["app_id"]
    roles = DemoKafka.of(kafka)
    names: list[str] = []
    try:
        names, _groups = delete_run(roles.admin, prefix, app_id, timeout)
    except Exception as exc:
        log.warning("could not delete the demo's topics (%s*): %s", prefix, exc)
    # the secure demo's grants on the run's topics: revoked even when deleting a topic failed
    # (a loaded broker timing out must not leave a run's ACLs behind), and tried twice
    for attempt in range(2):
        try:
            roles.revoke(prefix, timeout)
            break
        except Exception as exc:
            log.warning("could not revoke the demo's ACLs (%s*, try %d): %s", prefix, attempt + 1, exc)
    return len(names)
