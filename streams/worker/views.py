"""HTTP views of a worker (Faust web): jobs, incidents, plans, checkpoints, metrics.

``/jobs``, ``/incidents`` and ``/plans`` answer for the cohorts this worker owns (the
``cohorts`` field says which); ``traintrace plans`` reads ``lineage.control`` for the whole
pipeline. ``/checkpoints/{id}`` answers for every checkpoint (from the compacted
``lineage.checkpoints``): ``clean``, ``tainted`` (with its incidents) or ``unknown``.
"""

from __future__ import annotations

from typing import Any

from streams.worker import metrics


def _job_view(cohort: str, job) -> dict[str, Any]:
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


def register(app, referee, ckview, lock, health=None, owned=None) -> None:
    """``owned``: a callable giving the input partitions this worker processes, by stage."""
    @app.page("/jobs")
    async def jobs(web, request):
        async with lock:
            out = [_job_view(c, j) for c, lin in sorted(referee.engines.items())
                   for j in sorted(lin.state.jobs.values(), key=lambda j: j.job_id)]
            return web.json({"cohorts": sorted(referee.engines), "jobs": out})

    def every_engine(name: str, key: str):
        """``/{name}``: the records every engine holds in its ``name`` dict, sorted by ``key``."""
        async def page(web, request):
            async with lock:
                out = [v for lin in referee.engines.values() for v in getattr(lin, name).values()]
                out.sort(key=lambda v: v[key])
                return web.json({"cohorts": sorted(referee.engines), name: out})
        page.__name__ = page.__qualname__ = name
        app.page(f"/{name}")(page)

    every_engine("incidents", "incident_id")
    every_engine("plans", "job_id")

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
        out.update(cohorts=len(referee.engines), events=referee.stats.events)
        if owned is not None:  # what it processes now: nothing until its first assignment is taken over
            out["partitions"] = owned()
        return web.json(out, status=503 if out["state"] == "dead" else 200)
