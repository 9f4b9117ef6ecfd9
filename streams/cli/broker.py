"""``traintrace broker``: run a real Apache Kafka 4.x broker locally (one KRaft node, 127.0.0.1),
or a cluster of them (``--nodes 3``: :class:`streams.devtools.cluster.LocalCluster`).

Thin: everything happens in :mod:`streams.devtools.broker` and :mod:`streams.devtools.cluster`; this module only parses flags,
shows progress and turns :class:`~streams.devtools.broker.BrokerError` into a one-line message
on stderr with exit status 2.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from streams.cli.common import fail
from streams.devtools import broker as lib
from streams.devtools import cluster as cluster_lib

F = TypeVar("F", bound=Callable[..., Any])

_out = Console(soft_wrap=True, highlight=False)
_err = Console(stderr=True, soft_wrap=True, highlight=False)


def _errors(fn: F) -> F:
    """Turn library errors into one line on stderr and exit status 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except lib.BrokerError as exc:
            fail(" ".join(str(exc).split()), command="broker")
        except KeyboardInterrupt:
            click.echo("traintrace broker: interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def _emit_json(payload: dict[str, Any]) -> None:
    click.echo(json.dumps(payload, indent=2, sort_keys=True))


def _data_dir_option(fn: F) -> F:
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="TRAINTRACE_BROKER_DIR",
        show_envvar=True,
        default=None,
        help="Broker state directory [default: ./.traintrace/broker].",
    )(fn)


def _docker_options(fn: F) -> F:
    fn = click.option(
        "--compose-file",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="TRAINTRACE_COMPOSE_FILE",
        show_envvar=True,
        default="docker-compose.yml",
        show_default=True,
        help="Compose file used with --docker.",
    )(fn)
    return click.option(
        "--docker",
        is_flag=True,
        envvar="TRAINTRACE_BROKER_DOCKER",
        show_envvar=True,
        help="Use `docker compose` (apache/kafka image) instead of the local JVM.",
    )(fn)


def _json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print a JSON object on stdout.")(fn)


def _print_running(st: dict[str, Any], headline: str) -> None:
    _out.print(f"[bold green]{headline}[/] at [bold]{st['bootstrap']}[/] (pid {st['pid']}, Kafka {st['version']})")
    _out.print(f"  data: {st['data_dir']}")
    _out.print(f"  log:  {st['log_file']}")
    _out.print(f"export KAFKA_BOOTSTRAP_SERVERS={st['bootstrap']}")
    if st.get("secure"):
        _out.print("  secure: SASL_SSL (SCRAM-SHA-512), ACLs enforced; client properties per role:")
        for role, path in sorted(st.get("client_properties", {}).items()):
            _out.print(f"    {role:<10} {path}")
        _out.print("export TRAINTRACE_KAFKA_CONFIG=<one of them>")


def _print_cluster(st: dict[str, Any], headline: str) -> None:
    _out.print(f"[bold green]{headline}[/] at [bold]{st['bootstrap']}[/] (Kafka {st['version']}, "
               f"{st['running_nodes']} of {len(st['nodes'])} nodes running)")
    _print_nodes(st)
    _out.print(f"  data: {st['data_dir']}")
    _out.print(f"export KAFKA_BOOTSTRAP_SERVERS={st['bootstrap']}")
    if st.get("secure"):
        _out.print("  secure: SASL_SSL (SCRAM-SHA-512), ACLs enforced; client properties per role:")
        for role, path in sorted(st.get("client_properties", {}).items()):
            _out.print(f"    {role:<10} {path}")
        _out.print("export TRAINTRACE_KAFKA_CONFIG=<one of them>")


def _print_nodes(st: dict[str, Any]) -> None:
    for n in st["nodes"]:
        state = f"running (pid {n['pid']})" if n["running"] else "[yellow]not running[/]"
        _out.print(f"  node {n['node_id']}: 127.0.0.1:{n['port']} (controller {n['controller_port']}) {state}")


@click.group("broker")
def broker() -> None:
    """Run a local Apache Kafka broker (one KRaft node on 127.0.0.1, or --nodes 3) for development and tests.

    The first start resolves Kafka's jars with Maven into ~/.cache/traintrace (TRAINTRACE_CACHE_DIR);
    later starts are offline. Needs Java 17+. The broker keeps running after the command returns;
    stop it with `traintrace broker stop`.
    """


