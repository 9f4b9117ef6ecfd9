"""One settings object for every Kafka client traintrace makes.

:class:`KafkaSettings` holds what every client needs: the bootstrap servers, the client id,
the librdkafka properties every client gets (``security.protocol``, ``sasl.*``, ``ssl.*``: a
secured cluster is configured here, once) and the replication factor of the topics traintrace
creates. Every confluent-kafka ``Producer``, ``Consumer`` and ``AdminClient`` is built by its
methods, and the Faust app's broker options come from :meth:`KafkaSettings.faust_options`, so a
setting made here reaches every client of the process.

From the environment (:meth:`KafkaSettings.from_env`):

==============================  ===============================================================
``KAFKA_BOOTSTRAP_SERVERS``     the bootstrap servers
``TRAINTRACE_CLIENT_ID``        ``client.id`` of every client (default: librdkafka's)
``TRAINTRACE_KAFKA_CONFIG``     a file of librdkafka properties (``key=value`` lines, ``#``
                                comments) every client gets, e.g. ``security.protocol=SASL_SSL``
``TRAINTRACE_REPLICATION_FACTOR`` of the topics traintrace creates (default: the broker's
                                ``default.replication.factor``)
``KAFKA_SECURITY_PROTOCOL``     ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
``KAFKA_SASL_MECHANISM``        SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN
``KAFKA_SASL_USERNAME``, ``KAFKA_SASL_PASSWORD``  the SASL user
``KAFKA_SSL_CA_LOCATION``       the CA (PEM) that signed the brokers' certificates
``KAFKA_SSL_CERTIFICATE_LOCATION``, ``KAFKA_SSL_KEY_LOCATION``, ``KAFKA_SSL_KEY_PASSWORD``
                                the client's certificate and key (mutual TLS)
==============================  ===============================================================

Security settings (:mod:`streams.kafka.security`) are librdkafka properties; the sources, later
winning per key: the properties file, the ``KAFKA_*`` variables, explicit values
(:meth:`KafkaSettings.with_security`). They are checked when the settings are made, and
``repr()`` masks the secrets.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from streams.kafka import security
from streams.kafka.errors import KafkaAdapterError

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
CLIENT_ID_ENV = "TRAINTRACE_CLIENT_ID"
CONFIG_ENV = "TRAINTRACE_KAFKA_CONFIG"
REPLICATION_ENV = "TRAINTRACE_REPLICATION_FACTOR"

# librdkafka's own log lines (e.g. the harmless "Coordinator load in progress: retrying" of a
# fresh broker) go to this logger instead of stderr; TRAINTRACE_KAFKA_DEBUG=1 shows them.
client_logger = logging.getLogger("traintrace.kafka")
if not os.environ.get("TRAINTRACE_KAFKA_DEBUG"):
    client_logger.propagate = False
    client_logger.addHandler(logging.NullHandler())

#: what every producer is: keys land where Faust/aiokafka (Java's default partitioner) put them,
#: idempotent, acknowledged by every in-sync replica; it never has a broker auto-create a topic
#: (one partition, the broker's retention: a job started before any worker got a week-long
#: ``lineage.events``, which the worker then refused; and KAFKA-15591 can lose the first writes
#: to a topic made that way). A record for a missing topic waits and is sent again.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "partitioner": "murmur2_random",
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "lz4",
    "allow.auto.create.topics": False,
}
#: what every consumer is: no auto commit (traintrace commits what it has processed, or nothing),
#: only committed transactions
CONSUMER_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "isolation.level": "read_committed",
}


def read_properties(path: str | os.PathLike[str]) -> tuple[tuple[str, str], ...]:
    """``key=value`` lines of a librdkafka properties file (blank lines and ``#`` comments skipped).
    Raises :class:`KafkaAdapterError` naming the file and line of a bad line."""
    out = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise KafkaAdapterError(f"cannot read the Kafka client properties {path}: {exc.strerror}") from exc
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise KafkaAdapterError(f"{path}:{n}: not a property (want key=value): {line!r}")
        out.append((key.strip(), value.strip()))
    return tuple(out)


@dataclass(frozen=True, repr=False)
class KafkaSettings:
    """What every Kafka client of this process is built from (see the module doc)."""

    bootstrap: str
    #: ``client.id`` of every client; None: librdkafka's default
    client_id: str | None = None
    #: librdkafka properties every client gets (security, timeouts of a remote cluster, ...)
    properties: tuple[tuple[str, str], ...] = ()
    #: replication factor of the topics traintrace creates; None: the broker's default
    replication_factor: int | None = None

    @classmethod
    def from_env(cls, bootstrap: str | None = None, client_id: str | None = None,
                 env: Mapping[str, str] | None = None) -> "KafkaSettings":
        """The settings of the environment (module doc); ``bootstrap``/``client_id`` given win.
        Raises :class:`KafkaAdapterError` for a bad value, naming its variable."""
        env = os.environ if env is None else env
        bootstrap = bootstrap or env.get(BOOTSTRAP_ENV, "").strip()
        if not bootstrap:
            raise KafkaAdapterError(f"no Kafka bootstrap servers: set {BOOTSTRAP_ENV} or pass them")
        props: tuple[tuple[str, str], ...] = ()
        if env.get(CONFIG_ENV, "").strip():
            props = read_properties(env[CONFIG_ENV].strip())
        props = security.merge(props, security.from_env(env))
        security.validate(dict(props), complete=False)
        rf_raw = env.get(REPLICATION_ENV, "").strip()
        rf = None
        if rf_raw:
            if not rf_raw.isdigit() or int(rf_raw) < 1:
                raise KafkaAdapterError(f"{REPLICATION_ENV}={rf_raw!r}: want a whole number >= 1")
            rf = int(rf_raw)
        return cls(bootstrap, client_id or env.get(CLIENT_ID_ENV, "").strip() or None, props, rf)

    @classmethod
    def of(cls, value: "KafkaSettings | str") -> "KafkaSettings":
        """``value`` itself, or for bootstrap servers given as text the settings of the
        environment with those servers (scripts and tests pass a string)."""
        if isinstance(value, KafkaSettings):
            return value
        return cls.from_env(bootstrap=value)

    def with_client_id(self, client_id: str | None) -> "KafkaSettings":
        return replace(self, client_id=client_id)

    def with_security(self, protocol: str | None = None, *, mechanism: str | None = None,
                      username: str | None = None, password: str | None = None, ca: str | None = None,
                      cert: str | None = None, key: str | None = None,
                      key_password: str | None = None) -> "KafkaSettings":
        """These settings with the given security values (None: unchanged), checked."""
        given = {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": username,
                 "sasl.password": password, "ssl.ca.location": ca, "ssl.certificate.location": cert,
                 "ssl.key.location": key, "ssl.key.password": key_password}
        props = security.merge(self.properties, ((k, str(v)) for k, v in given.items() if v is not None))
        security.validate(dict(props), complete=False)
        return replace(self, properties=props)

    @property
    def protocol(self) -> str:
        """``security.protocol`` (PLAINTEXT when unset)."""
        return dict(self.properties).get("security.protocol", "PLAINTEXT").upper()

    @property
    def principal(self) -> str:
        """Who the broker sees (``User:name``), for error messages."""
        return security.principal(dict(self.properties))

    def __repr__(self) -> str:
        return (f"KafkaSettings(bootstrap={self.bootstrap!r}, client_id={self.client_id!r}, "
                f"properties={security.masked(self.properties)!r}, "
                f"replication_factor={self.replication_factor!r})")

    __str__ = __repr__

    def refusal(self, err: BaseException, *, operation: str = "", resource: str = "") -> KafkaAdapterError | None:
        """The one-line error of a refused authentication, handshake or operation (None: not one)."""
        return security.refusal(err, dict(self.properties), self.bootstrap, operation=operation, resource=resource)

    def error_watch(self, on_failure: Callable[[KafkaAdapterError], None] | None = None) -> security.ErrorWatch:
        """An ``error_cb`` keeping the first authentication, TLS or protocol failure
        (:class:`~streams.kafka.security.ErrorWatch`). A client given it as ``error_cb`` also
        gets it as its ``logger`` (it forwards to :data:`client_logger`), which is where
        librdkafka tells a wrong ``security.protocol``."""
        return security.ErrorWatch(dict(self.properties), self.bootstrap, on_failure)

    # ------------------------------------------------------------------ configs

    def common(self) -> dict[str, Any]:
        """What every client gets: servers, client id, the logger, the extra properties.
        Raises :class:`KafkaAdapterError` when the security settings are incomplete."""
        if self.properties:
            security.validate(dict(self.properties))
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": client_logger}
        if self.client_id:
            conf["client.id"] = self.client_id
        conf.update(self.properties)
        return conf

    def producer_config(self, **overrides: Any) -> dict[str, Any]:
        return _watched({**self.common(), **PRODUCER_DEFAULTS, **overrides}, overrides)

    def consumer_config(self, group_id: str, **overrides: Any) -> dict[str, Any]:
        """A consumer's config. ``group_id``: librdkafka wants one even for ``assign()``; a
        group is only joined by ``subscribe()`` and only committed to explicitly."""
        return _watched({**self.common(), "group.id": group_id, **CONSUMER_DEFAULTS, **overrides}, overrides)

    def admin_config(self, **overrides: Any) -> dict[str, Any]:
        return _watched({**self.common(), **overrides}, overrides)

    # ------------------------------------------------------------------ clients

    def producer(self, **overrides: Any) -> Producer:
        return Producer(self.producer_config(**overrides))

    def consumer(self, group_id: str, **overrides: Any) -> Consumer:
        return Consumer(self.consumer_config(group_id, **overrides))

    def admin(self, **overrides: Any) -> AdminClient:
        return AdminClient(self.admin_config(**overrides))

    def faust_options(self) -> dict[str, Any]:
        """The Faust (aiokafka) app options of the same cluster: ``broker``, ``broker_client_id``
        and, on a secured cluster, ``broker_credentials`` (SASL and/or the TLS context)."""
        opts: dict[str, Any] = {"broker": [f"kafka://{b.strip()}" for b in self.bootstrap.split(",") if b.strip()]}
        if self.client_id:
            opts["broker_client_id"] = self.client_id
        credentials = security.faust_credentials(dict(self.properties))
        if credentials is not None:
            opts["broker_credentials"] = credentials
        return opts


def _watched(conf: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` whose ``error_cb`` is an :class:`~streams.kafka.security.ErrorWatch` with the
    watch as its ``logger`` too (unless one was given): it reads the connection failures
    librdkafka only logs (a wrong ``security.protocol``) and forwards every line."""
    if isinstance(conf.get("error_cb"), security.ErrorWatch) and "logger" not in overrides:
        conf["logger"] = conf["error_cb"]
    return conf
