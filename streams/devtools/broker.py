"""A real Apache Kafka 4.x broker that traintrace starts itself, on the local JVM.

No Docker, no Kafka download by hand: Maven resolves the broker's jars once into a cache outside
the repository, and :class:`LocalBroker` runs a single combined KRaft node (broker + controller,
``node.id=1``) bound to 127.0.0.1 only, detached from the calling process, with its state in one
data directory::

    data_dir/
      broker.json          pid, ports, cluster id, version (the pid is removed on stop)
      server.properties    written on every start
      log4j2.properties    INFO to broker.log, nothing to the console
      broker.log           the broker's log (the previous run's is kept as broker.log.1)
      kraft/               log.dirs: formatted once, reused by every later start
      secure/              with ``secure=True`` only (:mod:`streams.devtools.secure`): the CA, the
                           broker's certificate, the SCRAM users, a client properties file per role

``LocalBroker(secure=True)`` (``traintrace broker start --secure``) listens with SASL_SSL
(SCRAM-SHA-512) instead of PLAINTEXT, authorizes with KRaft's ``StandardAuthorizer`` (nothing is
allowed that no ACL grants) and grants each role its ACLs (:mod:`streams.kafka.acls`) at start.
A data directory stays what it was formatted as: secure or not.

This module is a library: it never prints. Failures raise :class:`BrokerError` subclasses whose
message (one line) says what to do; longer context (Maven output, the broker's log tail) is in
``exc.detail``. Docker users get :func:`docker_compose_up` / :func:`docker_compose_down` instead.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from streams.devtools import class_share
from streams.devtools import secure as _secure
from streams.devtools.lifetime import die_with_parent
from streams.kafka.errors import KafkaAdapterError

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "KAFKA_VERSION",
    "BrokerError",
    "BrokerStartFailed",
    "BrokerStartTimeout",
    "DockerUnavailable",
    "JarResolutionFailed",
    "JavaMissing",
    "LocalBroker",
    "MavenMissing",
    "PortInUse",
    "StorageFormatFailed",
    "cache_root",
    "default_data_dir",
    "docker_compose_down",
    "docker_compose_up",
    "find_java",
    "find_running_broker",
    "jars_cached",
    "kafka_cache_dir",
    "kafka_version",
    "new_cluster_id",
    "pick_free_port",
    "port_is_free",
    "read_record",
    "render_log4j2_properties",
    "render_pom",
    "render_properties",
    "resolve_jars",
    "server_properties",
    "wait_until_ready",
]

DEFAULT_KAFKA_VERSION = "4.1.1"
#: The Kafka version used when none is given; ``TRAINTRACE_KAFKA_VERSION`` overrides it.
KAFKA_VERSION = os.environ.get("TRAINTRACE_KAFKA_VERSION") or DEFAULT_KAFKA_VERSION

LOOPBACK = "127.0.0.1"
NODE_ID = 1
MIN_JAVA = 17  # Kafka 4.x brokers need Java 17+

RECORD_FILE = "broker.json"
CLUSTER_RECORD_FILE = "cluster.json"  # written by streams.devtools.cluster in a cluster's data dir
PROPERTIES_FILE = "server.properties"
LOG4J_FILE = "log4j2.properties"
TOOLS_LOG4J_FILE = "log4j2-tools.properties"
LOG_FILE = "broker.log"
KRAFT_DIR = "kraft"
MARKER_FILE = ".resolved.json"

_log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- errors


class BrokerError(KafkaAdapterError):
    """Base class. ``str(exc)`` is one line saying what to do; ``exc.detail`` has more context."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def __str__(self) -> str:
        return self.message


class JavaMissing(BrokerError):
    """No usable ``java`` (17+) on PATH or in JAVA_HOME."""


class MavenMissing(BrokerError):
    """``mvn`` is not on PATH and the jars are not cached yet."""


class JarResolutionFailed(BrokerError):
    """Maven ran but could not resolve the broker's jars."""


class PortInUse(BrokerError):
    """The requested port on 127.0.0.1 is taken."""

    def __init__(self, message: str, port: int, detail: str | None = None) -> None:
        super().__init__(message, detail)
        self.port = port


class StorageFormatFailed(BrokerError):
    """``kafka-storage format`` failed on the data directory."""


class BrokerStartFailed(BrokerError):
    """The broker process exited before it answered."""

    def __init__(self, message: str, detail: str | None = None, log_tail: str = "") -> None:
        super().__init__(message, detail if detail is not None else (log_tail or None))
        self.log_tail = log_tail


class BrokerStartTimeout(BrokerStartFailed):
    """The broker did not answer a metadata request in time (it has been killed)."""


class DockerUnavailable(BrokerError):
    """``docker`` / ``docker compose`` or the Docker engine is not available."""


# --------------------------------------------------------------------------- config & env


def kafka_version() -> str:
    """The Kafka version to use now (``TRAINTRACE_KAFKA_VERSION`` or the default)."""
    return os.environ.get("TRAINTRACE_KAFKA_VERSION") or DEFAULT_KAFKA_VERSION


