"""The worker's /metrics: parsed with Prometheus' own text parser, names checked against the
naming conventions, no ``_created`` series, process metrics, the divergence-to-command
histogram, label values present from the start; and the per-worker Kafka client id."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streams.kafka.settings import CLIENT_ID_ENV, KafkaSettings
from streams.worker import metrics
from streams.worker.settings import WorkerSettings, kafka_client_id
from streams.codec.errors import DECODE_REASONS
from streams.core.state import HALT_REASONS
from streams.referee.records import Emission

ROOT = Path(__file__).resolve().parents[2]
HISTOGRAM = "traintrace_divergence_to_command_seconds"

#: every traintrace metric and its type (a rename must be deliberate: dashboards use them)
EXPECTED = {
    "traintrace_events_routed_total": "counter",
    "traintrace_events_folded_total": "counter",
    "traintrace_jobmap_rechecks_total": "counter",
    "traintrace_events_replayed_total": "counter",
    "traintrace_stale_records_skipped_total": "counter",
    "traintrace_offset_commits_total": "counter",
    "traintrace_input_direct_reads_total": "counter",
    "traintrace_input_fetch_stalls_total": "counter",
    "traintrace_dead_letters_total": "counter",
    "traintrace_records_emitted_total": "counter",
    "traintrace_input_watermark_lag_seconds": "gauge",
    "traintrace_consumer_lag_records": "gauge",
    "traintrace_incidents_open": "gauge",
    "traintrace_plans_effective": "gauge",
    "traintrace_cohorts": "gauge",
    "traintrace_cohorts_resting": "gauge",
    "traintrace_jobs_halted": "gauge",
    "traintrace_events_held": "gauge",
    "traintrace_snapshots_written_total": "counter",
    "traintrace_snapshot_round_seconds": "histogram",
    "traintrace_snapshot_encode_seconds": "histogram",
    "traintrace_stage_batch_records": "histogram",
    "traintrace_stage_seconds": "histogram",
    "traintrace_snapshots_refused_total": "counter",
    "traintrace_rebuild_mismatches_total": "counter",
    "traintrace_cohorts_left_memory_total": "counter",
    "traintrace_cohorts_brought_back_total": "counter",
    "traintrace_control_unverified_total": "counter",
    "traintrace_timer_rounds_failed_total": "counter",
    "traintrace_control_forged_total": "counter",
    "traintrace_outbox_stalls_total": "counter",
    HISTOGRAM: "histogram",
}


def families() -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def exposed_name(family) -> str:
    """The name as exposed: the parser drops a counter's ``_total`` from the family name."""
    return family.name + "_total" if family.type == "counter" else family.name


def test_metrics_parse_with_the_prometheus_text_parser():
    fams = families()
    ours = {exposed_name(f): f.type for f in fams.values() if f.name.startswith("traintrace_")}
    assert ours == EXPECTED
    assert "traintrace_consumer_lag" not in fams  # renamed: the unit is in the name
    for family in fams.values():
        assert family.documentation, family.name


def test_names_follow_the_prometheus_conventions():
    base_units = ("seconds", "bytes", "records", "ratio")
    non_base = re.compile(r"_(milli|micro|nano)?(seconds?_ms|ms|us|ns|millis|milliseconds|microseconds|"
                          r"nanoseconds|minutes|hours|days|kilobytes|megabytes|gigabytes|kb|mb|gb|percent)(_|$)")
    for family in families().values():
        if not family.name.startswith("traintrace_"):
            continue
        name = exposed_name(family)
        assert re.fullmatch(r"traintrace_[a-z][a-z0-9_]*[a-z0-9]", name), name  # snake case, no colons
        assert "__" not in name, name
        assert not non_base.search(name), f"{name}: use base units (seconds, bytes)"
        assert not re.search(r"_(counter|gauge|histogram|summary)(_|$)", name), f"{name}: type in the name"
        if family.type == "counter":
            assert name.endswith("_total"), name
            assert all(s.name == name for s in family.samples), name
        else:
            assert not name.endswith("_total"), f"{name}: only counters end in _total"
        if family.type == "histogram":
            assert name.endswith(base_units), f"{name}: a histogram observes a quantity in a base unit"
        for unit in ("seconds", "bytes"):  # a unit is a suffix, not in the middle (…_seconds_total is fine)
            if f"_{unit}_" in name:
                assert name.endswith(f"_{unit}_total"), name


