"""Fixtures for tests against a real Kafka broker.

``kafka_bootstrap`` uses ``KAFKA_BOOTSTRAP_SERVERS`` when it is set; otherwise it starts one
:class:`streams.devtools.broker.LocalBroker` (a real Apache Kafka 4.x KRaft node on 127.0.0.1)
in the session's temporary directory and stops it when the session ends. Without Java 17+ (or,
on the very first run, Maven) those tests are skipped with the reason.

Every test collected under ``tests/integration`` is marked ``integration``.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.devtools.broker import BrokerError, JavaMissing, LocalBroker, MavenMissing
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import ensure_topics
from tests.integration.frameworks import lineage_cohort  # noqa: F401 - the framework tests' fixture

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items, so only touch the ones under this directory.
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers of a running broker: ``KAFKA_BOOTSTRAP_SERVERS`` or a session LocalBroker."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        yield external
        return
    keep = bool(os.environ.get("TRAINTRACE_KEEP_BROKER"))  # debugging: inspect the topics afterwards
    broker = LocalBroker(tmp_path_factory.mktemp("kafka-broker"), die_with_parent=not keep)
    try:
        bootstrap = broker.start(timeout=float(os.environ.get("TRAINTRACE_BROKER_TIMEOUT", "90")))
    except (JavaMissing, MavenMissing) as exc:
        pytest.skip(f"no Kafka broker for integration tests: {exc}")
    except BrokerError as exc:
        pytest.fail(f"could not start the test broker: {exc}\n{exc.detail or ''}", pytrace=False)
    try:
        yield bootstrap
    finally:
        if keep:
            with open(os.environ["TRAINTRACE_KEEP_BROKER"], "w") as fh:
                fh.write(f"{bootstrap} {broker.data_dir}\n")
        else:
            broker.stop(timeout=30)


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> Any:
    """A confluent-kafka ``AdminClient`` on the session broker."""
    return KafkaSettings.of(kafka_bootstrap).admin()


@pytest.fixture
def topic_factory(kafka_bootstrap: str, kafka_admin: Any) -> Iterator[Callable[..., str]]:
    """``make(partitions=1, config=None, prefix="t") -> name``: a fresh topic, ready to use.

    Topics are named ``<prefix>-<uuid hex>``, created with replication factor 1 by
    :func:`~streams.kafka.topics.ensure_topics` (which returns once every partition is open on its
    leader) and deleted (best effort) when the test ends.
    """
    kafka = dataclasses.replace(KafkaSettings.of(kafka_bootstrap), replication_factor=1)
    created: list[str] = []

    def make(partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex}"
        ensure_topics(kafka, [(name, partitions, {k: str(v) for k, v in (config or {}).items()})])
        created.append(name)
        return name

    yield make

    if created:
        try:
            for fut in kafka_admin.delete_topics(created, operation_timeout=30).values():
                try:
                    fut.result(timeout=30)
                except Exception:
                    pass
        except Exception:
            pass


@pytest.fixture
def group_factory() -> Callable[..., str]:
    """``make(prefix="g") -> str``: a fresh consumer group id on every call."""

    def make(prefix: str = "g") -> str:
        return f"{prefix}-{uuid.uuid4().hex}"

    return make


@pytest.fixture
def group_id(group_factory: Callable[..., str]) -> str:
    """A fresh consumer group id."""
    return group_factory()


@pytest.fixture
def pipeline(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make(workers=2, partitions=4, extra_args=()) -> (topics, app_id, workers)``: fresh
    topics under a new prefix, a new app id and N running worker processes (killed at the end)."""
    from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
    from streams.devtools.worker_process import WorkerProcess

    started: list[WorkerProcess] = []

    def make(workers: int = 2, partitions: int = 4, extra_args=()):
        prefix = f"it{uuid.uuid4().hex[:8]}."
        topics = TopicNames.from_env(prefix)
        ensure_topics(kafka_bootstrap, standard_topics(topics, partitions))
        app_id = f"tt-{prefix.rstrip('.')}"
        procs = []
        for i in range(workers):
            w = WorkerProcess(kafka_bootstrap, prefix, app_id, tmp_path / f"worker{i}", partitions,
                              extra_args=["--commit-interval", "0.2", "--grace-seconds", "4",
                                          "--snapshot-interval", "0.5", "--loglevel", "info",
                                          *extra_args]).start()
            procs.append(w)
            started.append(w)
        for w in procs:
            w.wait_ready()
        return topics, app_id, procs

    yield make
    for w in started:
        w.kill()
