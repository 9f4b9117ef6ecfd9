"""The secure broker of the integration tests, shared by the modules that need one
(``test_secure.py``, ``test_secure_pipeline.py``): a second :class:`LocalBroker` started with
``secure=True`` (SASL_SSL + SCRAM-SHA-512, ACLs enforced) in the module's temporary directory, and
the settings of each role from the properties file the broker wrote for it.

Each module that imports these fixtures gets its own broker (module scope): the modules write to
the default topic names, which the ACLs are granted for, so they must not share one. A start
costs ~6 s on a 2-core machine.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

from streams.devtools.broker import BrokerError, JavaMissing, LocalBroker, MavenMissing
from streams.kafka.settings import KafkaSettings


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory):
    broker = LocalBroker(tmp_path_factory.mktemp("secure-broker"), secure=True, die_with_parent=True)
    try:
        broker.start(timeout=float(os.environ.get("TRAINTRACE_BROKER_TIMEOUT", "90")))
    except (JavaMissing, MavenMissing) as exc:
        pytest.skip(f"no Kafka broker for the secure tests: {exc}")
    except BrokerError as exc:
        pytest.fail(f"could not start the secure broker: {exc}\n{exc.detail or ''}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop(timeout=30)


def role_env(broker: LocalBroker, name: str) -> dict[str, str]:
    """The environment of a process (worker, CLI) acting as role ``name`` on ``broker``."""
    st = broker.status()
    return {"KAFKA_BOOTSTRAP_SERVERS": st["bootstrap"], "TRAINTRACE_KAFKA_CONFIG": st["client_properties"][name]}


@pytest.fixture(scope="module")
def role(secure_broker: LocalBroker) -> Callable[..., KafkaSettings]:
    """``role(name, **security)``: the settings of role ``name`` (admin, trainer, processor,
    operator, auditor), with ``security`` (``KafkaSettings.with_security``) changed."""

    def make(name: str, **security: Any) -> KafkaSettings:
        k = KafkaSettings.from_env(env=role_env(secure_broker, name))
        return k.with_security(**security) if security else k

    return make
