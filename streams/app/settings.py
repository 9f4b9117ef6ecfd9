"""Settings of a processor worker (flags and ``TRAINTRACE_*`` environment)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from streams.adapters.kafka import TopicNames
from streams.core.state import Config


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
    #: Faust: how often offsets are committed
    commit_interval_s: float = 1.0
    #: Kafka group session timeout: how fast a dead worker's partitions move
    session_timeout_s: float = 10.0
    #: batching of the agents (Stream.take_events)
    batch_max: int = 2000
    batch_within_s: float = 0.01
    loglevel: str = "info"
    #: Ed25519 private key (PEM) the LineageCommitments are signed with; None: unsigned
    #: (``--signing-key`` / ``TRAINTRACE_SIGNING_KEY``; see docs/keys-and-proofs.md)
    signing_key: Path | None = None
