"""Every refusal in one line, and the right one (issue 23), on the secure broker (SASL_SSL +
SCRAM-SHA-512, ACLs enforced): each role running a command, a job client or a worker's outbox it
may not gets exactly one line on stderr naming principal, operation and resource, exit 2, no
traceback -- the FATAL CLUSTER_AUTHORIZATION_FAILED of the idempotent producer's PID request
(``traintrace publish``/``release`` as the auditor: it used to end in 30 lines and a
``SystemError``) included; and a client speaking another protocol than the listener says "wrong
security.protocol?" instead of "1/1 brokers are down".

The commands run as child processes (``python -m streams``), as a user runs them: what reaches
their stderr is what is checked. Cost: one secure broker start (~6-10 s) and ~12 short commands.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.devtools.broker import LocalBroker
from streams.kafka.errors import KafkaAuthorizationError
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics

from secure import role, role_env, secure_broker  # noqa: F401  (the module's secure broker)

REPO = Path(__file__).resolve().parents[2]
SEED = "01_seed_example.jsonl"


@pytest.fixture(scope="module")
def topics(role) -> TopicNames:
    names = TopicNames()
    ensure_topics(role("processor"), standard_topics(names, 2))
    return names


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KAFKA_") and k not in ("TRAINTRACE_KAFKA_CONFIG", "TRAINTRACE_TOPIC_PREFIX")}
    return {**env, "PYTHONPATH": str(REPO), "COLUMNS": "80", **extra}


def traintrace(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streams", *args], env=_env(env), cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=180)


def refused_in_one_line(r: subprocess.CompletedProcess, *words: str, code: int = 2) -> str:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert "Traceback" not in r.stderr and "SystemError" not in r.stderr, r.stderr
    assert r.returncode == code, f"exit {r.returncode}\n{r.stderr}"
    assert len(lines) == 1, r.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "brokers are down" not in lines[0] and "timed out" not in lines[0].lower()
    return lines[0]


def _scenario() -> str:
    from tests.unit.vectors import scenarios_dir

    src = scenarios_dir() / SEED
    if not src.is_file():
        pytest.skip(f"no scenario {src}")
    return str(src)


# ---------------------------------------------------------------------------------- the commands


@pytest.mark.parametrize("who, words", [
    # no IDEMPOTENT_WRITE: the FATAL error of the idempotent producer's PID request
    ("auditor", ["User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster", "WRITE topic lineage.events"]),
    ("operator", ["User:operator", "DESCRIBE on topic lineage.events"]),
])
def test_publish_by_a_role_that_may_not_is_one_line(secure_broker: LocalBroker, topics, who, words):
    r = traintrace(role_env(secure_broker, who), "publish", _scenario())
    refused_in_one_line(r, "error:", *words)


@pytest.mark.parametrize("who, words", [
    ("auditor", ["User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster", "WRITE topic lineage.control"]),
    ("trainer", ["User:trainer", "WRITE on topic lineage.control"]),
])
def test_release_by_a_role_that_may_not_is_one_line(secure_broker: LocalBroker, topics, who, words):
    r = traintrace(role_env(secure_broker, who), "release", "job-a")
    refused_in_one_line(r, "error:", *words)


@pytest.mark.parametrize("who", ["trainer", "operator", "auditor"])
def test_a_worker_run_by_a_role_that_may_not_is_one_line(secure_broker: LocalBroker, topics, tmp_path, who):
    from streams.devtools.broker import pick_free_port

    r = traintrace(role_env(secure_broker, who), "worker", "--store", "memory", "--web-port", str(pick_free_port()),
                   "--data-dir", str(tmp_path / "w"), cwd=tmp_path)
    refused_in_one_line(r, "error:", f"User:{who}", "denied")


def test_watch_by_the_trainer_is_one_line(secure_broker: LocalBroker, topics):
    r = traintrace(role_env(secure_broker, "trainer"), "watch")
    refused_in_one_line(r, "error:", "User:trainer", "topic lineage.alerts")


def test_a_wrong_security_protocol_says_so(secure_broker: LocalBroker, topics):
    bootstrap = secure_broker.status()["bootstrap"]
    plain = traintrace({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}, "plans")
    refused_in_one_line(plain, "error:", "wrong security.protocol?", "the listener speaks TLS")
    ca = dict(KafkaSettings.from_env(env=role_env(secure_broker, "trainer")).properties)["ssl.ca.location"]
    tls_only = traintrace({"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "KAFKA_SECURITY_PROTOCOL": "SSL",
                           "KAFKA_SSL_CA_LOCATION": ca}, "plans")
    refused_in_one_line(tls_only, "error:", "wrong security.protocol?", "the listener speaks SASL_SSL")


# ---------------------------------------------------------------------------------- the job client


def _job(kafka: KafkaSettings, topics: TopicNames, tmp_path: Path, name: str):
    from streams.client import JobClient

    return JobClient(name, "c1", "base-model", journal_dir=tmp_path / name, bootstrap=kafka, topics=topics,
                     follow_control=False, fsync=False)


def _refused_job(client, *words: str) -> str:
    from streams.client import ClientError

    deadline = time.monotonic() + 60
    while client.stats()["kafka_refused"] is None:
        assert time.monotonic() < deadline, client.stats()
        time.sleep(0.1)
    with pytest.raises(ClientError) as info:
        client.flush(30)
    message = str(info.value)
    assert "\n" not in message and "timed out" not in message.lower()
    for word in words:
        assert word in message, message
        assert word in client.stats()["kafka_refused"]
    return message


@pytest.mark.parametrize("who, words", [
    ("auditor", ["User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster", "topic lineage.events"]),
    ("operator", ["User:operator", "WRITE on topic lineage.events"]),
])
def test_a_job_client_of_a_role_that_may_not_write_events_is_refused_in_one_line(role, topics, tmp_path, who,
                                                                                  words):
    c = _job(role(who), topics, tmp_path, who)
    try:
        c.start()
        _refused_job(c, *words)
    finally:
        c.close(0)


def test_a_job_clients_stats_say_authentication_failed(role, topics, tmp_path):
    c = _job(role("trainer", password="wrong"), topics, tmp_path, "bad-password")
    try:
        c.start()
        _refused_job(c, "User:trainer", "authentication failed")
        st = c.stats()
        assert "authentication failed" in st["last_delivery_error"], st
        assert "wrong" not in st["kafka_refused"]  # never the password
    finally:
        c.close(0)


def test_a_plaintext_job_client_at_the_sasl_ssl_listener_says_wrong_protocol(secure_broker: LocalBroker, topics,
                                                                            tmp_path):
    c = _job(KafkaSettings(secure_broker.status()["bootstrap"]), topics, tmp_path, "plain")
    try:
        c.start()
        _refused_job(c, "wrong security.protocol?", "the listener speaks TLS")
    finally:
        c.close(0)


# ---------------------------------------------------------------------------------- the worker


@pytest.mark.parametrize("who, topic, words", [
    ("auditor", "alerts", ["User:auditor", "IDEMPOTENT_WRITE on cluster kafka-cluster", "topic lineage.alerts"]),
    ("operator", "alerts", ["User:operator", "WRITE on topic lineage.alerts"]),
    ("trainer", "control", ["User:trainer", "WRITE on topic lineage.control"]),
])
def test_the_workers_outbox_of_a_role_that_may_not_is_one_line(role, topics, who, topic, words):
    from streams.codec import Codec
    from streams.worker.outbox import Outbox
    from streams.worker.settings import WorkerSettings

    k = role(who)
    outbox = Outbox(WorkerSettings(k.bootstrap, kafka=k), Codec())
    outbox.send(getattr(topics, topic), b"k", b"v", headers=[])
    with pytest.raises(KafkaAuthorizationError) as info:
        asyncio.run(outbox.flush())
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
