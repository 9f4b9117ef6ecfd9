"""The traintrace Grafana dashboard, built with Grafana's own Foundation SDK (typed builders, so
a panel cannot name a field Grafana does not have), over the workers' Prometheus metrics.

    python deploy/grafana/dashboard.py > deploy/grafana/traintrace-dashboard.json

``tests/unit/test_dashboard.py`` checks the committed JSON is what this builds and that every
metric a panel queries is one a worker exposes.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery as PrometheusQuery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder

JOB = 'job="traintrace"'


def q(expr: str, legend: str | None = None) -> PrometheusQuery:
    out = PrometheusQuery().expr(expr)
    return out.legend_format(legend) if legend else out


def series(title: str, unit: str, *queries: PrometheusQuery, desc: str = "") -> Timeseries:
    p = Timeseries().title(title).unit(unit).description(desc).height(8).span(12)
    for x in queries:
        p = p.with_target(x)
    return p


def stat(title: str, expr: str, desc: str = "") -> Stat:
    return Stat().title(title).description(desc).height(4).span(6).with_target(q(expr))


def build() -> Dashboard:
    return (
        Dashboard("traintrace")
        .uid("traintrace-pipeline")
        .tags(["traintrace", "generated"])
        .refresh("30s")
        .time("now-1h", "now")
        .with_row(Row("Now"))
        .with_panel(stat("Open incidents", f"sum(traintrace_incidents_open{{{JOB}}})",
                         "Root incidents known to the workers"))
        .with_panel(stat("Halted jobs", f"sum(traintrace_jobs_halted{{{JOB}}})", "No record, no concurrent training"))
        .with_panel(stat("Plans in force", f"sum(traintrace_plans_effective{{{JOB}}})",
                         "Jobs with a rollback or quarantine not yet acknowledged"))
        .with_panel(stat("Workers up", f"sum(up{{{JOB}}})"))
        .with_row(Row("Throughput and lag"))
        .with_panel(series("Events routed and folded", "ops",
                           q(f"sum(rate(traintrace_events_routed_total{{{JOB}}}[$__rate_interval]))", "routed"),
                           q(f"sum(rate(traintrace_events_folded_total{{{JOB}}}[$__rate_interval]))", "folded")))
        .with_panel(series("Consumer lag", "short",
                           q(f"sum by (topic) (traintrace_consumer_lag_records{{{JOB}}})", "{{topic}}"),
                           desc="High watermark minus the next offset processed"))
        .with_panel(series("Input watermark lag", "s",
                           q(f"max by (instance) (traintrace_input_watermark_lag_seconds{{{JOB}}})", "{{instance}}"),
                           desc="Grace-period halts and retention decisions run on the watermark"))
        .with_panel(series("Divergence to command", "s",
                           q("histogram_quantile(0.5, sum by (le) (rate(traintrace_divergence_to_command_seconds_bucket"
                             f"{{{JOB}}}[$__rate_interval])))", "p50"),
                           q("histogram_quantile(0.99, sum by (le) (rate(traintrace_divergence_to_command_seconds_bucket"
                             f"{{{JOB}}}[$__rate_interval])))", "p99")))
        .with_row(Row("Records"))
        .with_panel(series("Records published", "ops",
                           q(f"sum by (record) (rate(traintrace_records_emitted_total{{{JOB}}}[$__rate_interval]))",
                             "{{record}}")))
        .with_panel(series("Dead letters, forged control, held events", "short",
                           q(f"sum by (error_kind) (increase(traintrace_dead_letters_total{{{JOB}}}[$__rate_interval]))",
                             "dlq {{error_kind}}"),
                           q(f"sum(increase(traintrace_control_forged_total{{{JOB}}}[$__rate_interval]))", "forged control"),
                           q(f"sum(traintrace_events_held{{{JOB}}})", "held events")))
    )


def render() -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


if __name__ == "__main__":
    print(render(), end="")
