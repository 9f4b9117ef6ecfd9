"""``traintrace worker``: run one processor worker (Faust) of the live pipeline."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rich.markup import escape

from streams.cli.common import (
    click_options,
    core_options,
    err_console,
    fail,
    kafka_options,
    kafka_settings,
    topic_prefix_option,
    topics_for,
)

from streams.worker.settings import WORKER_SETTINGS

if TYPE_CHECKING:
    from streams.worker.settings import WorkerSettings


@click.command()
@kafka_options(start_broker=True)
@topic_prefix_option
@click_options(WORKER_SETTINGS)
@click.option("--reset-data-dir", is_flag=True, envvar="TRAINTRACE_RESET_DATA_DIR",
              help="Take over a data directory of another app id (the worker's state is in Kafka). "
                   "[env TRAINTRACE_RESET_DATA_DIR]")
@click.option("--retention-ms", type=click.IntRange(min=-1), envvar="TRAINTRACE_RETENTION_MS", default=-1,
              show_default=True,
              help="Retention of the topics the audit and recovery read (events, by-cohort, control, manifests, "
                   "commitments, dlq) when it creates them; -1 keeps everything. A finite value (if you archive "
                   "with `traintrace export`) is also the least accepted on existing topics. "
                   "[env TRAINTRACE_RETENTION_MS]")
@click.option("--allow-finite-retention", is_flag=True, envvar="TRAINTRACE_ALLOW_FINITE_RETENTION",
              help="Run even when those topics would lose records (finite retention, compaction): warn "
                   "instead of refusing. [env TRAINTRACE_ALLOW_FINITE_RETENTION]")
@click.option("--allow-under-replicated", is_flag=True, envvar="TRAINTRACE_ALLOW_UNDER_REPLICATED",
              help="Run even when a topic has fewer replicas than min(3, brokers), min.insync.replicas below 2 "
                   "with 3 replicas, or unclean leader election on: warn instead of refusing. "
                   "[env TRAINTRACE_ALLOW_UNDER_REPLICATED]")
@click.option("--supervise", is_flag=True, envvar="TRAINTRACE_SUPERVISE",
              help="Restart the worker whenever it dies (it is crash-only: a crash exits with status 70), "
                   "with a backoff of 1 s doubling to 30 s; for hosts without a supervisor of their own "
                   "(Kubernetes, systemd Restart=on-failure restart it themselves). [env TRAINTRACE_SUPERVISE]")
@core_options
def worker(bootstrap, kafka_config, topic_prefix, reset_data_dir, retention_ms, allow_finite_retention,
           allow_under_replicated, supervise, **values) -> None:
    """Run a processor worker: route lineage.events by cohort, fold each cohort through the
    lineage core, publish commands, manifests, alerts and commitments.

    Start several (each with its own --web-port and --data-dir) to spread the partitions.
    Creates the topics it needs, and refuses to run when a topic the audit or recovery reads
    would lose records (finite retention, compaction) unless --allow-finite-retention, or when a
    topic is replicated less safely than the cluster allows unless --allow-under-replicated.
    Stops cleanly on Ctrl-C / SIGTERM.
    """
    from streams.worker.supervise import SUPERVISED_ENV

    if supervise and not os.environ.get(SUPERVISED_ENV):
        from streams.worker.supervise import supervise as run_supervised

        sys.exit(run_supervised([sys.executable, "-m", "streams", *sys.argv[1:]]))
    key_note = _key_note(values["signing_key"])  # fail before starting anything when the key is unusable
    key_note += ", " + _watch_note(values["trusted_keys"])
    if values["store"] == "rocksdb":  # the default store: its library comes with the worker extra
        from streams.cli.extras import fail_missing, missing

        if missing(("rocksdict",)):
            fail_missing("worker --store rocksdb", "worker", ["rocksdict"], alternative="--store memory")
    _check_web_port(values["web_host"], values["web_port"])  # before a broker or the topics are touched
    if retention_ms == 0:
        fail("--retention-ms 0 would delete the audit trail at once: give milliseconds > 0, or -1 to keep everything")
    kafka = kafka_settings(bootstrap, kafka_config, start_broker=True)
    topics = topics_for(topic_prefix)
    from streams.worker.settings import WorkerSettings

    try:
        settings = WorkerSettings.from_values(values, bootstrap=kafka.bootstrap, topics=topics, kafka=kafka)
    except ValueError as exc:  # job keys that do not load
        fail(str(exc))
    _prepare_topics(settings, retention_ms, allow_finite_retention, allow_under_replicated)
    # before the route group's offsets are seeded from the app id's: only once no all-stage worker moves those
    _check_stage_mix(settings)
    _seed_offsets(settings)
    _prepare_data_dir(settings, reset_data_dir)
    stages = "" if settings.stages == "all" else f"{settings.stages} stage only (group {settings.group_id}), "
    err_console.print(f"traintrace worker: Kafka {kafka.bootstrap}, topics {topics.events} -> {topics.control}, {stages}"
                      f"web http://{settings.web_host}:{settings.web_port}, data {settings.data_dir}, {key_note}",
                      highlight=False)
    run_worker(settings)


def _check_web_port(host: str, port: int) -> None:
    """Fail in one line when the HTTP views could not bind ``host:port`` (another worker on that
    port, an address not of this machine), instead of Faust's traceback after the start."""
    import errno
    import socket

    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        fail(f"--web-host {host}: {exc.strerror}; give a name or address of this machine (TRAINTRACE_WEB_HOST)")
    for family, kind, proto, _name, address in addresses:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the web server binds
            try:
                s.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    fail(f"--web-port {port}: {host}:{port} is already in use (another worker on this machine?); "
                         "give each worker its own --web-port (TRAINTRACE_WEB_PORT)")
                fail(f"--web-host {host} --web-port {port}: cannot bind: {exc.strerror} (TRAINTRACE_WEB_HOST, "
                     "TRAINTRACE_WEB_PORT)")