def test_no_created_series():
    text = metrics.render().decode()
    assert "_created" not in text
    for family in families().values():
        assert not any(s.name.endswith("_created") for s in family.samples), family.name


def test_process_and_platform_metrics_are_on_the_registry():
    fams = families()
    names = {s.name for f in fams.values() for s in f.samples}
    assert "python_info" in names  # PlatformCollector
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds",
                 "process_open_fds"):
        assert name in names, name
    assert next(s for s in fams["process_start_time_seconds"].samples).value > 0


def test_label_values_exist_from_the_start():
    fams = families()
    kinds = {s.labels["error_kind"]: s.value for s in fams["traintrace_dead_letters"].samples}
    assert set(kinds) == set(metrics.DLQ_ERROR_KINDS)
    assert set(DECODE_REASONS) | set(HALT_REASONS) | {"INVALID_EVENT", "WRONG_KEY", "BAD_BATCH", "REJECTED"} \
        <= set(kinds)
    records = {s.labels["record"] for s in fams["traintrace_records_emitted"].samples}
    assert records == set(metrics.EMITTED_RECORDS)


def test_every_record_type_the_worker_emits_is_initialised():
    # every Emission the referee can build: Emission("<topic>", key, "<Record>", value)
    sources = [ROOT / "streams/referee/records.py", ROOT / "streams/referee/referee.py"]
    built = set()
    for path in sources:
        built |= set(re.findall(r'Emission\(\s*"\w+",\s*[^,]+,\s*"(\w+)"', path.read_text()))
    assert built, "no Emission(...) found: the pattern needs updating"
    assert built <= set(metrics.EMITTED_RECORDS), built - set(metrics.EMITTED_RECORDS)


def _histogram() -> tuple[float, float, dict[str, float]]:
    fam = families()[HISTOGRAM]
    assert fam.type == "histogram"
    count = next(s.value for s in fam.samples if s.name == HISTOGRAM + "_count")
    total = next(s.value for s in fam.samples if s.name == HISTOGRAM + "_sum")
    buckets = {s.labels["le"]: s.value for s in fam.samples if s.name == HISTOGRAM + "_bucket"}
    return count, total, buckets


def test_divergence_to_command_histogram():
    count0, sum0, buckets0 = _histogram()
    assert "+Inf" in buckets0 and "0.1" in buckets0
    issued_ms = 1_760_000_000_000
    rollback = Emission("control", "j1", "RollbackCommand", {"command_id": "c1", "issued_ts": issued_ms})
    others = [Emission("control", "j2", "QuarantineNotice", {"command_id": "c2", "issued_ts": issued_ms}),
              Emission("manifests", "x1", "DivergenceManifest", {"ts": issued_ms}),
              Emission("commitments", "c", "LineageCommitment", {"ts": issued_ms})]
    # published 80 ms after the by-cohort record that caused it
    metrics.observe_published([*others, rollback], published_s=issued_ms / 1000 + 0.08)
    count, total, buckets = _histogram()
    assert count == count0 + 1
    assert total - sum0 == pytest.approx(0.08, abs=1e-6)
    assert buckets["0.05"] == buckets0["0.05"]
    assert buckets["0.1"] == buckets0["0.1"] + 1
    # a clock behind the record's timestamp (another host's) observes 0, not a negative latency
    metrics.observe_published([rollback], published_s=issued_ms / 1000 - 1)
    count2, total2, _ = _histogram()
    assert count2 == count + 1 and total2 == pytest.approx(total)


