"""What the HTTP views show of the cohorts out of memory (issue 27).

A cohort leaves a worker's memory after its snapshot when it settled or went idle
(:mod:`streams.worker.snapshots`), and comes back at its next input. The views ``/jobs``,
``/incidents`` and ``/plans`` answer for every cohort the worker owns, in memory or not: when a
cohort leaves, its rows (the jobs, incidents and plans the views would show of it) are kept
here, on disk with the RocksDB store (``DATA_DIR/resting-views``, a cache rebuilt from the
snapshots: emptied at every start) or in a dict with ``--store memory``. A cohort left out of
memory without being decoded (a settled one at a takeover) has no rows until a view asks: they
are then made from its snapshot (:meth:`SnapshotStore.rows_of`) and kept.

What stays in memory per resting cohort is its name and four counts (the metrics' gauges:
incidents, plans, halted jobs, held events), not its history.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, MutableMapping

log = logging.getLogger("traintrace.worker")

#: (jobs, incidents, plans): the views' rows of one cohort
Rows = tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]


def job_row(cohort: str, job) -> dict[str, Any]:
    """A job as ``/jobs`` shows it."""
    inc = job.current
    return {
        "job_id": job.job_id,
        "cohort_id": job.cohort_id if job.cohort_id is not None else (cohort or None),
        "registered": job.registered,
        "incarnation": inc.number if inc else None,
        "last_step": inc.last_step if inc else None,
        "last_seq": job.next_seq - 1,
        "finished": bool(inc and inc.finished),
        "halted": job.halt_reason,
    }


def rows_of(cohort: str, lin) -> Rows:
    """The views' rows of one cohort's engine (:class:`streams.core.decide.Lineage`)."""
    jobs = [job_row(cohort, j) for j in sorted(lin.state.jobs.values(), key=lambda j: j.job_id)]
    return jobs, [dict(v) for v in lin.incidents.values()], [dict(v) for v in lin.plans.values()]


def counts_of(lin) -> tuple[int, int, int, int]:
    """(incidents, plans, halted jobs, held events): what the metrics' gauges count of a cohort."""
    return (len(lin.incidents), len(lin.plans), sum(1 for j in lin.state.jobs.values() if j.halt_reasons),
            lin.seals.holding)


class RestingViews:
    """The rows of the cohorts out of memory, by cohort; see the module."""

    def __init__(self, store: str = "memory", data_dir: Path | None = None) -> None:
        self._store, self._data_dir = store, data_dir
        self.rows: MutableMapping[str, Any] = {}
        #: cohort -> (incidents, plans, halted, held) of every resting cohort whose rows are known
        self.counts: dict[str, tuple[int, int, int, int]] = {}
        #: cohort -> partition of every cohort out of memory (the snapshot store's, shared)
        self.out_of_memory: dict[str, int] = {}

    def start(self) -> None:
        """Open the RocksDB (emptied: a cache of the snapshots) with the RocksDB store."""
        if self._store.startswith("rocksdb") and self._data_dir is not None:
            from streams.worker.rocks import open_disk_map

            disk = open_disk_map(self._data_dir / "resting-views", "the resting cohorts' views")
            if disk is None:  # logged: the rows stay in memory, as with --store memory
                return
            # (an empty DiskMap is falsy: ``open_disk_map(...) or {}`` kept every row in memory)
            for cohort, value in list(self.rows.items()):  # kept before start (a takeover at once)
                disk[cohort] = value
            self.rows = disk

    def keep(self, cohort: str, lin) -> None:
        """``cohort`` leaves memory: keep what the views show of it."""
        self.keep_rows(cohort, rows_of(cohort, lin), counts_of(lin))

    def keep_rows(self, cohort: str, rows: Rows, counts: tuple[int, int, int, int]) -> None:
        self.counts[cohort] = counts
        try:
            self.rows[cohort] = rows
        except Exception as exc:  # noqa: BLE001 - a cache: the rows are made from the snapshot instead
            log.warning("the views' rows of cohort %r are not kept (%s): made from its snapshot when asked",
                        cohort, exc)

    def get(self, cohort: str) -> Rows | None:
        value = self.rows.get(cohort)
        return None if value is None else (list(value[0]), list(value[1]), list(value[2]))

    def drop(self, cohort: str) -> None:
        """``cohort`` is back in memory, or no longer this worker's."""
        self.counts.pop(cohort, None)
        try:
            del self.rows[cohort]
        except KeyError:
            pass

    def totals(self) -> tuple[int, int, int, int]:
        """The gauges' counts summed over the resting cohorts."""
        t = [0, 0, 0, 0]
        for c in self.counts.values():
            for i, v in enumerate(c):
                t[i] += v
        return t[0], t[1], t[2], t[3]
