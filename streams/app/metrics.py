"""Prometheus metrics of a worker (served at ``/metrics`` by its web server)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

REGISTRY = CollectorRegistry()

ROUTED = Counter("traintrace_events_routed_total", "Events decoded, validated and routed to their cohort",
                 registry=REGISTRY)
FOLDED = Counter("traintrace_events_folded_total", "Routed events folded by the referee (duplicates included)",
                 registry=REGISTRY)
REPLAYED = Counter("traintrace_events_replayed_total", "Events folded again to rebuild state after an assignment",
                   registry=REGISTRY)
STALE = Counter("traintrace_stale_records_skipped_total",
                "Records skipped as not this worker's (revoked while they waited in a batch) or already "
                "processed (re-fetched after a rebalance)", registry=REGISTRY)
COMMITS = Counter("traintrace_offset_commits_total", "Offset commits of the processed input positions",
                  registry=REGISTRY)
SEEKS = Counter("traintrace_input_seeks_total",
                "Seeks back to the routed position after records came beyond it unseen", registry=REGISTRY)
WATERMARK_LAG = Gauge("traintrace_input_watermark_lag_seconds",
                      "Wall clock minus the input watermark the grace periods run on (last computed)",
                      registry=REGISTRY)
DLQ = Counter("traintrace_dead_letters_total", "Records sent to the dead-letter topic", ["error_kind"],
              registry=REGISTRY)
EMITTED = Counter("traintrace_records_emitted_total", "Records published, by record type", ["record"],
                  registry=REGISTRY)
LAG = Gauge("traintrace_consumer_lag", "High watermark minus the next offset processed", ["topic", "partition"],
            registry=REGISTRY)
INCIDENTS = Gauge("traintrace_incidents_open", "Root incidents known to this worker", registry=REGISTRY)
PLANS = Gauge("traintrace_plans_effective", "Jobs with an effective plan on this worker", registry=REGISTRY)
COHORTS = Gauge("traintrace_cohorts", "Cohorts whose lineage this worker holds", registry=REGISTRY)
HALTED = Gauge("traintrace_jobs_halted", "Halted jobs on this worker", registry=REGISTRY)


def observe_referee(referee) -> None:
    incidents = plans = halted = 0
    for lin in referee.engines.values():
        incidents += len(lin.incidents)
        plans += len(lin.plans)
        halted += sum(1 for j in lin.state.jobs.values() if j.halt_reasons)
    INCIDENTS.set(incidents)
    PLANS.set(plans)
    HALTED.set(halted)
    COHORTS.set(len(referee.engines))


def render() -> bytes:
    return generate_latest(REGISTRY)
