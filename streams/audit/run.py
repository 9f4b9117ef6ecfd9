"""``traintrace audit``: check a log without trusting the system that wrote it (SPEC §9).

The audit reads an :class:`~streams.audit.log.AuditLog` (the topics, or an archive of
them) and runs its checks, each with its own verdict:

``chains``       every job's events on ``lineage.events``: seq 0, 1, 2, … with no gap, no
                 conflicting duplicate (identical redeliveries are fine), every ``hash`` recomputed
                 from the canonical bytes and linked to the previous one; undecodable records must
                 be in the dead-letter topic.
``input``        the processor's input (``lineage.by-cohort``) is exactly the events log: every
                 routed event is byte for byte the record at its events position, every valid
                 event was routed, each job's events in order. (Skipped, with a note, for a log
                 without the input topic: then the fold order is the events' own order.)
``commands``     re-folding the events in the processor's order through the same referee code
                 gives exactly the commands on ``lineage.control``: none missing, none extra,
                 none different (every field, the processor's timestamps included — they are
                 the time of the input record that caused them, so a replay reproduces them).
``manifests``    likewise every ``DivergenceManifest`` version, with the commitment root and
                 concurrency snapshot it was decided with.
``commitments``  every ``LineageCommitment`` is recomputed at the fold position it covers and
                 must be equal field for field (root, heads, snapshot, fold log); with a keyring,
                 every one must carry a valid Ed25519 signature by a trusted key. Without one,
                 no signature is verified, and the verdict line (``Check.summary``) says so:
                 how many records are signed and unsigned, none counted as verified.
``snapshots``    every fold snapshot recomputes at the input it covers (signatures as above).
``witnesses``    (asked for only) the C2SP checkpoints: each a prefix of this log, no split view,
                 with a quorum every cohort cosigned (:mod:`streams.audit.witnessing`).
``deletions``    every ``CheckpointDeleted`` (SPEC §13) was of a checkpoint a RetentionNotice had
                 marked deletable before it (the replay's own judgement: ``DELETED_PINNED``).
                 The notices themselves are control records: ``commands`` re-derives them.

What the processor decides on its own clock is checked for justification instead of equality:
an ``UNTRACEABLE_SOURCE`` halt (issued after a grace period) must name a job that consumed a
checkpoint nobody had written when it was folded; a missing one is a warning.

Where each part is:

=================================  ==============================================================
:mod:`streams.audit.run`         :func:`audit`: one process, or sharded by cohort
:mod:`streams.audit.auditor`       :class:`Auditor`: one audit of one log, the checks in order
:mod:`streams.audit.chains`        ``chains`` (and the dead letters)
:mod:`streams.audit.input_check`   ``input``; the processor's fold order
:mod:`streams.audit.replay`        the re-fold through the referee
:mod:`streams.audit.commitments`   ``commitments``: recomputed at their positions; signatures
:mod:`streams.audit.compare`       ``commands`` and ``manifests``
:mod:`streams.audit.report`        :class:`Finding`, :class:`Check`, :class:`AuditReport`
:mod:`streams.audit.shards`        :func:`split_by_cohort` and the forked processes
=================================  ==============================================================
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any, Callable

from streams.core.state import Config
from streams.audit.auditor import Auditor
from streams.audit.log import AuditLog, no_gc
from streams.audit.report import (CHECKS, MAX_LISTED, TITLES, AuditReport, Check, Finding, finding_line,
                                  recomputed_digest)
from streams.audit.shards import audit_shards, split_by_cohort
from streams.audit.witnessing import WitnessPolicy, check_witnesses

__all__ = ["audit", "Auditor", "AuditReport", "Check", "Finding", "finding_line", "recomputed_digest",
           "split_by_cohort", "WitnessPolicy", "CHECKS", "TITLES", "MAX_LISTED", "PARALLEL_MIN_EVENTS"]

#: the smallest log (events) worth forking for
PARALLEL_MIN_EVENTS = 20_000


def audit(log: AuditLog, config: Config | None = None, trusted_keys: Any = None, cut: bool = False,
          progress: Callable[[str, int, int], None] | None = None, workers: int | None = None,
          witnesses: WitnessPolicy | None = None) -> AuditReport:
    """Audit ``log``. Cohorts are independent (SPEC §2: the lineage is folded per cohort), so a
    large log is split by cohort into ``workers`` shards (default: the CPUs, at most 4) audited
    by forked processes, and their reports merged; a log that cannot be split cleanly (a job
    routed to cohorts of two shards) is audited in one process. Either way the verdicts, the
    findings and the recomputed records are the same. With an active ``witnesses`` policy the
    ``witnesses`` check (:mod:`streams.audit.witnessing`) runs after them, on the whole log."""
    with no_gc():
        report = _audit(log, config, trusted_keys, cut, progress, workers)
        if witnesses is not None and witnesses.active:
            t0 = time.perf_counter()
            if progress is not None:
                progress("witnesses", 0, 1)
            report.checks.append(check_witnesses(log, witnesses, trusted_keys, config=config, cut=cut))
            report.seconds += time.perf_counter() - t0
        return report


def _audit(log: AuditLog, config, trusted_keys, cut, progress, workers) -> AuditReport:
    n = workers if workers is not None else min(4, os.cpu_count() or 1)
    if n > 1 and len(log.topic("events")) >= PARALLEL_MIN_EVENTS and "fork" in mp.get_all_start_methods():
        t0 = time.perf_counter()
        shards = split_by_cohort(log, n)
        if shards is not None:
            return audit_shards(log, shards, config, trusted_keys, cut, progress, t0)
    return Auditor(log, config, trusted_keys, cut=cut, progress=progress).run()
