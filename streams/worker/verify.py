"""``--verify-rebuilds``: every state the worker puts together from snapshots, checked against a
re-fold of its partition from offset 0.

A worker's state of a ``lineage.by-cohort`` partition is made three ways besides folding each
record as it comes: a takeover (snapshots loaded, the rest re-folded, :mod:`streams.worker.recovery`),
a partition that comes back to the worker untouched (its state kept), and a cohort back in memory
from its snapshot (:meth:`~streams.worker.snapshots.SnapshotStore.bring_back`); and a snapshot it
writes is what the next owner starts from. Each must equal what folding the partition's records from
its first one gives. With this setting on, each is compared so, job by job (every job's chain head:
its last seq and hash), and a difference is logged ``CRITICAL`` with what differs and counted
(``traintrace_rebuild_mismatches_total``); the worker goes on. It re-reads whole partitions, so it
is for tests and investigations, not for production.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from streams.codec import Codec
from streams.core.commitment import heads
from streams.referee.referee import Referee
from streams.worker import metrics
from streams.worker.settings import WorkerSettings

log = logging.getLogger("traintrace.worker")

#: cohort -> job_id -> (last seq, its hash)
Heads = dict[str, dict[str, tuple[int, str]]]


def heads_of(lin: Any) -> dict[str, tuple[int, str]]:
    return {h["job_id"]: (h["seq"], h["hash"]) for h in heads(lin)}


def refold(settings: WorkerSettings, codec: Codec, partition: int, end: int) -> Heads:
    """The chain heads of every cohort of ``partition`` folded from offset 0 to ``end`` (blocking),
    by the takeover's own replay (into a referee of its own)."""
    from streams.worker.recovery import replay_partition  # (recovery calls this module)

    scratch = Referee(settings.core)
    replay_partition(settings, codec, scratch, partition, 0, end)
    try:
        return {c: heads_of(lin) for c, lin in scratch.engines.items()}
    finally:
        scratch.forget_cohorts(list(scratch.engines))  # freed now, not at a full collection


def differences(got: Heads, want: Heads, only: set[str] | None = None) -> list[str]:
    """What differs between two sets of chain heads (``only``: these cohorts), in words."""
    out = []
    for cohort in sorted((set(got) | set(want)) if only is None else only):
        g, w = got.get(cohort), want.get(cohort)
        if g == w:
            continue
        if g is None or w is None:
            out.append(f"cohort {cohort!r} {'missing' if g is None else 'not in the re-fold'}")
            continue
        jobs = sorted(j for j in set(g) | set(w) if g.get(j) != w.get(j))
        out.append(f"cohort {cohort!r}: " + ", ".join(
            f"{j} has {g[j][0] if j in g else 'nothing'} where the re-fold has {w[j][0] if j in w else 'nothing'}"
            for j in jobs[:6]) + (f" (+{len(jobs) - 6} more jobs)" if len(jobs) > 6 else ""))
    return out


def report(what: str, found: list[str]) -> None:
    if found:
        metrics.REBUILD_MISMATCHES.inc()
        log.critical("--verify-rebuilds: %s differs from a re-fold of its partition from offset 0: %s",
                     what, "; ".join(found[:8]))
    else:
        log.info("--verify-rebuilds: %s equals a re-fold of its partition from offset 0", what)


def check(settings: WorkerSettings, codec: Codec, what: str, partition: int, end: int,
          current: Callable[[], Heads], only: set[str] | None = None) -> None:
    """Compare ``current()`` (the worker's heads) with a re-fold of ``partition`` up to ``end``;
    never raises (a check that cannot run says so)."""
    try:
        want = refold(settings, codec, partition, end)
        found = differences(current(), want, only)
    except Exception as exc:  # a diagnosis must not stop the worker
        log.warning("--verify-rebuilds: %s not checked (%r)", what, exc)
        return
    report(what, found)
