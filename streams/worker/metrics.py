"""Prometheus metrics of a worker (served at ``/metrics`` by its web server).

Names follow Prometheus' conventions: counters end in ``_total``, a quantity carries its base
unit (``_seconds``, ``_records``), gauges counting things are named for what they count. No
``_created`` series (``disable_created_metrics`` runs before any metric exists); the labelled
series whose values are known beforehand (dead-letter kinds, record types) exist from the start
at 0. The process's own metrics (``process_*``: CPU, memory, file descriptors, start time) and
``python_info`` are on the same registry.
"""

from __future__ import annotations

import time
from typing import Iterable

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as CONTENT_TYPE  # noqa: F401 - /metrics' type

from streams.codec.errors import DECODE_REASONS
from streams.core.state import HALT_REASONS
from streams.signing.message import BAD_SIGNATURE, MALFORMED, UNKNOWN_KEY, UNSIGNED, WRONG_ROLE
from streams.worker.resting import counts_of

# before any metric is created: no ``<name>_created`` series (the process start time is in
# process_start_time_seconds)
prometheus_client.disable_created_metrics()

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

#: every ``error_kind`` a dead letter of the worker can have: the codec's decode reasons, the
#: router's (INVALID_EVENT, WRONG_KEY), the decide agent's (BAD_BATCH, a guard reason of the
#: fold, REJECTED)
DLQ_ERROR_KINDS: tuple[str, ...] = (*DECODE_REASONS, "INVALID_EVENT", "WRONG_KEY", "BAD_BATCH",
                                    *HALT_REASONS, "REJECTED")
#: every record type the worker emits (``Emission.record``)
EMITTED_RECORDS: tuple[str, ...] = ("RollbackCommand", "QuarantineNotice", "PlanCleared", "HaltCommand",
                                    "DivergenceManifest", "Alert", "LineageCommitment", "CheckpointStatus")

ROUTED = Counter("traintrace_events_routed_total", "Events decoded, validated and routed to their cohort",
                 registry=REGISTRY)
JOBMAP_RECHECKS = Counter("traintrace_jobmap_rechecks_total",
                          "Events of a job the router's map had no cohort for, looked up again in "
                          "lineage.job-cohorts: found (another worker routed its JobStarted meanwhile) or not "
                          "(the job is unregistered)", ["found"], registry=REGISTRY)
for _found in ("yes", "no"):
    JOBMAP_RECHECKS.labels(_found)
FOLDED = Counter("traintrace_events_folded_total", "Routed events folded by the referee (duplicates included)",
                 registry=REGISTRY)
REPLAYED = Counter("traintrace_events_replayed_total", "Events folded again to rebuild state after an assignment",
                   registry=REGISTRY)
STALE = Counter("traintrace_stale_records_skipped_total",
                "Records skipped as not this worker's (revoked while they waited in a batch) or already "
                "processed (re-fetched after a rebalance)", registry=REGISTRY)
COMMITS = Counter("traintrace_offset_commits_total", "Offset commits of the processed input positions",
                  registry=REGISTRY)
DIRECT_READS = Counter("traintrace_input_direct_reads_total",
                       "Ranges of owned input records Faust did not deliver, read from the topic and processed "
                       "in order", registry=REGISTRY)
FETCH_STALLS = Counter("traintrace_input_fetch_stalls_total",
                       "Owned input partitions whose fetch by Faust stopped moving with records waiting (read "
                       "from the topic instead)", registry=REGISTRY)
WATERMARK_LAG = Gauge("traintrace_input_watermark_lag_seconds",
                      "Wall clock minus the input watermark the grace periods run on (last computed)",
                      registry=REGISTRY)
DLQ = Counter("traintrace_dead_letters_total", "Records sent to the dead-letter topic", ["error_kind"],
              registry=REGISTRY)
EMITTED = Counter("traintrace_records_emitted_total", "Records published, by record type", ["record"],
                  registry=REGISTRY)
for _kind in DLQ_ERROR_KINDS:
    DLQ.labels(_kind)
for _record in EMITTED_RECORDS:
    EMITTED.labels(_record)
LAG = Gauge("traintrace_consumer_lag_records", "High watermark minus the next offset processed, in records",
            ["topic", "partition"], registry=REGISTRY)
DIVERGENCE_TO_COMMAND = Histogram(
    "traintrace_divergence_to_command_seconds",
    "From the input record of the event that made a plan change (its lineage.by-cohort timestamp, "
    "the RollbackCommand's issued_ts) to the command published (flushed to lineage.control)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
    registry=REGISTRY)
STAGE_BATCH = Histogram(
    "traintrace_stage_batch_records", "Input records one call of a stage processed (route: events; fold: EventBatches)",
    ["stage"], buckets=(1, 4, 16, 64, 256, 1000, 2000, 4000, 8000), registry=REGISTRY)