def _key_note(signing_key: Path | None) -> str:
    """What the start-up line says about signing; an unusable key fails."""
    if signing_key is None:
        return "commitments and control UNSIGNED (demo only)"
    from streams.signing import CommitmentSigner, SigningError

    try:
        return f"commitments and control signed by key {CommitmentSigner.from_file(signing_key).key_id}"
    except SigningError as exc:
        fail(str(exc))


def _watch_note(trusted_keys: Path | None) -> str:
    """What the start-up line says about the control sentinel; an unusable keyring fails."""
    if trusted_keys is None:
        return "forged control NOT watched (no --trusted-keys)"
    from streams.cli.common import trusted_keyring

    ring = trusted_keyring(trusted_keys)
    return f"control verified with {len(ring)} trusted key(s) (a forgery raises CONTROL_FORGED)"


def _prepare_topics(settings: "WorkerSettings", retention_ms: int, allow_finite_retention: bool,
                    allow_under_replicated: bool = False) -> None:
    """Create the missing topics, refuse (or warn about) an audit trail that would expire or
    topics replicated less than the cluster allows."""
    from streams.kafka.errors import KafkaAdapterError
    from streams.kafka.topics import (
        FiniteRetentionError,
        UnderReplicatedError,
        check_audit_retention,
        check_replication,
        ensure_topics,
        standard_topics,
    )

    kafka, topics = settings.kafka, settings.topics
    try:
        ensure_topics(kafka, standard_topics(topics, settings.partitions, retention_ms=retention_ms))
        try:  # the audit trail must not expire: refuse a log that would lose records (one line)
            check_audit_retention(kafka, topics, retention_ms)
        except FiniteRetentionError as exc:
            if not allow_finite_retention:
                fail(f"{exc}; or pass --allow-finite-retention [env TRAINTRACE_ALLOW_FINITE_RETENTION=1]")
            for finding in exc.findings:
                err_console.print(f"traintrace worker: warning: {escape(finding.describe())} "
                                  f"(--allow-finite-retention)", highlight=False, soft_wrap=True)
        try:  # one disk must not hold the record where the cluster has more (one line)
            check_replication(kafka, topics)
        except UnderReplicatedError as exc:
            if not allow_under_replicated:
                fail(f"{exc}; or pass --allow-under-replicated [env TRAINTRACE_ALLOW_UNDER_REPLICATED=1]")
            for finding in exc.findings:
                err_console.print(f"traintrace worker: warning: {escape(finding.describe())} "
                                  f"(--allow-under-replicated)", highlight=False, soft_wrap=True)
    except KafkaAdapterError as exc:
        fail(str(exc))


def _seed_offsets(settings: "WorkerSettings") -> None:
    """Give the worker's group an offset on every partition it reads (a new route group: where
    the all-stage workers' group stands)."""
    from streams.kafka.errors import KafkaAdapterError
    from streams.kafka.topics import seed_group_offsets

    topics = settings.topics
    reads = [t for t, yes in ((topics.events, settings.routes), (topics.by_cohort, settings.folds)) if yes]
    try:
        seed_group_offsets(settings.kafka, settings.group_id, reads,
                           like=settings.app_id if settings.group_id != settings.app_id else None)
    except KafkaAdapterError as exc:
        fail(str(exc))


def _check_stage_mix(settings: "WorkerSettings") -> None:
    """Refuse to run beside workers of the other kind of this app id (streams.worker.stagemix)."""
    from streams.worker.stagemix import StageMixError, check_stage_mix

    try:
        check_stage_mix(settings.kafka, settings.stages, settings.app_id, settings.topics)
    except StageMixError as exc:
        fail(str(exc))


def _prepare_data_dir(settings: "WorkerSettings", reset: bool) -> None:
    """Make the data directory, or refuse one of another app id or Kafka log (Faust's
    ConsistencyError) unless ``reset``."""
    from streams.errors import TraintraceError
    from streams.worker.datadir import prepare_data_dir

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        note = prepare_data_dir(settings, reset=reset)
    except TraintraceError as exc:  # DataDirError, or Kafka unreachable while checking
        fail(str(exc))
    if note:
        err_console.print(f"traintrace worker: {escape(note)}", highlight=False, soft_wrap=True)


def run_worker(settings) -> None:
    import faust

    from streams.kafka.quiet import install as quiet_library_logs
    from streams.worker.faust_app import create_app
    from streams.worker.gctune import tune as tune_gc

    os.environ.setdefault("F_DATADIR", str(settings.data_dir))
    tune_gc()
    app = create_app(settings)
    quiet_library_logs()  # aiokafka's repeats under faults: once per 30 s, counted (streams.kafka.quiet)
    w = faust.Worker(app, loglevel=settings.loglevel, redirect_stdouts=False)
    try:
        w.execute_from_commandline()
    finally:
        # Faust ends a crashed app's worker with status 0; a crash must exit non-zero so that a
        # supervisor (Kubernetes, systemd, --supervise) restarts it (streams.worker.supervise)
        reason = app.crash_reason or w.crash_reason
        if reason is not None:
            import logging as _logging

            _logging.getLogger("traintrace.worker").critical("the worker crashed (%r): exiting with status 70 "
                                                             "so that it is restarted", reason)
            _logging.shutdown()
            os._exit(70)