@broker.command()
@click.option(
    "--port", type=click.IntRange(1, 65535), envvar="TRAINTRACE_BROKER_PORT", show_envvar=True,
    default=None, help="Client port on 127.0.0.1 (with --nodes: the first node's; the others pick free "
                       "ports) [default: last one if free, else any free port].",
)
@click.option(
    "--controller-port", type=click.IntRange(1, 65535), envvar="TRAINTRACE_BROKER_CONTROLLER_PORT",
    show_envvar=True, default=None, help="KRaft controller port [default: like --port].",
)
@_data_dir_option
@click.option(
    "--kafka-version", envvar="TRAINTRACE_KAFKA_VERSION", show_envvar=True,
    default=lib.DEFAULT_KAFKA_VERSION, show_default=True, help="Apache Kafka version (4.x).",
)
@click.option(
    "--timeout", type=click.FloatRange(1), envvar="TRAINTRACE_BROKER_TIMEOUT", show_envvar=True,
    default=60.0, show_default=True, help="Seconds to wait for the broker to answer.",
)
@click.option(
    "--secure", is_flag=True, envvar="TRAINTRACE_BROKER_SECURE", show_envvar=True,
    help="SASL_SSL (SCRAM-SHA-512) with a throw-away CA, ACLs enforced, one client properties "
         "file per role in the data dir. A data dir stays secure or not.",
)
@click.option(
    "--nodes", type=click.IntRange(1, 9), envvar="TRAINTRACE_BROKER_NODES", show_envvar=True, default=1,
    show_default=True,
    help="Combined KRaft nodes (broker + controller each): 3 = a three-voter quorum, internal topics "
         "replicated 3 times, min.insync.replicas 2. A data dir stays a cluster or a single broker. "
         "(--docker: docker-compose.yml runs its own three nodes.)",
)
@click.option(
    "--jvm", type=click.Choice(sorted(lib.JVM_MODES)), envvar="TRAINTRACE_BROKER_JVM", show_envvar=True,
    default=lib.DEFAULT_JVM, show_default=True,
    help="lean: the client compiler and the serial collector (half the CPU to start, little at rest: "
         "a laptop's or a test's broker); server: G1 and the optimising compiler, for long loaded runs.",
)
@_docker_options
@_json_option
@_errors
def start(
    port: int | None,
    controller_port: int | None,
    data_dir: Path | None,
    kafka_version: str,
    timeout: float,
    secure: bool,
    nodes: int,
    jvm: str,
    docker: bool,
    compose_file: Path,
    as_json: bool,
) -> None:
    """Start the broker (or report the one already running) and print its bootstrap address."""
    if docker and secure:
        fail("--secure runs the local JVM broker; it does not apply to --docker", command="broker")
    if docker:
        with _err.status("docker compose up (kafka + topics)…"):
            bootstrap = lib.docker_compose_up(compose_file, timeout=max(timeout, 120.0))
        if as_json:
            _emit_json({"running": True, "bootstrap": bootstrap, "docker": True, "compose_file": str(compose_file)})
        else:
            _out.print(f"[bold green]Kafka (docker compose) running[/] at [bold]{bootstrap}[/]")
            _out.print(f"export KAFKA_BOOTSTRAP_SERVERS={bootstrap}")
        return

    if nodes > 1:
        _start_cluster(data_dir, nodes, port, controller_port, kafka_version, timeout, secure, jvm, as_json)
        return
    b = lib.LocalBroker(data_dir, port=port, controller_port=controller_port, version=kafka_version, secure=secure,
                       jvm=jvm)
    st = b.status()
    if st["running"]:
        if as_json:
            _emit_json({**st, "already_running": True})
        else:
            _print_running(st, "Kafka broker already running")
            if port is not None and st["port"] != port:
                _err.print(f"[yellow]note:[/] it listens on {st['port']}, not {port}; stop it first to change ports")
        return

    if not lib.jars_cached(kafka_version):
        with _err.status(f"Resolving Apache Kafka {kafka_version} jars with Maven (first run only)…"):
            lib.resolve_jars(kafka_version)
    t0 = time.monotonic()
    with _err.status(f"Starting Kafka {kafka_version} broker in {b.data_dir}…"):
        b.start(timeout=timeout)
    st = b.status()
    elapsed = time.monotonic() - t0
    if as_json:
        _emit_json({**st, "already_running": False, "start_seconds": round(elapsed, 2)})
    else:
        _print_running(st, f"Kafka broker started in {elapsed:.1f}s")


def _start_cluster(data_dir: Path | None, nodes: int, port: int | None, controller_port: int | None,
                   kafka_version: str, timeout: float, secure: bool, jvm: str, as_json: bool) -> None:
    c = cluster_lib.LocalCluster(data_dir, nodes, port, kafka_version, controller_port=controller_port,
                                 secure=secure, jvm=jvm)
    if c.nodes and c.size != nodes:
        fail(f"the cluster in {c.data_dir} has {c.size} nodes, not {nodes}; start it with --nodes {c.size} "
             "or use another --data-dir", command="broker")
    if c.is_running():
        st = c.status()
        if as_json:
            _emit_json({**st, "already_running": True})
        else:
            _print_cluster(st, "Kafka cluster already running")
        return
    if not lib.jars_cached(kafka_version):
        with _err.status(f"Resolving Apache Kafka {kafka_version} jars with Maven (first run only)…"):
            lib.resolve_jars(kafka_version)
    t0 = time.monotonic()
    with _err.status(f"Starting a {nodes}-node Kafka {kafka_version} cluster in {c.data_dir}…"):
        c.start(timeout=max(timeout, 90.0))
    st, elapsed = c.status(), time.monotonic() - t0
    if as_json:
        _emit_json({**st, "already_running": False, "start_seconds": round(elapsed, 2)})
    else:
        _print_cluster(st, f"Kafka cluster ({nodes} nodes) started in {elapsed:.1f}s")


