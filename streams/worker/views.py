"""HTTP views of a worker (Faust web): jobs, incidents, plans, checkpoints, metrics.

``/jobs``, ``/incidents`` and ``/plans`` answer for the cohorts this worker owns (the
``cohorts`` field says which), in memory or not: a cohort that left memory after its snapshot
(settled or idle, :mod:`streams.worker.snapshots`) is shown from the rows kept when it left
(:mod:`streams.worker.resting`; the ``resting`` field names those cohorts). ``traintrace plans``
reads ``lineage.control`` for the whole pipeline. ``/checkpoints/{id}`` answers for every
checkpoint: from its cohort when that is in memory (``source: owner``), else from the compacted
``lineage.checkpoints`` (``source: view``): ``clean``, ``tainted`` (with its incidents) or
``unknown``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from streams.worker import metrics
from streams.worker.resting import job_row as _job_view  # the row of /jobs, in memory or resting


def register(app, referee, ckview, lock, health=None, owned=None, snapshots=None, folded=None) -> None:
    """``owned``: a callable giving the input partitions this worker processes, by stage;
    ``folded``: one giving the events folded since the worker started (``traintrace_events_folded_total``);
    ``snapshots``: the :class:`~streams.worker.snapshots.SnapshotStore` whose cohorts out of
    memory the views show too."""

    async def resting() -> dict[str, Any]:
        """cohort -> its rows, for every cohort out of memory (rows made from a snapshot off the
        event loop, once)."""
        if snapshots is None or not snapshots.out_of_memory:
            return {}
        cohorts = sorted(snapshots.out_of_memory)
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, lambda: [snapshots.resting_rows(c) for c in cohorts])
        return {c: r for c, r in zip(cohorts, rows) if r is not None and c not in referee.engines}

    @app.page("/jobs")
    async def jobs(web, request):
        rest = await resting()
        async with lock:
            out = [_job_view(c, j) for c, lin in sorted(referee.engines.items())
                   for j in sorted(lin.state.jobs.values(), key=lambda j: j.job_id)]
            cohorts = sorted(set(referee.engines) | set(rest))
        for c in sorted(rest):
            out.extend(rest[c][0])
        out.sort(key=lambda j: (j["cohort_id"] or "", j["job_id"]))
        return web.json({"cohorts": cohorts, "resting": sorted(rest), "jobs": out})

    def every_engine(name: str, key: str, index: int):
        """``/{name}``: the records every engine holds in its ``name`` dict, sorted by ``key``."""
        async def page(web, request):
            rest = await resting()
            async with lock:
                out = [v for lin in referee.engines.values() for v in getattr(lin, name).values()]
                cohorts = sorted(set(referee.engines) | set(rest))
            for c in rest:
                out.extend(rest[c][index])
            out.sort(key=lambda v: v[key])
            return web.json({"cohorts": cohorts, "resting": sorted(rest), name: out})
        page.__name__ = page.__qualname__ = name
        app.page(f"/{name}")(page)

    every_engine("incidents", "incident_id", 1)
    every_engine("plans", "job_id", 2)

    @app.page("/checkpoints/{checkpoint_id}")
    async def checkpoint(web, request, checkpoint_id: str):
        async with lock:
            for lin in referee.engines.values():
                ck = lin.state.checkpoints.get(checkpoint_id)
                if ck is not None:
                    ids = sorted({x for s in ck.sources or () for x in
                                  (lin.verdicts[s].incident_ids if s in lin.verdicts else ())})
                    return web.json({"checkpoint_id": ck.id, "status": "tainted" if ck.sources else "clean",
                                     "job_id": ck.job_id, "incarnation": ck.incarnation, "step": ck.step,
                                     "content_hash": ck.content_hash, "incident_ids": ids,
                                     "retention": lin.book().status_of(ck.job_id, ck.id),
                                     "source": "owner"})
        rec = ckview.get(checkpoint_id)
        if rec is None:
            return web.json({"checkpoint_id": checkpoint_id, "status": "unknown"})
        return web.json({"checkpoint_id": checkpoint_id, "status": rec["status"].lower(),
                         "job_id": rec["job_id"], "incarnation": rec["incarnation"], "step": rec["step"],
                         "content_hash": rec["content_hash"], "incident_ids": rec["incident_ids"],
                         "source": "view"})

    @app.page("/metrics")
    async def prometheus(web, request):
        # Prometheus text format 0.0.4 (what metrics.render writes), charset included
        return web.bytes(metrics.render(), headers={"Content-Type": metrics.CONTENT_TYPE})

    @app.page("/health")
    async def health_view(web, request):
        """ready / degraded (timers failing, skipped and counted: alive, do not restart) / dead
        (stopping after a crash: HTTP 503, restart it). See streams.worker.health."""
        out = {"ok": True, "state": "ready"} if health is None else health.view()
        out.update(cohorts=len(referee.engines), events=referee.stats.events,
                   resting=len(snapshots.out_of_memory) if snapshots is not None else 0)
        if owned is not None:  # what it processes now: nothing until its first assignment is taken over
            out["partitions"] = owned()
        if folded is not None:  # what a bench polls: /metrics renders every metric, this one number
            out["folded"] = folded()
        return web.json(out, status=503 if out["state"] == "dead" else 200)