def cache_root() -> Path:
    """Root of traintrace's cache: ``TRAINTRACE_CACHE_DIR`` or ``~/.cache/traintrace``."""
    env = os.environ.get("TRAINTRACE_CACHE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "traintrace").resolve()


def kafka_cache_dir(version: str | None = None, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<cache root>/kafka/<version>``; ``cache_dir`` replaces the cache root."""
    root = Path(cache_dir).expanduser().resolve() if cache_dir is not None else cache_root()
    return root / "kafka" / (version or kafka_version())


#: the JVM a local broker runs on (``TRAINTRACE_BROKER_JVM``). ``lean``, the default: the client
#: compiler only and the serial collector, which start a broker with half the CPU and keep a test
#: or laptop broker's CPU low (measured: 3.7 s of CPU to ready instead of 7.8, 1.1 s instead of
#: 3.1 for 100k records in and out); ``server``: G1 and the optimising compiler, for a long,
#: loaded run where the broker's peak throughput matters.
JVM_MODES = {
    "lean": ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"),
    "server": ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"),
}
DEFAULT_JVM = "lean"


def jvm_mode(mode: str | None = None) -> str:
    """The JVM mode of local brokers: ``mode`` when given, else ``TRAINTRACE_BROKER_JVM`` or
    ``lean``; one not in :data:`JVM_MODES` is one line naming where it came from."""
    where = "jvm" if mode else "TRAINTRACE_BROKER_JVM"
    mode = (mode or os.environ.get("TRAINTRACE_BROKER_JVM") or DEFAULT_JVM).strip().lower()
    if mode not in JVM_MODES:
        raise BrokerError(f"{where}={mode!r}: use one of {', '.join(sorted(JVM_MODES))}")
    return mode


def default_data_dir() -> Path:
    """``TRAINTRACE_BROKER_DIR`` or ``./.traintrace/broker`` under the current directory."""
    env = os.environ.get("TRAINTRACE_BROKER_DIR")
    return (Path(env).expanduser() if env else Path.cwd() / ".traintrace" / "broker").resolve()


# --------------------------------------------------------------------------- pure pieces


def new_cluster_id() -> str:
    """A KRaft cluster id: a random 16-byte UUID in unpadded base64url (22 chars).

    Like Kafka's ``Uuid.randomUuid()`` it never starts with ``-`` (a CLI would read it as a flag).
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cid.startswith("-"):
            return cid


def server_properties(
    port: int,
    controller_port: int,
    log_dir: str | os.PathLike[str],
    *,
    node_id: int = NODE_ID,
    extra: Mapping[str, Any] | None = None,
    voters: str | None = None,
) -> dict[str, str]:
    """The configuration of one combined KRaft node (broker + controller) on 127.0.0.1.

    Static quorum (``controller.quorum.voters``: ``voters``, default this node alone), so storage
    is formatted without ``--standalone``. Internal topics get replication factor 1 and few
    partitions so a laptop-sized node starts fast (:mod:`streams.devtools.cluster` overrides them).
    ``extra`` overrides or adds keys.
    """
    if port == controller_port:
        raise ValueError("the broker and controller ports must differ")
    props: dict[str, Any] = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.voters": voters or f"{node_id}@{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(Path(log_dir)),
        "num.partitions": 1,
        "default.replication.factor": 1,
        "auto.create.topics.enable": "true",
        "delete.topic.enable": "true",
        "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 10,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "share.coordinator.state.topic.num.partitions": 10,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
        "log.retention.hours": 168,
        "log.segment.bytes": 64 * 1024 * 1024,
    }
    if extra:
        props.update(extra)
    return {str(k): _prop_value(v) for k, v in props.items()}


def _prop_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _escape_properties(text: str, *, key: bool = False) -> str:
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if key:
        out = out.replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")
    elif out.startswith(" "):
        out = "\\" + out
    return out


def render_properties(props: Mapping[str, Any], header: str | None = None) -> str:
    """Render a Java ``.properties`` file (keys in the given order, values escaped)."""
    lines = [f"# {line}" for line in (header or "").splitlines()]
    lines += [f"{_escape_properties(str(k), key=True)}={_escape_properties(_prop_value(v))}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def render_log4j2_properties(log_file: str | os.PathLike[str] | None, level: str = "INFO") -> str:
    """A log4j2 configuration: ``level`` to ``log_file`` (appending), or to stdout if None."""
    if log_file is None:
        appender = {
            "appender.out.type": "Console",
            "appender.out.name": "OUT",
            "appender.out.target": "SYSTEM_OUT",
        }
    else:
        appender = {
            "appender.out.type": "File",
            "appender.out.name": "OUT",
            "appender.out.fileName": str(log_file),
            "appender.out.append": "true",
        }
    props = {
        "status": "warn",
        "name": "traintrace-broker",
        # Kafka logs its own shutdown from a JVM shutdown hook; log4j's hook would race it and
        # drop the last lines. The File appender flushes every event, so nothing is lost.
        "shutdownHook": "disable",
        **appender,
        "appender.out.layout.type": "PatternLayout",
        "appender.out.layout.pattern": "[%d] %p %m (%c)%n",
        "rootLogger.level": level,
        "rootLogger.appenderRef.out.ref": "OUT",
        # the noisiest loggers of a stock Kafka install, kept at their usual levels
        "logger.request.name": "kafka.request.logger",
        "logger.request.level": "WARN",
        "logger.authorizer.name": "kafka.authorizer.logger",
        "logger.authorizer.level": "WARN",
        "logger.zookeeper.name": "org.apache.zookeeper",
        "logger.zookeeper.level": "WARN",
    }
    return render_properties(props, header="written by traintrace (streams.devtools.broker)")


_SLF4J_BRIDGE = {1: "log4j-slf4j-impl", 2: "log4j-slf4j2-impl"}


def render_pom(version: str, extra_dependencies: list[tuple[str, str, str]] | None = None) -> str:
    """A throw-away pom whose runtime dependencies are the Kafka broker ``version``."""
    deps = [("org.apache.kafka", "kafka_2.13", version), *(extra_dependencies or [])]
    dep_xml = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in deps
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- written by traintrace: only used to resolve the jars of Apache Kafka {version} -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>traintrace.local</groupId>
  <artifactId>kafka-broker-runtime</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{dep_xml}
  </dependencies>
</project>
"""


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True when nothing listens on ``host:port`` (bind test with SO_REUSEADDR, like the JVM)."""
    if not 0 < port < 65536:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


#: how many times a broker that picks its own ports starts when a port it picked is taken before
#: the JVM binds it (another server on the machine took it meanwhile: in a fresh clone's test run,
#: one test process's session broker was lost so, and 85 tests with it)
PORT_ATTEMPTS = 3


def lost_a_port(log_file: Path) -> bool:
    """Whether the broker whose log (written anew at each start) is ``log_file`` could not bind a
    port: in use when the JVM bound it."""
    try:
        text = log_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "Address already in use" in text


#: where :func:`pick_free_port` looks first: below Linux's ephemeral range (32768-60999), from
#: which every outgoing connection takes its local port (a port the OS handed out with ``bind(0)``
#: may be taken so before the server binds it), and above Ray's worker ports (10002-19999)
SERVER_PORTS = range(20000, 32768)
_ports = random.SystemRandom()  # not ``random``: pytest-randomly seeds it alike in every test process


def pick_free_port(exclude: set[int] | frozenset[int] = frozenset(), host: str = LOOPBACK) -> int:
    """A port free on ``host`` now (not in ``exclude``), from :data:`SERVER_PORTS` when one is
    free there, else one the OS picks. Still a guess: whoever binds it must handle losing it."""
    for _ in range(200):
        port = _ports.choice(SERVER_PORTS)
        if port not in exclude and port_is_free(port, host):
            return port
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in exclude:
            return port
    raise BrokerError("could not find a free port on 127.0.0.1; free some ports and retry")


# --------------------------------------------------------------------------- java & maven


def find_java() -> str:
    """Path of a Java 17+ ``java``: ``$JAVA_HOME/bin/java`` or ``java`` on PATH."""
    candidates = []
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidates.append(str(Path(java_home) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    hint = "install a JDK/JRE 17+ (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
    if not candidates:
        raise JavaMissing(f"java not found on PATH or in JAVA_HOME; {hint}")
    seen: list[str] = []
    for java in candidates:
        if not os.access(java, os.X_OK):
            continue
        major = _java_major(java)
        if major is not None and major >= MIN_JAVA:
            return java
        seen.append(f"{java} (version {major if major is not None else 'unknown'})")
    raise JavaMissing(f"Kafka 4 needs Java {MIN_JAVA}+, found {', '.join(seen) or 'none usable'}; {hint}")


@functools.lru_cache(maxsize=8)
def java_version_text(java: str) -> str | None:
    """What ``java -version`` says (None when it does not run)."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stderr + out.stdout


def java_identity(java: str) -> str:
    """The build of ``java``: its resolved path and ``-version`` text (a class-data archive is
    only good for the build that wrote it)."""
    return f"{os.path.realpath(java)}\n{java_version_text(java) or ''}"


def _java_major(java: str) -> int | None:
    text = java_version_text(java)
    if text is None:
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8.0" -> 8


def tool_class_share_flags(java: str, libs: Path) -> tuple[str, ...]:
    """The flags that map the lean brokers' class-data archive into a Kafka tool's JVM (same
    jars): none when there is none yet (a tool never starts its training)."""
    return class_share.use_flags(class_share.archive_path(libs, java_identity(java), "lean"))


def _marker(version: str, cache_dir: str | os.PathLike[str] | None) -> Path:
    return kafka_cache_dir(version, cache_dir) / MARKER_FILE


def jars_cached(version: str | None = None, cache_dir: str | os.PathLike[str] | None = None) -> bool:
    """True when :func:`resolve_jars` would return at once, offline."""
    version = version or kafka_version()
    libs = kafka_cache_dir(version, cache_dir) / "libs"
    return _marker(version, cache_dir).is_file() and libs.is_dir()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (no-op where fcntl is missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run_maven(mvn: str, args: list[str], cwd: Path, timeout: float) -> None:
    cmd = [mvn, "-B", "-q", *args]
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        out = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else part
            for part in (exc.stdout or "", exc.stderr or "")
        )
        raise JarResolutionFailed(
            f"Maven did not finish within {timeout:.0f}s; check network access to Maven Central and retry",
            _tail(out),
        ) from None
    if proc.returncode != 0:
        out = _tail(proc.stdout + "\n" + proc.stderr)
        last = next((ln.strip() for ln in reversed(out.splitlines()) if ln.strip()), "no output")
        raise JarResolutionFailed(
            f"Maven could not resolve the Kafka jars (exit {proc.returncode}: {last[:200]}); "
            "check network access to Maven Central and the Kafka version, then retry",
            out,
        )


def resolve_jars(
    version: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    timeout: float = 900.0,
) -> Path:
    """The directory holding every runtime jar of the Kafka broker ``version``.

    First call: writes a pom under ``<cache>/kafka/<version>/`` (outside the repository; see
    :func:`kafka_cache_dir`), runs Maven (batch mode, quiet) to copy the runtime dependencies into
    ``libs/`` and adds the log4j2 binding for SLF4J (Kafka ships it in its tarball, not in its
    pom). A marker file records completion, so later calls are instant and need no network.
    """
    version = version or kafka_version()
    base = kafka_cache_dir(version, cache_dir)
    libs = base / "libs"
    if jars_cached(version, cache_dir):
        return libs
    with _file_lock(base / ".lock"):
        if jars_cached(version, cache_dir):  # another process finished meanwhile
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise MavenMissing(
                f"Maven (mvn) is needed once to fetch Kafka {version}'s jars; install it "
                "(e.g. `apt-get install maven`) or copy a resolved cache into "
                f"{base} (set TRAINTRACE_CACHE_DIR to use another cache root)"
            )
        staging = base / "libs.partial"
        shutil.rmtree(staging, ignore_errors=True)
        (base / "pom.xml").write_text(render_pom(version), encoding="utf-8")
        _run_maven(
            mvn,
            [
                "dependency:copy-dependencies",
                f"-DoutputDirectory={staging}",
                "-DincludeScope=runtime",
            ],
            base,
            timeout,
        )
        jars = sorted(p.name for p in staging.glob("*.jar"))
        if not any(n.startswith(("kafka_2.13-", "kafka_2.12-")) for n in jars):
            raise JarResolutionFailed(
                f"Maven finished but no kafka_2.13 jar for {version} is in {staging}; "
                "check the version (TRAINTRACE_KAFKA_VERSION) and retry"
            )
        bridge = _missing_slf4j_bridge(jars)
        if bridge is not None:
            _run_maven(mvn, ["dependency:copy", f"-Dartifact={bridge}", f"-DoutputDirectory={staging}"], base, timeout)
            jars = sorted(p.name for p in staging.glob("*.jar"))
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        marker = {"version": version, "jars": jars, "resolved_at": time.time()}
        tmp = base / (MARKER_FILE + ".tmp")
        tmp.write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, base / MARKER_FILE)
    return libs


def _missing_slf4j_bridge(jars: list[str]) -> str | None:
    """``group:artifact:version`` of the SLF4J->log4j2 binding if the jars lack one, else None."""
    if any(n.startswith(("log4j-slf4j-impl-", "log4j-slf4j2-impl-", "slf4j-reload4j-")) for n in jars):
        return None
    slf4j = next((re.match(r"slf4j-api-(\d+)\.", n) for n in jars if n.startswith("slf4j-api-")), None)
    log4j = next((re.match(r"log4j-core-(.+)\.jar$", n) for n in jars if n.startswith("log4j-core-")), None)
    if slf4j is None or log4j is None:
        return None
    artifact = _SLF4J_BRIDGE.get(int(slf4j.group(1)), "log4j-slf4j2-impl")
    return f"org.apache.logging.log4j:{artifact}:{log4j.group(1)}"


# --------------------------------------------------------------------------- the pid record


def read_record(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The content of ``data_dir/broker.json`` (None when absent or unreadable)."""
    path = Path(data_dir) / RECORD_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_record(data_dir: Path, record: Mapping[str, Any]) -> None:
    tmp = data_dir / (RECORD_FILE + ".tmp")
    tmp.write_text(json.dumps(dict(record), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, data_dir / RECORD_FILE)


def _pid_alive(pid: int, marker: str | None = None) -> bool:
    """True when ``pid`` runs (reaping it first if it is our zombie child).

    With ``marker``, the process must also be a ``kafka.Kafka`` JVM whose command line contains
    it, so a recycled pid never counts as our broker.
    """
    if pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return marker is None
    cmdline_path = Path(f"/proc/{pid}/cmdline")
    if marker is None or not Path("/proc").is_dir():
        return True
    try:
        cmdline = cmdline_path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return "kafka.Kafka" in cmdline and marker in cmdline  # a zombie has an empty cmdline


# --------------------------------------------------------------------------- readiness


def wait_until_ready(
    bootstrap: str,
    timeout: float,
    *,
    alive: Any = None,
    poll: float = 0.25,
    kafka: Any = None,
    brokers: int = 1,
) -> dict[str, Any]:
    """Block until a confluent-kafka AdminClient gets metadata listing at least ``brokers``
    brokers from ``bootstrap`` (one address or several, comma-separated).

    ``alive`` is an optional callable; when it returns False waiting stops with
    :class:`BrokerStartFailed`. ``kafka``: the :class:`KafkaSettings` to ask with (default
    PLAINTEXT). Returns ``{"brokers": {...}, "seconds": elapsed}``.
    Raises :class:`BrokerStartTimeout` (without killing anything) after ``timeout`` seconds.
    """
    from streams.kafka.settings import KafkaSettings  # lazy: keeps `traintrace --help` fast

    addresses = [(h or LOOPBACK, int(p)) for h, _, p in (a.strip().rpartition(":") for a in bootstrap.split(","))]
    started = time.monotonic()
    deadline = started + timeout
    admin = None
    quiet = logging.getLogger("streams.devtools.broker.librdkafka")
    quiet.propagate = False  # librdkafka's "connection refused" noise while the JVM boots
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    last_error = "no answer"
    while True:
        if alive is not None and not alive():
            raise BrokerStartFailed("the broker process exited during start-up")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerStartTimeout(
                f"the broker at {bootstrap} did not answer within {timeout:.0f}s ({last_error})"
            )
        refused = _unreachable(addresses, min(1.0, remaining))
        if refused is not None:
            last_error = f"connect: {refused}"
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
            continue
        if admin is None:
            # the local broker is ours: PLAINTEXT on loopback, whatever the environment says
            admin = (kafka or KafkaSettings(bootstrap)).admin(logger=quiet, log_level=0,
                                                              **{"socket.timeout.ms": 5000})
        try:
            md = admin.list_topics(timeout=max(0.5, min(3.0, deadline - time.monotonic())))
        except Exception as exc:  # KafkaException: transport / timeout
            last_error = f"metadata: {exc}"
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
            continue
        if len(md.brokers) >= max(1, brokers):
            return {
                "brokers": {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()},
                "seconds": time.monotonic() - started,
            }
        last_error = f"metadata lists {len(md.brokers)} of {brokers} brokers" if md.brokers else "metadata without brokers"
        time.sleep(poll)


def _unreachable(addresses: list[tuple[str, int]], timeout: float) -> str | None:
    """None when one of ``addresses`` accepts a TCP connection, else the last error."""
    error = "no address"
    for address in addresses:
        try:
            with socket.create_connection(address, timeout=timeout):
                return None
        except OSError as exc:
            error = str(exc.strerror or exc)
    return error


# --------------------------------------------------------------------------- the broker


class LocalBroker:
    """One combined KRaft node on 127.0.0.1, its state in ``data_dir``.

    ``port`` / ``controller_port``: None = reuse the ports recorded by the last start when still
    free, else pick free ones. A given port must be free (:class:`PortInUse`).
    """

    #: this node's KRaft id and the static quorum (None: this node alone); a node of a
    #: :class:`streams.devtools.cluster.LocalCluster` sets both
    node_id: int = NODE_ID
    quorum_voters: str | None = None

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        controller_port: int | None = None,
        version: str | None = None,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        heap_max: str = "512m",
        heap_min: str = "256m",
        extra_properties: Mapping[str, Any] | None = None,
        die_with_parent: bool = False,
        secure: bool = False,
        jvm: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve() if data_dir is not None else default_data_dir()
        self.port = port
        self.controller_port = controller_port
        self.version = version or kafka_version()
        self.cache_dir = cache_dir
        self.heap_max = heap_max
        self.heap_min = heap_min
        self.extra_properties = dict(extra_properties or {})
        self.die_with_parent = die_with_parent
        self.secure = secure
        self.jvm = jvm
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"LocalBroker(data_dir={str(self.data_dir)!r}, version={self.version!r})"

    # paths -------------------------------------------------------------
    @property
    def log_file(self) -> Path:
        return self.data_dir / LOG_FILE

    @property
    def properties_file(self) -> Path:
        return self.data_dir / PROPERTIES_FILE

    @property
    def kraft_dir(self) -> Path:
        return self.data_dir / KRAFT_DIR

    # discovery -----------------------------------------------------------
    @classmethod
    def from_data_dir(cls, data_dir: str | os.PathLike[str] | None = None) -> LocalBroker | None:
        """The broker recorded in ``data_dir`` (running or not), or None if none was ever started."""
        path = Path(data_dir).expanduser().resolve() if data_dir is not None else default_data_dir()
        record = read_record(path)
        if record is None:
            return None
        return cls(path, version=record.get("version"))

    # state ----------------------------------------------------------------
    def _running_pid(self, record: Mapping[str, Any] | None) -> int | None:
        if not record or not record.get("pid"):
            return None
        pid = int(record["pid"])
        if self._proc is not None and self._proc.pid == pid and self._proc.poll() is not None:
            return None
        return pid if _pid_alive(pid, marker=str(self.properties_file)) else None

    def is_running(self) -> bool:
        return self._running_pid(read_record(self.data_dir)) is not None

    def status(self) -> dict[str, Any]:
        """``{running, pid, bootstrap, port, controller_port, data_dir, version, cluster_id, log_file}``.

        ``pid`` and ``bootstrap`` are None when the broker is not running.
        """
        record = read_record(self.data_dir) or {}
        pid = self._running_pid(record)
        port = record.get("port")
        return {
            "running": pid is not None,
            "pid": pid,
            "bootstrap": f"{LOOPBACK}:{port}" if pid is not None and port else None,
            "port": port,
            "controller_port": record.get("controller_port"),
            "data_dir": str(self.data_dir),
            "version": record.get("version") or self.version,
            "cluster_id": record.get("cluster_id"),
            "log_file": str(self.log_file),
            "started_at": record.get("started_at") if pid is not None else None,
            **({"secure": True, "client_properties": record.get("client_properties", {})}
               if record.get("secure") else {}),
        }

    @property
    def bootstrap(self) -> str | None:
        return self.status()["bootstrap"]

    # start ------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> str:
        """Start the broker (or find it running) and return its bootstrap ``127.0.0.1:PORT``.

        Raises JavaMissing, MavenMissing, JarResolutionFailed, PortInUse, StorageFormatFailed,
        BrokerStartFailed or BrokerStartTimeout (the process is killed in the last two cases).
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with _file_lock(self.data_dir / ".lock"):
            record = read_record(self.data_dir) or {}
            if self._running_pid(record) is not None:
                return f"{LOOPBACK}:{record['port']}"
            if self.quorum_voters is None and (self.data_dir / CLUSTER_RECORD_FILE).is_file():
                raise BrokerError(f"{self.data_dir} holds a cluster (`broker start --nodes N`); start it the "
                                  "same way or use another --data-dir")
            for given in (self.port, self.controller_port):
                if given is not None:
                    self._check_port(given)  # fail fast, before a long jar download
            self._check_mode(record)
            java = find_java()
            libs = resolve_jars(self.version, self.cache_dir)
            for attempt in range(1, PORT_ATTEMPTS + 1):
                try:
                    return self._start_once(java, libs, record, timeout)
                except BrokerStartFailed:
                    if attempt == PORT_ATTEMPTS or not self._picks_ports() or not lost_a_port(self.log_file):
                        raise
                    # the ports it picked were free, then taken before the JVM bound them (the
                    # machine's other servers pick ports too): pick others
                    record = {k: v for k, v in record.items() if k not in ("port", "controller_port")}
        raise AssertionError("unreachable")  # pragma: no cover

    def _picks_ports(self) -> bool:
        """Whether this broker picks its own ports (none given, not a node of a static quorum)."""
        return self.port is None and self.controller_port is None and self.quorum_voters is None

    def _start_once(self, java: str, libs: Path, record: Mapping[str, Any], timeout: float) -> str:
        """One start (under the data directory's lock) on ports from :meth:`_choose_ports`."""
        port, controller_port = self._choose_ports(record)
        cluster_id = self._cluster_id(record)
        secure = self._secure_setup(port, controller_port) if self.secure else None
        log4j, tools_log4j = self._write_configs(port, controller_port, secure)
        base = {
            "version": self.version,
            "cluster_id": cluster_id,
            "port": port,
            "controller_port": controller_port,
            "bootstrap": f"{LOOPBACK}:{port}",
            "node_id": self.node_id,
            "data_dir": str(self.data_dir),
            "libs": str(libs),
            "pid": None,
        }
        if secure is not None:
            base["secure"] = True
        if not (self.kraft_dir / "meta.properties").is_file():
            self._format(java, libs, tools_log4j, cluster_id,
                         _secure.scram_format_args(secure["users"]) if secure else ())
        _write_record(self.data_dir, base)
        proc = self._launch(java, libs, log4j)
        _write_record(self.data_dir, {**base, "pid": proc.pid, "started_at": time.time()})
        admin = self._admin_settings(base["bootstrap"], secure)
        self._await_ready(proc, base["bootstrap"], timeout, admin)
        if secure is not None:
            files = self._secure_ready(proc, base["bootstrap"], secure, admin)
            _write_record(self.data_dir, {**base, "pid": proc.pid, "started_at": time.time(),
                                          "client_properties": files})
        return base["bootstrap"]

    # secure ---------------------------------------------------------------
    @property
    def secure_dir(self) -> Path:
        return self.data_dir / _secure.SECURE_DIR

    def _check_mode(self, record: Mapping[str, Any]) -> None:
        """A data directory stays what it was formatted as (the SCRAM users exist from format)."""
        formatted = (self.kraft_dir / "meta.properties").is_file()
        was_secure = bool(record.get("secure")) or (self.secure_dir / _secure.USERS_FILE).is_file()
        if formatted and was_secure != self.secure:
            what = "with --secure" if was_secure else "without --secure"
            raise BrokerError(f"the broker in {self.data_dir} was set up {what}; start it the same way "
                              "or use another --data-dir")

    def _secure_setup(self, port: int, controller_port: int) -> dict[str, Any]:
        """The CA, the broker's certificate and keystore, the users; the server overrides."""
        pki = _secure.ensure_pki(self.secure_dir)
        _secure.write_keystore(pki)
        users = _secure.ensure_users(self.secure_dir)
        return {"pki": pki, "users": users,
                "overrides": _secure.server_overrides(port, controller_port, pki, users)}

    def _admin_settings(self, bootstrap: str, secure: Mapping[str, Any] | None) -> Any:
        from streams.kafka.settings import KafkaSettings

        if secure is None:
            return None
        props = _secure.client_properties(_secure.ADMIN, secure["users"][_secure.ADMIN], secure["pki"]["ca"])
        return KafkaSettings(bootstrap, properties=tuple(props.items()))

    def _secure_ready(self, proc: subprocess.Popen, bootstrap: str, secure: Mapping[str, Any],
                      admin: Any) -> dict[str, str]:
        """Grant each role its ACLs and write the client properties files (kill on failure)."""
        from streams.kafka.acls import acl_bindings, apply_acls
        from streams.kafka.topics import TopicNames

        try:
            apply_acls(admin, acl_bindings(TopicNames()))
        except BaseException as exc:
            self._kill(proc.pid, grace=5.0)
            self._clear_pid()
            if not isinstance(exc, Exception):
                raise
            raise BrokerStartFailed(f"the secure broker started but its ACLs could not be set: {exc}") from exc
        return _secure.write_client_files(self.secure_dir, secure["users"], secure["pki"]["ca"], bootstrap)

    def _write_configs(self, port: int, controller_port: int,
                       secure: Mapping[str, Any] | None = None) -> tuple[Path, Path]:
        """The server properties and the log4j2 configs of the broker and of the tools (written
        on every start); returns (broker log4j2 file, tools log4j2 file)."""
        extra = {**(secure["overrides"] if secure else {}), **self.extra_properties}
        props = server_properties(port, controller_port, self.kraft_dir, node_id=self.node_id, extra=extra,
                                  voters=self.quorum_voters)
        self.properties_file.write_text(
            render_properties(props, header="written by traintrace on every `broker start`; edits are lost"),
            encoding="utf-8",
        )
        log4j = self.data_dir / LOG4J_FILE
        log4j.write_text(render_log4j2_properties(self.log_file), encoding="utf-8")
        tools_log4j = self.data_dir / TOOLS_LOG4J_FILE
        tools_log4j.write_text(render_log4j2_properties(None, level="WARN"), encoding="utf-8")
        self._rotate_log()
        return log4j, tools_log4j

    def _jvm_flags(self) -> tuple[str, ...]:
        return JVM_MODES[jvm_mode(self.jvm)]

    def _class_share_flags(self, java: str, libs: Path) -> tuple[str, ...]:
        """The flags that map this JVM mode's class-data archive (:mod:`streams.devtools.class_share`);
        none yet when there is no archive, whose training this starts in the background."""
        mode = jvm_mode(self.jvm)
        archive = class_share.archive_path(libs, java_identity(java), mode)
        flags = class_share.use_flags(archive)
        if not flags:
            class_share.start_training(archive, java, libs, mode, self.version)
        return flags

    def _launch(self, java: str, libs: Path, log4j: Path) -> subprocess.Popen:
        """The broker's JVM, in its own session (it survives the CLI and its terminal). Its
        temporary files (the native compression libraries it unpacks: liblz4-java, snappy, zstd)
        go into its data directory: in /tmp, a broker that did not stop cleanly (killed, a lost
        machine) left them there for good, ~100 of them after a test suite's run."""
        tmp = self.data_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        cmd = [
            java,
            f"-Xms{self.heap_min}",
            f"-Xmx{self.heap_max}",
            *self._jvm_flags(),
            *self._class_share_flags(java, libs),
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Djava.io.tmpdir={tmp}",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            str(libs / "*"),
            "kafka.Kafka",
            str(self.properties_file),
        ]
        with open(self.log_file, "ab") as out:
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=die_with_parent(any_thread=True) if self.die_with_parent else None,
            )
        return self._proc

    def _await_ready(self, proc: subprocess.Popen, bootstrap: str, timeout: float, kafka: Any = None) -> None:
        """Wait until the broker answers; kill it (and say why, with its log's tail) if it exits
        or does not answer in time, or if we are interrupted meanwhile."""
        try:
            wait_until_ready(bootstrap, timeout, alive=lambda: proc.poll() is None, kafka=kafka)
        except BrokerStartFailed as exc:
            exited = proc.poll()
            self._kill(proc.pid, grace=5.0)
            self._clear_pid()
            tail = self.log_tail()
            if exited is not None:
                raise BrokerStartFailed(
                    f"the Kafka broker exited with code {exited} during start-up; see {self.log_file}",
                    log_tail=tail,
                ) from None
            raise BrokerStartTimeout(
                f"{exc.message}; the process was killed, see {self.log_file}", log_tail=tail
            ) from None
        except BaseException:  # KeyboardInterrupt & co: do not leave a half-started JVM
            self._kill(proc.pid, grace=5.0)
            self._clear_pid()
            raise

    def _check_port(self, port: int) -> None:
        if not port_is_free(port):
            raise PortInUse(
                f"port {port} on {LOOPBACK} is already in use; choose another (--port / "
                "TRAINTRACE_BROKER_PORT) or omit it to pick a free one",
                port,
            )

    def _choose_ports(self, record: Mapping[str, Any]) -> tuple[int, int]:
        if self.port is not None:
            self._check_port(self.port)
            port = self.port
        else:
            recorded = record.get("port")
            port = recorded if recorded and recorded != self.controller_port and port_is_free(recorded) else None
            port = port or pick_free_port(exclude={self.controller_port} if self.controller_port else set())
        if self.controller_port is not None:
            if self.controller_port == port:
                raise PortInUse(f"the controller port {port} equals the broker port; choose two ports", port)
            self._check_port(self.controller_port)
            cport = self.controller_port
        else:
            recorded = record.get("controller_port")
            cport = recorded if recorded and recorded != port and port_is_free(recorded) else None
            cport = cport or pick_free_port(exclude={port})
        return port, cport

    def _cluster_id(self, record: Mapping[str, Any]) -> str:
        meta = self.kraft_dir / "meta.properties"
        if meta.is_file():
            for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        return str(record.get("cluster_id") or new_cluster_id())

    def _format(self, java: str, libs: Path, tools_log4j: Path, cluster_id: str,
                extra_args: "tuple[str, ...] | list[str]" = ()) -> None:
        cmd = [
            java,
            "-Xmx256m",
            *JVM_MODES["lean"],  # a short tool run: the client compiler is all it needs
            *tool_class_share_flags(java, libs),
            f"-Dlog4j2.configurationFile={tools_log4j}",
            "-cp",
            str(libs / "*"),
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            cluster_id,
            "--config",
            str(self.properties_file),
            "--ignore-formatted",
            *extra_args,
        ]
        try:
            proc = subprocess.run(
                cmd, cwd=self.data_dir, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise StorageFormatFailed(
                f"formatting {self.kraft_dir} timed out; check the machine's load and retry"
            ) from None
        output = (proc.stdout + proc.stderr).strip()
        with open(self.log_file, "a", encoding="utf-8") as fh:
            fh.write(f"[traintrace] kafka-storage format --cluster-id {cluster_id}: exit {proc.returncode}\n")
            if output:
                fh.write(output + "\n")
        if proc.returncode != 0:
            last = next((ln for ln in reversed(output.splitlines()) if ln.strip()), "no output")
            raise StorageFormatFailed(
                f"formatting {self.kraft_dir} failed ({last.strip()[:200]}); remove {self.kraft_dir} "
                "to start from empty storage",
                _tail(output),
            )

    def _rotate_log(self) -> None:
        with contextlib.suppress(OSError):
            if self.log_file.stat().st_size > 0:
                os.replace(self.log_file, self.log_file.with_name(LOG_FILE + ".1"))

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of ``broker.log`` ('' when there is none)."""
        try:
            with open(self.log_file, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 64 * 1024))
                data = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return _tail(data, lines)

    # stop -----------------------------------------------------------------
    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM the broker, SIGKILL it after ``timeout`` s; True if it was running."""
        with _file_lock(self.data_dir / ".lock"):
            record = read_record(self.data_dir)
            pid = self._running_pid(record)
            if pid is None:
                if record and record.get("pid"):
                    self._clear_pid()
                return False
            self._kill(pid, grace=timeout)
            self._clear_pid()
            return True

    def _kill(self, pid: int, grace: float) -> None:
        marker = str(self.properties_file)
        proc = self._proc if self._proc is not None and self._proc.pid == pid else None

        def gone() -> bool:
            if proc is not None:
                return proc.poll() is not None
            return not _pid_alive(pid, marker=marker)

        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            if gone():
                break
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while not gone() and time.monotonic() < deadline:
                time.sleep(0.1)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
            self._proc = None

    def _clear_pid(self) -> None:
        record = read_record(self.data_dir)
        if record is not None:
            record["pid"] = None
            record.pop("started_at", None)
            _write_record(self.data_dir, record)

    # context manager ----------------------------------------------------------
    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_running_broker(data_dir: str | os.PathLike[str] | None = None) -> LocalBroker | None:
    """The broker recorded in ``data_dir`` (default :func:`default_data_dir`) if it is running."""
    broker = LocalBroker.from_data_dir(data_dir)
    return broker if broker is not None and broker.is_running() else None


# --------------------------------------------------------------------------- docker compose

DOCKER_BOOTSTRAP = "localhost:9092"


def _docker() -> str:
    docker = shutil.which("docker")
    if docker is None:
        raise DockerUnavailable(
            "docker is not installed; run `traintrace broker start` without --docker (Kafka on the local JVM)"
        )
    try:
        info = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise DockerUnavailable("the Docker engine does not answer; start it or run without --docker") from None
    if info.returncode != 0:
        last = next((ln for ln in reversed((info.stderr or info.stdout).splitlines()) if ln.strip()), "")
        raise DockerUnavailable(
            f"the Docker engine is not reachable ({last.strip()[:160]}); start it or run without --docker",
            info.stderr,
        )
    compose = subprocess.run(
        [docker, "compose", "version"], capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL
    )
    if compose.returncode != 0:
        raise DockerUnavailable("`docker compose` (the Compose v2 plugin) is missing; install it or run without --docker")
    return docker


def _compose(compose_file: str | os.PathLike[str], args: list[str], timeout: float) -> None:
    path = Path(compose_file).expanduser().resolve()
    if not path.is_file():
        raise DockerUnavailable(f"compose file {path} not found; run from the repository root or pass its path")
    docker = _docker()
    try:
        proc = subprocess.run(
            [docker, "compose", "-f", str(path), *args],
            cwd=path.parent, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise DockerUnavailable(f"`docker compose {' '.join(args)}` did not finish within {timeout:.0f}s") from None
    if proc.returncode != 0:
        out = _tail(proc.stdout + "\n" + proc.stderr)
        last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "no output")
        raise DockerUnavailable(f"`docker compose {args[0]}` failed: {last.strip()[:200]}", out)


def docker_compose_up(
    compose_file: str | os.PathLike[str] = "docker-compose.yml",
    services: list[str] | None = None,
    *,
    timeout: float = 300.0,
    wait: bool = True,
) -> str:
    """``docker compose up -d`` (default services: kafka + topics); returns ``localhost:9092``."""
    started = time.monotonic()
    _compose(compose_file, ["up", "-d", *(services or [])], timeout)
    if wait:
        remaining = max(5.0, timeout - (time.monotonic() - started))
        wait_until_ready(DOCKER_BOOTSTRAP, remaining)
    return DOCKER_BOOTSTRAP


def docker_compose_down(
    compose_file: str | os.PathLike[str] = "docker-compose.yml",
    *,
    volumes: bool = False,
    timeout: float = 120.0,
) -> None:
    """``docker compose down`` (``-v`` also drops the broker's data volume)."""
    _compose(compose_file, ["down", *(["-v"] if volumes else [])], timeout)


def running_bootstrap() -> str | None:
    """The bootstrap of the local broker (``traintrace broker start``) if it runs; never starts
    it: the default an entry point may give ``WorkerSettings.from_env``."""
    try:
        return LocalBroker(default_data_dir()).status().get("bootstrap")
    except Exception:  # noqa: BLE001 - no local broker record: not an error here
        return None
