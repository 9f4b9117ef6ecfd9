"""Sharding an audit by cohort over forked processes.

Cohorts are independent (SPEC §2: the lineage is folded per cohort), so :func:`split_by_cohort`
cuts a log into logs of whole cohorts — their processor input, their jobs' events and commands,
their manifests and commitments — and :func:`audit_shards` audits them in forked processes and
merges the reports: the same verdicts, findings and recomputed records as one process would give.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import zlib
from typing import Any, Callable

from streams.codec import Codec, DecodeError
from streams.core.cohorts import merge_final_states
from streams.audit.auditor import Auditor
from streams.audit.log import AuditLog, codec_for
from streams.audit.report import CHECKS, MAX_LISTED, AuditReport, Check

# what the forked workers audit: set before the pool forks, so they inherit it instead of
# receiving it pickled
_SHARDS: list[AuditLog] = []
_SHARD_ARGS: tuple[Any, ...] = ()


def _shard_of(key: str, n: int) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % n


def split_by_cohort(log: AuditLog, n: int, codec: Codec | None = None) -> list[AuditLog] | None:
    """``log`` as ``n`` logs, each holding whole cohorts: their processor input, their jobs'
    events and commands, their manifests and commitments (the dead letters go to every shard).
    None when a job was routed to cohorts of two shards, or the log has no processor input."""
    codec = codec or codec_for(log)
    if not log.has_input:
        return None
    sizes = _cohort_sizes(log, codec)
    if sizes is None:
        return None
    size, job_cohorts = sizes
    cohort_shard = _balance(size, n)

    def shard_of_cohort(cohort: str) -> int:
        k = cohort_shard.get(cohort)
        return k if k is not None else _shard_of(cohort, n)

    job_shard: dict[str, int] = {}
    for job, cohorts in job_cohorts.items():
        ks = {shard_of_cohort(c) for c in cohorts}
        if len(ks) > 1:
            return None
        job_shard[job] = ks.pop()
    shards = _distribute(log, n, codec, shard_of_cohort, job_shard)
    shards = [sh for sh in shards if sh.has_input]  # fewer cohorts than processes
    return shards if len(shards) > 1 else None


def _cohort_sizes(log: AuditLog, codec: Codec) -> tuple[dict[str, int], dict[str, set[str]]] | None:
    """Events routed per cohort, and the cohorts each job was routed to (None: an input record
    without a cohort key)."""
    events_at = {(r.partition, r.offset): r for r in log.topic("events")}
    size: dict[str, int] = {}
    job_cohorts: dict[str, set[str]] = {}
    for rec in log.topic("input"):
        if rec.key is None:
            return None
        try:
            _name, batch = codec.decode_record(rec.value or b"")
        except DecodeError:
            continue  # the shard's audit reports it
        size[rec.key] = size.get(rec.key, 0) + len(batch["events"])
        for r in batch["events"]:
            ev = events_at.get((r["partition"], r["offset"]))
            if ev is not None and ev.key is not None:
                job_cohorts.setdefault(ev.key, set()).add(rec.key)
    return size, job_cohorts


def _balance(size: dict[str, int], n: int) -> dict[str, int]:
    """Whole cohorts, largest first, each to the least loaded shard (ties: the lower index)."""
    cohort_shard: dict[str, int] = {}
    load = [0] * n
    for cohort in sorted(size, key=lambda c: (-size[c], c)):
        k = min(range(n), key=lambda i: (load[i], i))
        cohort_shard[cohort] = k
        load[k] += size[cohort]
    return cohort_shard


def _distribute(log: AuditLog, n: int, codec: Codec, shard_of_cohort: Callable[[str], int],
                job_shard: dict[str, int]) -> list[AuditLog]:
    """Every record of ``log`` into the shard of its cohort (or its job's)."""
    shards = [AuditLog(meta=log.meta, source=log.source) for _ in range(n)]
    for rec in log.topic("input"):
        shards[shard_of_cohort(rec.key or "")].add(rec)
    for rec in log.topic("events"):
        shards[job_shard.get(rec.key) if rec.key in job_shard else _shard_of(rec.key or "", n)].add(rec)
    for rec in log.topic("control"):
        shards[job_shard.get(rec.key) if rec.key in job_shard else _shard_of(rec.key or "", n)].add(rec)
    for rec in log.topic("manifests"):
        try:
            _name, v = codec.decode_record(rec.value or b"")
            cohort = v.get("cohort_id") or ""
        except DecodeError:
            cohort = ""
        shards[shard_of_cohort(cohort)].add(rec)
    for rec in log.topic("commitments"):
        shards[shard_of_cohort(rec.key or "")].add(rec)
    for rec in log.topic("snapshots"):  # keyed "c:" + cohort (a round, "r", is nobody's)
        key = rec.key or ""
        shards[shard_of_cohort(key[2:]) if key.startswith("c:") else 0].add(rec)
    for shard in shards:
        for t in ("events", "input", "control", "manifests", "commitments", "dlq", "snapshots"):
            if t in log.records or t in (log.meta.get("topics") or {}):
                shard.records.setdefault(t, [])
        shard.records["dlq"] = list(log.topic("dlq"))
    shards[0].disorder = list(log.disorder)
    return shards


def _run_shard(i: int) -> AuditReport:
    config, trusted, cut = _SHARD_ARGS
    return Auditor(_SHARDS[i], config, trusted, cut=cut).run()


def audit_shards(log: AuditLog, shards: list[AuditLog], config, trusted, cut, progress, t0: float) -> AuditReport:
    """Audit ``shards`` (of ``log``): shards 1..n-1 in forked workers, shard 0 here meanwhile;
    one report of them all."""
    global _SHARDS, _SHARD_ARGS
    _SHARDS, _SHARD_ARGS = shards, (config, trusted, cut)
    stage = f"audit ({len(shards)} processes)"
    if progress is not None:
        progress(stage, 0, len(shards))
    try:
        with mp.get_context("fork").Pool(len(shards) - 1) as pool:
            pending = pool.map_async(_run_shard, range(1, len(shards)))
            parts = [_run_shard(0)]
            if progress is not None:
                progress(stage, 1, len(shards))
            parts.extend(pending.get())
            if progress is not None:
                progress(stage, len(shards), len(shards))
    finally:
        _SHARDS, _SHARD_ARGS = [], ()
    report = AuditReport(log.source, [_merge_check(name, [p.check(name) for p in parts]) for name in CHECKS],
                         sum(p.events for p in parts))
    report.final_state = merge_final_states((f"shard{i}", p.final_state) for i, p in enumerate(parts))
    report.recomputed = {t: [x for p in parts for x in p.recomputed.get(t, [])] for t in parts[0].recomputed}
    report.meta = {**parts[0].meta, "records": {t: len(v) for t, v in log.records.items()}, "processes": len(shards)}
    report.seconds = time.perf_counter() - t0
    return report


def _merge_check(name: str, mine: list[Check]) -> Check:
    """One check of the shards' verdicts on it: counts summed, findings in shard order."""
    c = Check(name, skipped=all(m.skipped for m in mine), trusted=mine[0].trusted)
    for m in mine:
        for k, v in m.tally.items():
            c.count(k, v)
        c.checked += m.checked
        c.failed += m.failed
        c.warned += m.warned
        c.failures.extend(m.failures)
        c.warnings.extend(m.warnings)
        if m.skipped and not c.skipped:
            continue  # a shard without any of what the check reads: the others had some
        c.notes.extend(x for x in m.notes if x not in c.notes)
        for k, v in m.counts.items():
            c.counts[k] = c.counts.get(k, 0) + v
    c.failures, c.warnings = c.failures[:MAX_LISTED], c.warnings[:MAX_LISTED]
    return c