def test_metrics_view_serves_the_registry():
    from aiohttp import web as aioweb

    from streams.worker import views

    pages = {}

    class App:
        def page(self, path):
            def register(fn):
                pages[path] = fn
                return fn
            return register

    class Web:
        def bytes(self, value, *, content_type=None, headers=None):
            return aioweb.Response(body=value, content_type=content_type, headers=headers)

    views.register(App(), referee=None, ckview=None, lock=None)
    import asyncio

    response = asyncio.run(pages["/metrics"](Web(), None))
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    names = {f.name for f in text_string_to_metric_families(response.body.decode())}
    assert {HISTOGRAM, "traintrace_consumer_lag_records", "process_cpu_seconds"} <= names


# ---------------------------------------------------------------- the Kafka client id

def test_client_id_from_host_and_web_port(monkeypatch):
    assert kafka_client_id("gpu-node-3", 6067) == "traintrace-gpu-node-3-6067"
    assert kafka_client_id("host name/x", 6066) == "traintrace-host-name-x-6066"  # Kafka's legal characters
    monkeypatch.setattr("socket.gethostname", lambda: "node7.example.org")
    a = WorkerSettings(bootstrap="k:9092", web_port=6066)
    b = WorkerSettings(bootstrap="k:9092", web_port=6067)
    assert a.client_id == "traintrace-node7.example.org-6066"
    assert b.client_id == "traintrace-node7.example.org-6067"
    assert WorkerSettings(bootstrap="k:9092", client_id="mine").client_id == "mine"


def test_client_id_reaches_every_client_of_the_worker(monkeypatch):
    monkeypatch.setenv(CLIENT_ID_ENV, "")
    assert "client.id" not in KafkaSettings.from_env("k:9092").producer_config()  # outside a worker: librdkafka's
    settings = WorkerSettings(bootstrap="k:9092", web_port=6071, client_id="traintrace-h-6071")
    assert settings.kafka.bootstrap == "k:9092" and settings.kafka.client_id == "traintrace-h-6071"
    faust = settings.kafka.faust_options()  # what create_app gives Faust
    assert faust["broker_client_id"] == "traintrace-h-6071" and faust["broker"] == ["kafka://k:9092"]
    for conf in (settings.kafka.producer_config(**{"linger.ms": 2}),
                 settings.kafka.consumer_config("traintrace-replay", **{"enable.partition.eof": True}),
                 settings.kafka.admin_config()):
        assert conf["client.id"] == "traintrace-h-6071"
    assert settings.kafka.producer_config(**{"client.id": "override"})["client.id"] == "override"
    import os

    assert os.environ[CLIENT_ID_ENV] == ""  # passed explicitly, not through the environment


def test_worker_settings_take_a_kafka_settings(monkeypatch):
    monkeypatch.setenv(CLIENT_ID_ENV, "from-env")
    kafka = KafkaSettings("k:9092", properties=(("security.protocol", "SSL"),))
    settings = WorkerSettings(bootstrap="k:9092", client_id="w-1", kafka=kafka)
    assert settings.kafka.client_id == "w-1" and settings.kafka.properties == kafka.properties
    # the worker's own client id wins over TRAINTRACE_CLIENT_ID
    assert WorkerSettings(bootstrap="k:9092", client_id="w-2").kafka.client_id == "w-2"


def test_counter_value_is_what_metrics_shows():
    """/health's "folded" reads the counter itself (one metric), not a count kept beside it."""
    from streams.worker import metrics as m

    m.FOLDED.inc(3)
    shown = [float(line.split()[-1]) for line in m.render().decode().splitlines()
             if line.startswith("traintrace_events_folded_total ")]
    assert shown == [m.counter_value(m.FOLDED)] and shown[0] >= 3
