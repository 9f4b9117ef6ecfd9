"""Settings of a processor worker (flags and ``TRAINTRACE_*`` environment)."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from streams.kafka.settings import BOOTSTRAP_ENV, KafkaSettings
from streams.kafka.topics import TopicNames
from streams.core.seals import SealPolicy
from streams.core.state import Config

#: where ``WorkerSettings.from_env`` looks when neither KAFKA_BOOTSTRAP_SERVERS is set nor the
#: local broker (``traintrace broker start``) runs: the Docker broker's address
FALLBACK_BOOTSTRAP = "localhost:9092"


def kafka_client_id(host: str, web_port: int) -> str:
    """``traintrace-<host>-<web port>``: one per worker (a host runs each worker on its own
    web port), in the characters Kafka allows in a client id (quotas, metrics)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"traintrace-{host}-{web_port}")


#: how long a takeover (reading back lineage.control, the by-cohort input and the snapshots of a
#: partition it was assigned) waits for the broker before it gives up and the worker exits to be
#: restarted: a stalled broker or network plus TCP's retransmission backoff after it can make
#: the brokers silent for a minute (the fault suite's 25 s network blackhole)
TAKEOVER_PATIENCE_S = 120.0


@dataclass
class WorkerSettings:
    bootstrap: str
    topics: TopicNames = field(default_factory=TopicNames.from_env)
    app_id: str = "traintrace"
    partitions: int = 8
    data_dir: Path = Path(".traintrace/worker")
    store: str = "rocksdb://"
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    web_enabled: bool = True
    core: Config = field(default_factory=Config)
    #: SPEC §8: how long a consumed checkpoint may stay unrecorded before the job is halted
    grace_ms: int = 30_000
    #: how long a rollback command may stay unacknowledged before an alert
    ack_timeout_ms: int = 300_000
    #: how often a LineageCommitment is published per changed cohort
    commitment_interval_s: float = 10.0
    #: snapshots (streams.worker.snapshots): a round of a partition once this many events were
    #: folded there since its last one (0: no snapshots), or every ``snapshot_interval_s`` with any
    snapshot_every: int = 20_000
    snapshot_interval_s: float = 60.0
    #: settled cohorts leave memory after their snapshot (the HTTP views then show only those in memory)
    evict_settled: bool = False
    #: Faust: how often offsets are committed
    commit_interval_s: float = 1.0
    #: Kafka group session timeout: how fast a dead worker's partitions move
    session_timeout_s: float = 10.0
    #: the watchdog (streams.worker.health): exit 70 when records wait and none was processed for
    #: this long while every dependency answers, or the event loop stops turning; 0: off
    watchdog_s: float = 180.0
    #: batching of the agents (Stream.take_events)
    batch_max: int = 2000
    batch_within_s: float = 0.01
    loglevel: str = "info"
    #: Ed25519 private key (PEM) the LineageCommitments are signed with; None: unsigned
    #: (``--signing-key`` / ``TRAINTRACE_SIGNING_KEY``; see docs/keys-and-proofs.md)
    signing_key: Path | None = None
    #: the keyring (a directory as ``traintrace keygen`` lays it out, or one key file) every
    #: lineage.control record is verified with by the control sentinel (streams.worker.sentinel):
    #: a record that does not verify raises a CONTROL_FORGED alert; None: not watched
    #: (``--trusted-keys`` / ``TRAINTRACE_TRUSTED_KEYS``, the job clients' keyring)
    trusted_keys: Path | None = None
    #: Kafka client id of this worker: ``client.id`` of its confluent-kafka clients and Faust's
    #: ``broker_client_id``; empty: ``traintrace-<host name>-<web port>``
    client_id: str = ""
    #: what every Kafka client of the worker (confluent-kafka and Faust) is built from; None:
    #: ``bootstrap`` and ``client_id`` with the environment's other settings
    #: (``KafkaSettings.from_env``: ``TRAINTRACE_KAFKA_CONFIG``, ...)
    kafka: KafkaSettings | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.client_id:
            self.client_id = kafka_client_id(socket.gethostname(), self.web_port)
        if self.kafka is None:
            self.kafka = KafkaSettings.from_env(bootstrap=self.bootstrap, client_id=self.client_id)
        elif self.kafka.client_id is None:
            self.kafka = self.kafka.with_client_id(self.client_id)

    @classmethod
    def from_env(cls) -> "WorkerSettings":
        """The settings ``traintrace worker`` takes without flags, from the same variables and
        with the same defaults (see ``traintrace worker --help``). Starts nothing: without
        ``KAFKA_BOOTSTRAP_SERVERS`` the bootstrap is the local broker's if it runs, else
        ``localhost:9092``. An invalid value raises ValueError naming its variable."""
        env = os.environ

        def get(name: str, conv, default):
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                return conv(raw)
            except ValueError as exc:
                raise ValueError(f"{name}={raw!r}: {exc}") from None

        def positive(conv, minimum):
            def parse(raw: str):
                value = conv(raw)
                if value < minimum:
                    raise ValueError(f"must be >= {minimum}")
                return value
            return parse

        def choice(*allowed: str):
            def parse(raw: str) -> str:
                if raw not in allowed:
                    raise ValueError(f"must be one of {', '.join(allowed)}")
                return raw
            return parse

        web_port = get("TRAINTRACE_WEB_PORT", positive(int, 1), 6066)
        if web_port > 65535:
            raise ValueError(f"TRAINTRACE_WEB_PORT={web_port}: must be <= 65535")
        signing_key = get("TRAINTRACE_SIGNING_KEY", Path, None)
        return cls(
            bootstrap=env.get(BOOTSTRAP_ENV) or _local_bootstrap() or FALLBACK_BOOTSTRAP,
            topics=TopicNames.from_env(env.get("TRAINTRACE_TOPIC_PREFIX", "")),
            app_id=env.get("TRAINTRACE_APP_ID") or "traintrace",
            partitions=get("TRAINTRACE_PARTITIONS", positive(int, 1), 8),
            data_dir=get("TRAINTRACE_WORKER_DIR", Path, Path(f".traintrace/worker-{web_port}")),
            store=get("TRAINTRACE_STORE", choice("rocksdb", "memory"), "rocksdb") + "://",
            web_host=env.get("TRAINTRACE_WEB_HOST") or "127.0.0.1",
            web_port=web_port,
            core=Config(window=get("TRAINTRACE_WINDOW", positive(int, 1), 10),
                        spike_factor=get("TRAINTRACE_SPIKE_FACTOR", float, 3.0),
                        taint_margin=get("TRAINTRACE_TAINT_MARGIN", positive(int, 0), 0),
                        seals=SealPolicy(require_sealed=get("TRAINTRACE_REQUIRE_SEALED_EVENTS", _flag, False),
                                         issued_keys=get("TRAINTRACE_JOB_KEYS", _job_keys, frozenset()))),
            grace_ms=int(get("TRAINTRACE_GRACE_SECONDS", positive(float, 0), 30.0) * 1000),
            ack_timeout_ms=int(get("TRAINTRACE_ACK_TIMEOUT", positive(float, 0), 300.0) * 1000),
            commitment_interval_s=get("TRAINTRACE_COMMITMENT_INTERVAL", positive(float, 0.1), 10.0),
            commit_interval_s=get("TRAINTRACE_COMMIT_INTERVAL", positive(float, 0.05), 1.0),
            session_timeout_s=get("TRAINTRACE_SESSION_TIMEOUT", positive(float, 1.0), 10.0),
            watchdog_s=get("TRAINTRACE_WATCHDOG_SECONDS", positive(float, 0), 180.0),
            loglevel=get("TRAINTRACE_LOGLEVEL", choice("crit", "error", "warn", "info", "debug"), "info"),
            signing_key=signing_key,
            trusted_keys=get("TRAINTRACE_TRUSTED_KEYS", Path, None),
            snapshot_every=get("TRAINTRACE_SNAPSHOT_EVERY", positive(int, 0), 20_000),
            snapshot_interval_s=get("TRAINTRACE_SNAPSHOT_INTERVAL", positive(float, 0.1), 60.0),
            evict_settled=get("TRAINTRACE_EVICT_SETTLED", _flag, False),
        )


def _flag(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be one of 1, true, yes, on, 0, false, no, off")


def _job_keys(raw: str) -> frozenset[str]:
    from streams.signing import SigningError, issued_job_keys

    try:
        return issued_job_keys(raw)
    except SigningError as exc:
        raise ValueError(str(exc)) from exc


def _local_bootstrap() -> str | None:
    """The bootstrap of the local broker (``traintrace broker start``) if it runs; never starts it."""
    try:
        from streams.kafka.broker import LocalBroker, default_data_dir

        return LocalBroker(default_data_dir()).status().get("bootstrap")
    except Exception:  # noqa: BLE001 - no local broker record: not an error here
        return None
