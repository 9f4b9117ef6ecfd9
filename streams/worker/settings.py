"""Settings of a processor worker (flags and ``TRAINTRACE_*`` environment)."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams.core.state import Config
from streams.kafka.settings import BOOTSTRAP_ENV, KafkaSettings
from streams.kafka.topics import TopicNames
from streams.options import CORE_SETTINGS, JOB_KEYS, Setting, core_config, read_env
from streams.signing import SIGNING_KEY_ENV, TRUSTED_KEYS_ENV


#: the worker's settings, declared once: ``traintrace worker``'s options are made of them
#: (``streams.cli.common.click_options``), and so is :meth:`WorkerSettings.from_env`
APP_ID = Setting("--app-id", "TRAINTRACE_APP_ID", str, "traintrace",
                 "Faust application id: the workers' consumer group, the prefix of their internal topics.")
#: SPEC §13: the settle horizon of every cohort (``traintrace retention`` takes the same setting)
SETTLE_HORIZON = Setting("--settle-horizon", "TRAINTRACE_SETTLE_HORIZON", float, None,
                         "The settle horizon H of SPEC §13, in seconds of event time: the promise that nothing bearing "
                         "on a checkpoint's status arrives more than H late. With it the referee tells each job which "
                         "checkpoints it may delete (RetentionNotice on lineage.control); without it every checkpoint "
                         "is pinned.", minimum=0, metavar="SECONDS", default_text="none: keep everything")
COHORT_HORIZONS = Setting("--cohort-settle-horizons", "TRAINTRACE_COHORT_SETTLE_HORIZONS", str, "",
                          "Per-cohort settle horizons that override --settle-horizon: COHORT=SECONDS[,COHORT=SECONDS...] "
                          "(SECONDS 'none': that cohort keeps everything).", metavar="C=S,...")
WORKER_SETTINGS: tuple[Setting, ...] = (
    APP_ID,
    Setting("--partitions", "TRAINTRACE_PARTITIONS", int, 8, "Partitions of the topics it creates.", minimum=1),
    Setting("--data-dir", "TRAINTRACE_WORKER_DIR", Path, None,
            "This worker's own data directory (RocksDB tables); one per worker.",
            path=(("file_okay", False),), default_text=".traintrace/worker-<web port>"),
    Setting("--store", "TRAINTRACE_STORE", ("rocksdb", "memory"), "rocksdb", "Table store."),
    Setting("--web-port", "TRAINTRACE_WEB_PORT", int, 6066, "Port of the HTTP views and /metrics.",
            minimum=1, maximum=65535),
    Setting("--web-host", "TRAINTRACE_WEB_HOST", str, "127.0.0.1", "Address the HTTP views bind to."),
    Setting("--grace-seconds", "TRAINTRACE_GRACE_SECONDS", float, 30.0,
            "How long a consumed checkpoint may stay unrecorded before its job is halted.", minimum=0),
    Setting("--ack-timeout", "TRAINTRACE_ACK_TIMEOUT", float, 300.0,
            "Seconds before an unacknowledged command raises an alert.", minimum=0),
    Setting("--commitment-interval", "TRAINTRACE_COMMITMENT_INTERVAL", float, 10.0,
            "Seconds between LineageCommitments of a changed cohort.", minimum=0.1),
    Setting("--commit-interval", "TRAINTRACE_COMMIT_INTERVAL", float, 1.0, "Seconds between offset commits.",
            minimum=0.05),
    Setting("--session-timeout", "TRAINTRACE_SESSION_TIMEOUT", float, 10.0,
            "Kafka group session timeout in seconds: how long a dead worker's partitions wait before another "
            "worker takes them over.", minimum=1.0),
    Setting("--loglevel", "TRAINTRACE_LOGLEVEL", ("crit", "error", "warn", "info", "debug"), "info", "Log level."),
    Setting("--signing-key", SIGNING_KEY_ENV, Path, None,
            "Ed25519 private key (PEM, from `traintrace keygen`) to sign every LineageCommitment and every "
            "lineage.control record with; unsigned without it (job clients with trusted keys then obey "
            "nothing).", metavar="FILE", path=(("dir_okay", False),)),
    Setting("--log-origin", "TRAINTRACE_LOG_ORIGIN", str, "",
            "With --signing-key: each commitment also carries its cohort's fold log as a C2SP checkpoint "
            "(origin <this>/<cohort>) signed as a C2SP signed note under the note key name <this>, which "
            "standard transparency tools and witnesses verify; 'none': no checkpoint notes "
            "[default: traintrace.local/<app id>].",
            metavar="ORIGIN"),
    Setting("--trusted-keys", TRUSTED_KEYS_ENV, Path, None,
            "The keyring the job clients verify control with (processor/ and operator/ public keys): every "
            "lineage.control record that does not verify under it raises a CONTROL_FORGED alert on "
            "lineage.alerts (this worker's own --signing-key is trusted besides); without it forged control "
            "is not watched.", metavar="DIR|FILE", path=(("exists", True),)),
    Setting("--snapshot-every", "TRAINTRACE_SNAPSHOT_EVERY", int, 20_000,
            "Snapshot a partition's changed cohorts to lineage.snapshots once this many events were folded "
            "there since the last round (0: never); a worker taking the partition over loads them and "
            "re-folds only what came after.", minimum=0),
    Setting("--snapshot-interval", "TRAINTRACE_SNAPSHOT_INTERVAL", float, 60.0,
            "...or this many seconds after the last round, when anything was folded since.", minimum=0.1),
    Setting("--evict-settled", "TRAINTRACE_EVICT_SETTLED", bool, True,
            "Let a settled cohort (every job finished, every plan acknowledged) leave memory after its "
            "snapshot until its next event: memory then follows the active cohorts (the HTTP views /jobs, "
            "/incidents, /plans show it from the rows kept when it left) [default: on].",
            negative="--keep-settled"),
    Setting("--evict-idle", "TRAINTRACE_EVICT_IDLE", bool, True,
            "Let a cohort that had no input for a whole snapshot round leave memory too, though its jobs have "
            "not finished, when nothing waits on the clock (no event held for a seal, no consumption waiting "
            "for its source, no retention decision to come under a settle horizon; an unacknowledged command "
            "still alerts): back from its snapshot at its next event. A worker's memory then follows the "
            "cohorts that train, not every cohort that ever did [default: on].", negative="--keep-idle"),
    Setting("--evict-idle-after", "TRAINTRACE_EVICT_IDLE_AFTER", float, 30.0,
            "...and only once it has had no input for this many seconds since the round that wrote its last "
            "input, or while the worker folded twice the events it holds (at least --snapshot-every; a "
            "backlog does not keep every cohort it passes; one quiet that long before the round that writes "
            "it leaves after that round, which comes early when it lets as much go as it writes): a cohort whose input comes in bursts further apart is brought back (one "
            "read of its snapshot) at most once per this interval or that much input. A partition with no input "
            "for this many seconds, or while the worker folded twice the events of its largest cohort, writes its "
            "last input then and lets its quiescent cohorts go.", minimum=0),
    Setting("--watchdog-seconds", "TRAINTRACE_WATCHDOG_SECONDS", float, 180.0,
            "Exit with status 70 (stacks dumped) when records wait on an owned partition and none was "
            "processed for this long while every dependency answers, or when the event loop stops turning: "
            "a wedged worker is restarted by its supervisor; 0: off.", minimum=0),
    SETTLE_HORIZON,
    COHORT_HORIZONS,
    Setting("--route-feed", "TRAINTRACE_ROUTE_FEED", ("direct", "faust"), "direct",
            "How the route stage gets the records of lineage.events: direct, in batches from a consumer of its own "
            "(Faust keeps the group and the assignment, its fetch of those partitions paused), or faust, one by one "
            "through Faust's stream (streams.worker.feed)."),
    Setting("--fold-feed", "TRAINTRACE_FOLD_FEED", ("direct", "faust"), "direct",
            "How the fold stage gets the records of lineage.by-cohort: direct, in batches from a consumer of its own "
            "(as --route-feed), or faust, through Faust's stream (its records are batches of events already)."),
    Setting("--stages", "TRAINTRACE_STAGES", ("all", "route", "fold"), "all",
            "Which stages this worker runs: all (route lineage.events and fold lineage.by-cohort, in one "
            "process), or route / fold only, so that a deployment runs the two stages in processes of their own "
            "(a core each: docs/pipeline.md). Route workers are their own group (APP_ID-route); fold workers keep "
            "the group APP_ID. Give every worker of one app id 'all', or each one 'route' or 'fold', never both "
            "kinds: a route group and all-stage workers would both route every event."),
    Setting("--verify-rebuilds", "TRAINTRACE_VERIFY_REBUILDS", bool, False,
            "Check every state put together from snapshots (a takeover, a partition back untouched, a cohort "
            "back in memory, each snapshot written) against a re-fold of its partition from offset 0, job by job; "
            "a difference is logged CRITICAL and counted. Re-reads whole partitions: for tests and "
            "investigations [default: off]."),
    Setting("--retention-interval", "TRAINTRACE_RETENTION_INTERVAL", float, 5.0,
            "With a settle horizon: at most one retention decision per cohort this often (seconds of the input "
            "watermark), each a clock tick in the cohort's input so that replays and audits decide the same.",
            minimum=0.1),
)


def route_group(app_id: str) -> str:
    """The consumer group of the route-only workers (``--stages route``) of ``app_id``."""
    return f"{app_id}-route"


def parse_cohort_horizons(text: str) -> dict[str, int | None]:
    """``c1=600,c2=none`` -> ``{"c1": 600000, "c2": None}`` (ms); ValueError naming the bad item."""
    out: dict[str, int | None] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        cohort, sep, secs = item.partition("=")
        if not sep or not cohort.strip():
            raise ValueError(f"{item!r} is not COHORT=SECONDS")
        secs = secs.strip()
        if secs.lower() == "none":
            out[cohort.strip()] = None
            continue
        try:
            value = float(secs)
        except ValueError:
            raise ValueError(f"{item!r}: {secs!r} is not a number of seconds") from None
        if not value >= 0:
            raise ValueError(f"{item!r}: the horizon must be 0 or more seconds")
        out[cohort.strip()] = int(value * 1000)
    return out

#: where ``WorkerSettings.from_env`` looks when KAFKA_BOOTSTRAP_SERVERS is not set (and no
#: other default is given): the Docker broker's address
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
    #: settled cohorts leave memory after their snapshot (the HTTP views show them from streams.worker.resting)
    evict_settled: bool = True
    #: ...and so do cohorts with no input for a whole round and nothing waiting on the clock
    evict_idle: bool = True
    #: ...once seen without input at rounds for this long (seconds)
    evict_idle_after_s: float = 30.0
    #: Faust: how often offsets are committed
    commit_interval_s: float = 1.0
    #: Kafka group session timeout: how fast a dead worker's partitions move
    session_timeout_s: float = 10.0
    #: the watchdog (streams.worker.health): exit 70 when records wait and none was processed for
    #: this long while every dependency answers, or the event loop stops turning; 0: off
    watchdog_s: float = 180.0
    #: SPEC §13: the settle horizon (ms; None: every checkpoint pinned), per-cohort overrides,
    #: and how often (s of the input watermark) a cohort gets a retention decision at most
    settle_horizon_ms: int | None = None
    cohort_horizons_ms: dict[str, int | None] = field(default_factory=dict)
    retention_interval_s: float = 5.0
    #: the route stage's records: "direct" (streams.worker.feed) or "faust" (its stream)
    route_feed: str = "direct"
    #: the fold stage's records, likewise (direct: ×1.1 measured once the events were read by hand,
    #: docs/benchmarks.md)
    fold_feed: str = "direct"
    #: the stages this worker runs: "all", "route" or "fold" (--stages; the consumer group: :attr:`group_id`)
    stages: str = "all"
    #: --verify-rebuilds (streams.worker.verify): states made from snapshots checked against a re-fold
    verify_rebuilds: bool = False
    #: batching of the agents (Stream.take_events)
    batch_max: int = 2000
    batch_within_s: float = 0.01
    loglevel: str = "info"
    #: Ed25519 private key (PEM) the LineageCommitments are signed with; None: unsigned
    #: (``--signing-key`` / ``TRAINTRACE_SIGNING_KEY``; see docs/keys-and-proofs.md)
    signing_key: Path | None = None
    #: the origin prefix of the cohorts' fold logs as C2SP checkpoints (``<prefix>/<cohort>``) and
    #: the name of the processor's note key; empty: ``traintrace.local/<app_id>``
    log_origin: str = ""
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
        if not self.log_origin:
            self.log_origin = f"traintrace.local/{self.app_id}"
        self.log_origin = self.log_origin.rstrip("/")
        if self.log_origin.lower() == "none":
            self.log_origin = "none"  # no checkpoint notes (the signer's log origin: None)
        elif not self.log_origin or "+" in self.log_origin or any(c.isspace() for c in self.log_origin):
            raise ValueError(f"--log-origin / TRAINTRACE_LOG_ORIGIN {self.log_origin!r}: a note key name, "
                             "without spaces or '+' (e.g. traintrace.example/prod)")
        if not self.client_id:
            self.client_id = kafka_client_id(socket.gethostname(), self.web_port)
        if self.kafka is None:
            self.kafka = KafkaSettings.from_env(bootstrap=self.bootstrap, client_id=self.client_id)
        elif self.kafka.client_id is None:
            self.kafka = self.kafka.with_client_id(self.client_id)

    @property
    def routes(self) -> bool:
        """Whether this worker runs the route stage (lineage.events -> lineage.by-cohort)."""
        return self.stages in ("all", "route")

    @property
    def folds(self) -> bool:
        """Whether this worker runs the fold stage (lineage.by-cohort through the referee)."""
        return self.stages in ("all", "fold")

    @property
    def all_fed(self) -> bool:
        """Whether every input this worker's Faust consumer subscribes to is read by a feed
        (:mod:`streams.worker.feed`): then Faust only keeps the group, and whatever its consumer
        fetches is skipped (:data:`streams.worker.faust_app.FAUST_FETCH_BYTES_FED`)."""
        return (not self.routes or self.route_feed == "direct") and (not self.folds or self.fold_feed == "direct")

    @property
    def group_id(self) -> str:
        """The consumer group of this worker's inputs (Faust's app id): :func:`route_group` of the
        app id for a route-only worker, the app id otherwise."""
        return route_group(self.app_id) if self.stages == "route" else self.app_id

    @property
    def routing_group(self) -> str:
        """The group whose committed ``lineage.events`` offsets say how far the input is routed
        (the input watermark's, :mod:`streams.worker.clock`): the app id's when this worker's
        kind routes too, the route group's when the stages run apart."""
        return self.app_id if self.stages == "all" else route_group(self.app_id)

    def horizon_of(self, cohort: str) -> int | None:
        """The settle horizon of ``cohort`` (ms), its override first; None: keep everything."""
        if cohort in self.cohort_horizons_ms:
            return self.cohort_horizons_ms[cohort]
        return self.settle_horizon_ms

    @property
    def retention_on(self) -> bool:
        return self.settle_horizon_ms is not None or any(h is not None for h in self.cohort_horizons_ms.values())

    @classmethod
    def from_values(cls, values: Mapping[str, Any], *, bootstrap: str, topics: TopicNames,
                    kafka: KafkaSettings | None = None) -> "WorkerSettings":
        """The settings of the values of :data:`WORKER_SETTINGS` and
        :data:`~streams.options.CORE_SETTINGS` (by name), however they were read: the command
        line's options (``traintrace worker``) or an environment (:meth:`from_env`).
        ValueError when ``--job-keys`` do not load."""
        web_port = values["web_port"]
        try:
            cohort_horizons = parse_cohort_horizons(values["cohort_settle_horizons"] or "")
        except ValueError as exc:
            raise ValueError(f"{COHORT_HORIZONS.flag} / {COHORT_HORIZONS.env}: {exc}") from None
        horizon = values["settle_horizon"]
        return cls(
            bootstrap=bootstrap, topics=topics, app_id=values["app_id"], partitions=values["partitions"],
            data_dir=values["data_dir"] or Path(f".traintrace/worker-{web_port}"),
            store=f"{values['store']}://", web_host=values["web_host"], web_port=web_port,
            core=core_config(values),
            grace_ms=int(values["grace_seconds"] * 1000), ack_timeout_ms=int(values["ack_timeout"] * 1000),
            commitment_interval_s=values["commitment_interval"], commit_interval_s=values["commit_interval"],
            session_timeout_s=values["session_timeout"], watchdog_s=values["watchdog_seconds"],
            loglevel=values["loglevel"], signing_key=values["signing_key"], trusted_keys=values["trusted_keys"],
            log_origin=values["log_origin"], snapshot_every=values["snapshot_every"], snapshot_interval_s=values["snapshot_interval"],
            evict_settled=values["evict_settled"], evict_idle=values["evict_idle"],
            evict_idle_after_s=values["evict_idle_after"], kafka=kafka,
            settle_horizon_ms=None if horizon is None else int(horizon * 1000),
            cohort_horizons_ms=cohort_horizons, retention_interval_s=values["retention_interval"],
            route_feed=values["route_feed"], fold_feed=values["fold_feed"],
            verify_rebuilds=values["verify_rebuilds"], stages=values["stages"],
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 default_bootstrap: str = FALLBACK_BOOTSTRAP) -> "WorkerSettings":
        """The settings ``traintrace worker`` takes without flags, from the same variables
        (``env``, the process's environment by default: pass it from an entry point) and with the
        same defaults (one declaration: :data:`WORKER_SETTINGS`). Starts nothing: without
        ``KAFKA_BOOTSTRAP_SERVERS`` the bootstrap is ``default_bootstrap`` (an entry point may
        pass the local broker's, ``streams.devtools.broker.running_bootstrap``). An invalid
        value raises ValueError naming its variable."""
        env = os.environ if env is None else env
        values = read_env(WORKER_SETTINGS + CORE_SETTINGS, env)
        bootstrap = env.get(BOOTSTRAP_ENV) or default_bootstrap
        web_port = values["web_port"]
        client_id = kafka_client_id(socket.gethostname(), web_port)
        try:
            return cls.from_values(values, bootstrap=bootstrap, topics=TopicNames.from_env(env=env),
                                   kafka=KafkaSettings.from_env(bootstrap=bootstrap, client_id=client_id, env=env))
        except ValueError as exc:  # the job keys: name the variable they came from
            if str(exc).startswith(COHORT_HORIZONS.flag):
                raise
            raise ValueError(f"{JOB_KEYS.env}: {exc}") from None
