"""Retention of a log offline (SPEC §13): which checkpoints its jobs may delete, and why the rest
are kept, as the referee decides it (:mod:`streams.core.retention`) once the whole log is read.

The watermark of a log read to its end is its latest event time: everything up to it was read.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Iterable

from streams.audit.analyze import Analysis
from streams.core.retention import retention


def log_watermark(analysis: Analysis) -> int | None:
    """The latest event time of the folded log (None for a log without events)."""
    times = [j.last_ts for lin in analysis.lineage.cohorts.values() for j in lin.state.jobs.values()
             if j.last_ts is not None]
    return max(times) if times else None


def retention_report(analysis: Analysis, horizon_ms: int | None, jobs: Iterable[str] = ()) -> dict[str, Any]:
    """Every checkpoint of the log's jobs (only ``jobs``' when given) with its retention status,
    by job, oldest first; and the counts."""
    wanted = set(jobs)
    watermark = log_watermark(analysis)
    by_job: dict[str, list[dict[str, Any]]] = {}
    for cohort in sorted(analysis.lineage.cohorts):
        state = analysis.lineage.cohorts[cohort].state
        chosen = [j for j in state.jobs if not wanted or j in wanted]
        for r in retention(state, watermark, horizon_ms, chosen).values():
            by_job.setdefault(r.job_id, []).append(asdict(r))
    rows = [r for job in sorted(by_job) for r in by_job[job]]
    return {"settle_horizon_ms": horizon_ms, "watermark_ms": watermark,
            "jobs": {job: by_job[job] for job in sorted(by_job)},
            "checkpoints": len(rows), "deletable": sum(r["deletable"] for r in rows),
            "missing_jobs": sorted(wanted - set(by_job))}