@broker.command()
@_data_dir_option
@click.option(
    "--timeout", type=click.FloatRange(1), envvar="TRAINTRACE_BROKER_STOP_TIMEOUT", show_envvar=True,
    default=30.0, show_default=True, help="Seconds to wait after SIGTERM before SIGKILL.",
)
@click.option("--volumes", is_flag=True, help="With --docker: also remove the broker's data volume.")
@_docker_options
@_json_option
@_errors
def stop(
    data_dir: Path | None, timeout: float, volumes: bool, docker: bool, compose_file: Path, as_json: bool
) -> None:
    """Stop the broker, or every node of a cluster (SIGTERM, then SIGKILL after --timeout). Its data is kept."""
    if docker:
        with _err.status("docker compose down…"):
            lib.docker_compose_down(compose_file, volumes=volumes)
        if as_json:
            _emit_json({"stopped": True, "docker": True})
        else:
            _out.print("Kafka (docker compose) stopped")
        return
    if cluster_lib.is_cluster_dir(data_dir):
        _stop_cluster(data_dir, timeout, as_json)
        return
    b = lib.LocalBroker(data_dir)
    before = b.status()
    with _err.status(f"Stopping Kafka broker (pid {before['pid']})…" if before["running"] else "Checking…"):
        was_running = b.stop(timeout=timeout)
    if as_json:
        _emit_json({"stopped": was_running, "was_running": was_running, "pid": before["pid"],
                    "data_dir": before["data_dir"]})
    elif was_running:
        _out.print(f"Kafka broker stopped (pid {before['pid']}, data kept in {before['data_dir']})")
    else:
        _out.print(f"No Kafka broker running for {before['data_dir']}")


def _stop_cluster(data_dir: Path | None, timeout: float, as_json: bool) -> None:
    c = cluster_lib.LocalCluster.from_data_dir(data_dir)
    assert c is not None
    before = c.status()
    with _err.status(f"Stopping the Kafka cluster ({before['running_nodes']} nodes running)…"):
        was_running = c.stop(timeout=timeout)
    if as_json:
        _emit_json({"stopped": was_running, "was_running": was_running, "cluster": True,
                    "pids": [n["pid"] for n in before["nodes"] if n["pid"]], "data_dir": before["data_dir"]})
    elif was_running:
        pids = ", ".join(str(n["pid"]) for n in before["nodes"] if n["pid"])
        _out.print(f"Kafka cluster stopped (pids {pids}, data kept in {before['data_dir']})")
    else:
        _out.print(f"No Kafka cluster node running for {before['data_dir']}")


@broker.command()
@_data_dir_option
@_json_option
@_errors
def status(data_dir: Path | None, as_json: bool) -> None:
    """Show whether the broker (every node of a cluster) runs. Exit status: 0 running, 1 not running
    (a cluster: not every node running)."""
    if cluster_lib.is_cluster_dir(data_dir):
        c = cluster_lib.LocalCluster.from_data_dir(data_dir)
        assert c is not None
        st = c.status()
        if as_json:
            _emit_json(st)
        elif st["running"]:
            _print_cluster(st, "Kafka cluster running")
        else:
            _out.print(f"[yellow]Kafka cluster not running[/] ({st['running_nodes']} of {len(st['nodes'])} nodes) "
                       f"for {st['data_dir']}")
            _print_nodes(st)
        sys.exit(0 if st["running"] else 1)
    st = lib.LocalBroker(data_dir).status()
    if as_json:
        _emit_json(st)
    elif st["running"]:
        _print_running(st, "Kafka broker running")
    else:
        last = f" (last port {st['port']})" if st["port"] else ""
        _out.print(f"[yellow]Kafka broker not running[/] for {st['data_dir']}{last}")
    sys.exit(0 if st["running"] else 1)


@broker.command()
@click.option(
    "--kafka-version", envvar="TRAINTRACE_KAFKA_VERSION", show_envvar=True,
    default=lib.DEFAULT_KAFKA_VERSION, show_default=True, help="Apache Kafka version (4.x).",
)
@click.option(
    "--cache-dir", type=click.Path(file_okay=False, path_type=Path), envvar="TRAINTRACE_CACHE_DIR",
    show_envvar=True, default=None, help="Cache root [default: ~/.cache/traintrace].",
)
@_json_option
@_errors
def resolve(kafka_version: str, cache_dir: Path | None, as_json: bool) -> None:
    """Only fetch the broker's jars (Maven, once) and print the directory holding them."""
    cached = lib.jars_cached(kafka_version, cache_dir)
    if cached:
        libs = lib.resolve_jars(kafka_version, cache_dir)
    else:
        with _err.status(f"Resolving Apache Kafka {kafka_version} jars with Maven…"):
            libs = lib.resolve_jars(kafka_version, cache_dir)
    if as_json:
        _emit_json({"libs": str(libs), "version": kafka_version, "cached": cached,
                    "jars": len(list(libs.glob("*.jar")))})
    else:
        click.echo(str(libs))
