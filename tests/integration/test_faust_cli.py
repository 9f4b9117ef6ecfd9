"""Faust's own command line on the worker's app: ``faust -A streams.worker.worker_app --json agents``
and ``… tables`` run as subprocesses (the ``faust`` console script of the environment) and their
JSON parsed. They only list: no worker runs, and the broker is not needed (checked with an
unreachable one). The module's settings come from the variables of ``traintrace worker``, with its
defaults (checked against the command's own options)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streams.worker.settings import WorkerSettings

FAUST = Path(sys.executable).with_name("faust")
MODULE = "streams.worker.worker_app"
UNREACHABLE = "127.0.0.1:1"


def _env(bootstrap: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINTRACE_")}
    env.update(KAFKA_BOOTSTRAP_SERVERS=bootstrap, TRAINTRACE_TOPIC_PREFIX=prefix, TRAINTRACE_WEB_PORT="6199")
    return env


def faust_json(tmp_path: Path, bootstrap: str, prefix: str, *command: str) -> list[dict]:
    proc = subprocess.run([str(FAUST), "-A", MODULE, "--json", *command], cwd=tmp_path, env=_env(bootstrap, prefix),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def prefix() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}."


@pytest.mark.parametrize("broker", ["running", "unreachable"])
def test_faust_agents_json(tmp_path, kafka_bootstrap, prefix, broker):
    bootstrap = kafka_bootstrap if broker == "running" else UNREACHABLE
    agents = faust_json(tmp_path, bootstrap, prefix, "agents")
    by_topic = {a["topic"]: a for a in agents}
    assert set(by_topic) == {f"{prefix}lineage.events", f"{prefix}lineage.by-cohort"}
    assert by_topic[f"{prefix}lineage.events"]["name"].endswith(".route_agent")
    assert by_topic[f"{prefix}lineage.by-cohort"]["name"].endswith(".decide")
    for agent in agents:
        assert agent["help"] and agent["help"] != "<N/A>", agent  # their docstrings
    assert list(tmp_path.iterdir()) == []  # listing created no data dir, no table store


def test_faust_tables_json(tmp_path, prefix):
    tables = faust_json(tmp_path, UNREACHABLE, prefix, "tables")
    # the worker keeps no Faust table (the router's map is streams.worker.jobmap): an empty list
    assert tables == []


def test_faust_tables_text(tmp_path, prefix):
    proc = subprocess.run([str(FAUST), "-A", MODULE, "tables"], cwd=tmp_path, env=_env(UNREACHABLE, prefix),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Missing description" not in proc.stdout


def _worker_options() -> dict[str, object]:
    from streams.cli.worker import worker

    return {p.name: p for p in worker.params}


# traintrace worker's option -> (a value to set through its variable, what the settings then hold)
CASES = {
    "app_id": ("other-app", lambda s: s.app_id, "other-app"),
    "partitions": ("3", lambda s: s.partitions, 3),
    "data_dir": ("/tmp/wd", lambda s: s.data_dir, Path("/tmp/wd")),
    "store": ("memory", lambda s: s.store, "memory://"),
    "web_port": ("6077", lambda s: s.web_port, 6077),
    "web_host": ("0.0.0.0", lambda s: s.web_host, "0.0.0.0"),
    "grace_seconds": ("2.5", lambda s: s.grace_ms, 2500),
    "ack_timeout": ("7", lambda s: s.ack_timeout_ms, 7000),
    "commitment_interval": ("3", lambda s: s.commitment_interval_s, 3.0),
    "commit_interval": ("0.5", lambda s: s.commit_interval_s, 0.5),
    "session_timeout": ("6", lambda s: s.session_timeout_s, 6.0),
    "loglevel": ("debug", lambda s: s.loglevel, "debug"),
    "signing_key": ("/tmp/k.pem", lambda s: s.signing_key, Path("/tmp/k.pem")),
    "trusted_keys": ("/tmp/keys", lambda s: s.trusted_keys, Path("/tmp/keys")),
    "window": ("5", lambda s: s.core.window, 5),
    "spike_factor": ("4.5", lambda s: s.core.spike_factor, 4.5),
    "taint_margin": ("2", lambda s: s.core.taint_margin, 2),
    "require_sealed_events": ("true", lambda s: s.core.seals.require_sealed, True),
    "topic_prefix": ("p.", lambda s: s.topics.events, "p.lineage.events"),
    "bootstrap": ("kafka.example:9092", lambda s: s.bootstrap, "kafka.example:9092"),
    "snapshot_every": ("500", lambda s: s.snapshot_every, 500),
    "snapshot_interval": ("2.5", lambda s: s.snapshot_interval_s, 2.5),
    "evict_settled": ("false", lambda s: s.evict_settled, False),
    "evict_idle": ("false", lambda s: s.evict_idle, False),
    "watchdog_seconds": ("30", lambda s: s.watchdog_s, 30.0),
    "settle_horizon": ("600", lambda s: s.settle_horizon_ms, 600_000),
    "cohort_settle_horizons": ("a=60,b=none", lambda s: s.cohort_horizons_ms, {"a": 60_000, "b": None}),
    "retention_interval": ("2", lambda s: s.retention_interval_s, 2.0),
    "evict_idle_after": ("5", lambda s: s.evict_idle_after_s, 5.0),
    "route_feed": ("faust", lambda s: s.route_feed, "faust"),
    "fold_feed": ("faust", lambda s: s.fold_feed, "faust"),
    "verify_rebuilds": ("true", lambda s: s.verify_rebuilds, True),
    "stages": ("route", lambda s: (s.stages, s.group_id), ("route", "traintrace-route")),
    "log_origin": ("traintrace.example/prod/", lambda s: s.log_origin, "traintrace.example/prod"),
}
DEFAULTS = {  # what the worker makes of an option's default
    "data_dir": Path(".traintrace/worker-6066"), "store": "rocksdb://", "grace_seconds": 30000,
    "ack_timeout": 300000, "signing_key": None, "trusted_keys": None, "topic_prefix": "lineage.events",
    "require_sealed_events": False, "verify_rebuilds": False, "evict_settled": True, "evict_idle": True, "settle_horizon": None, "cohort_settle_horizons": {},
    "log_origin": "traintrace.local/traintrace", "stages": ("all", "traintrace"),
}
#: options the settings take from the environment elsewhere: the Kafka client's (KafkaSettings.from_env
#: in WorkerSettings: tests/unit/test_kafka_security.py) and the issued job keys (a real key
#: directory: tests/unit/test_seal_policy_settings.py)
ELSEWHERE = {"kafka_config", "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
             "ssl_ca", "ssl_cert", "ssl_key", "job_keys"}


def test_settings_from_env_match_traintrace_worker(monkeypatch):
    options = _worker_options()
    for name, option in options.items():
        if option.envvar:
            monkeypatch.delenv(option.envvar, raising=False)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k:1")
    defaults = WorkerSettings.from_env()
    for name, (_value, get, _expected) in CASES.items():
        if name == "bootstrap":
            continue
        want = DEFAULTS.get(name, options[name].default)
        assert get(defaults) == want, name
    assert defaults.client_id.startswith("traintrace-") and defaults.client_id.endswith("-6066")
    for name, (value, get, expected) in CASES.items():
        with monkeypatch.context() as m:
            m.setenv(options[name].envvar, value)  # the worker's own variable for the option
            assert get(WorkerSettings.from_env()) == expected, name
    # every option that is a setting is covered (the others only act at start-up)
    assert set(options) - set(CASES) - ELSEWHERE <= {"reset_data_dir", "retention_ms", "allow_finite_retention",
                                                     "allow_under_replicated", "supervise"}


def test_settings_from_env_name_a_bad_variable(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k:1")
    monkeypatch.setenv("TRAINTRACE_PARTITIONS", "zero")
    with pytest.raises(ValueError, match="TRAINTRACE_PARTITIONS"):
        WorkerSettings.from_env()