STAGE_SECONDS = Histogram(
    "traintrace_stage_seconds",
    "One call of a stage: its records processed (work), then its outputs sent and the previous call's "
    "acknowledged (flush)",
    ["stage", "part"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=REGISTRY)
INCIDENTS = Gauge("traintrace_incidents_open", "Root incidents known to this worker", registry=REGISTRY)
PLANS = Gauge("traintrace_plans_effective", "Jobs with an effective plan on this worker", registry=REGISTRY)
COHORTS = Gauge("traintrace_cohorts", "Cohorts whose lineage this worker holds in memory", registry=REGISTRY)
RESTING = Gauge("traintrace_cohorts_resting", "Cohorts this worker owns that are out of memory (settled or idle: "
                "back from their snapshot at their next input)", registry=REGISTRY)
HALTED = Gauge("traintrace_jobs_halted", "Halted jobs on this worker", registry=REGISTRY)
HELD = Gauge("traintrace_events_held", "Events of keyed jobs waiting for their job's seal (streams.core.seals)",
             registry=REGISTRY)

SNAPSHOTS = Counter("traintrace_snapshots_written_total", "CohortSnapshot records written to lineage.snapshots",
                    registry=REGISTRY)
SNAPSHOT_SECONDS = Histogram("traintrace_snapshot_round_seconds",
                             "One snapshot round of one partition (encode, write, wait for acks=all)",
                             buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
                             registry=REGISTRY)
SNAPSHOT_ENCODE_SECONDS = Histogram("traintrace_snapshot_encode_seconds",
                                    "The encode of one snapshot round's changed cohorts (the fold waits "
                                    "meanwhile: it runs under the fold's lock)",
                                    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
                                    registry=REGISTRY)
REBUILD_MISMATCHES = Counter("traintrace_rebuild_mismatches_total",
                             "--verify-rebuilds: states rebuilt or written from snapshots that differ from a re-fold "
                             "of their partition from offset 0", registry=REGISTRY)
SNAPSHOTS_REFUSED = Counter("traintrace_snapshots_refused_total",
                            "Snapshots not loaded (digest, signature or format): their partition re-folded",
                            registry=REGISTRY)
EVICTED = Counter("traintrace_cohorts_left_memory_total", "Settled cohorts that left memory after a snapshot",
                  registry=REGISTRY)
BROUGHT_BACK = Counter("traintrace_cohorts_brought_back_total",
                       "Cohorts out of memory brought back from their snapshot by new input", registry=REGISTRY)

CONTROL_UNVERIFIED = Counter("traintrace_control_unverified_total",
                             "Records of lineage.control a takeover left out of what is published: not signed "
                             "by this processor's key (forged, or an operator's release)", registry=REGISTRY)
OUTBOX_STALLS = Counter("traintrace_outbox_stalls_total",
                        "Batches whose records the broker had not acknowledged after a flush round (30 s): "
                        "the worker waited on instead of failing the batch", registry=REGISTRY)
CONTROL_FORGED = Counter("traintrace_control_forged_total",
                         "Records of lineage.control that did not verify under the trusted keyring (the "
                         "control sentinel raised a CONTROL_FORGED alert for each), by reason",
                         ["reason"], registry=REGISTRY)
for _reason in (UNSIGNED, UNKNOWN_KEY, WRONG_ROLE, BAD_SIGNATURE, MALFORMED, "undecodable"):
    CONTROL_FORGED.labels(_reason)  # exported as 0 from the start (a panel or rule sees the series)
TIMER_FAILURES = Counter("traintrace_timer_rounds_failed_total",
                         "Rounds of the worker's timers that failed and were skipped (the next round tries "
                         "again; retriable broker errors past their deadline, mostly)", ["timer", "error"],
                         registry=REGISTRY)



def observe_referee(referee, resting=None) -> None:
    """The gauges, over the cohorts in memory and (``resting``: a
    :class:`~streams.worker.resting.RestingViews`) those out of it whose rows are known."""
    incidents, plans, halted, held = resting.totals() if resting is not None else (0, 0, 0, 0)
    for lin in referee.engines.values():
        i, p, h, w = counts_of(lin)  # what a resting cohort keeps counted, for one in memory
        incidents, plans, halted, held = incidents + i, plans + p, halted + h, held + w
    INCIDENTS.set(incidents)
    PLANS.set(plans)
    HALTED.set(halted)
    HELD.set(held)
    COHORTS.set(len(referee.engines))
    if resting is not None:
        RESTING.set(len(resting.out_of_memory))


def observe_published(emissions: Iterable, published_s: float | None = None) -> None:
    """The emissions are on the broker (flushed) at ``published_s`` (epoch seconds, default
    now): observe each RollbackCommand's latency from its input record (``issued_ts``, ms)."""
    if published_s is None:
        published_s = time.time()
    for em in emissions:
        if em.record == "RollbackCommand":
            DIVERGENCE_TO_COMMAND.observe(max(0.0, published_s - em.value["issued_ts"] / 1000))


def counter_value(counter: Counter) -> float:
    """An unlabelled counter's value, as ``/metrics`` shows it (one metric collected, not all)."""
    for sample in counter.collect()[0].samples:
        if sample.name.endswith("_total"):
            return sample.value
    return 0.0


def render() -> bytes:
    """``/metrics``: the registry in the Prometheus text format (:data:`CONTENT_TYPE`)."""
    return generate_latest(REGISTRY)


def observe_lag(consumer, inputs: Iterable, highwater=None) -> dict[tuple[str, int], tuple[int, int]]:
    """``traintrace_consumer_lag_records`` of each owned partition of ``inputs``
    (:class:`~streams.worker.positions.InputPartitions`), from the high watermarks Faust's
    ``consumer`` knows, or ``highwater(topic, partition)`` where that knows one (the route
    stage's feed: Faust does not fetch those partitions); returns (topic, partition) ->
    (position, lag) for the watchdog."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    try:
        for tp in consumer.assignment():
            hw = highwater(tp.topic, tp.partition) if highwater is not None else None
            if hw is None:
                hw = consumer.highwater(tp)
            for inp in inputs:
                if tp.topic == inp.topic and tp.partition in inp.owned:
                    pos = inp.position.get(tp.partition, 0)
                    lag = max(0, (hw or 0) - pos)
                    LAG.labels(tp.topic, str(tp.partition)).set(lag)
                    out[(tp.topic, tp.partition)] = (pos, lag)
    except Exception:  # pragma: no cover - metrics only
        pass
    return out
