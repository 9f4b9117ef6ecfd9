"""A three-node Apache Kafka cluster on 127.0.0.1, run on the local JVM like :class:`LocalBroker`.

One Kafka node keeps the record on one disk; three keep it on three, and an ``acks=all`` write
with ``min.insync.replicas=2`` survives the loss of any one of them. Each node is *combined*
(broker and controller in one JVM): three JVMs instead of six on a laptop, and the three
controllers form a static three-voter quorum (``controller.quorum.voters``), so the cluster also
survives the loss of its active controller. Each node is a :class:`ClusterNode`, a
:class:`LocalBroker` with a node id and the voters, in its own directory::

    data_dir/
      cluster.json         nodes, ports, pids, cluster id, version (marks a cluster data dir)
      secure/              with ``secure=True``: one CA, one broker certificate (every node is
                           127.0.0.1), the SCRAM users (formatted on each node), client files
      node-1/ node-2/ ...  a LocalBroker data dir each: broker.json, server.properties, kraft/...

Internal topics are replicated three times, topics created without a replication factor too,
``min.insync.replicas`` is 2 and no unclean leader election (:func:`cluster_properties`).

The fault suite drives single nodes: :meth:`LocalCluster.kill`, ``pause``/``resume`` (SIGSTOP /
SIGCONT), ``stop_node``/``start_node``, :meth:`LocalCluster.leader_of` and
:meth:`LocalCluster.active_controller` (the KRaft quorum leader, asked with the Java Admin's
``describeMetadataQuorum``: the controller DescribeCluster reports in KRaft is any broker).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from streams.devtools import secure as _secure
from streams.devtools.broker import (
    CLUSTER_RECORD_FILE,
    LOOPBACK,
    RECORD_FILE,
    JVM_MODES,
    BrokerError,
    BrokerStartFailed,
    BrokerStartTimeout,
    PORT_ATTEMPTS,
    LocalBroker,
    PortInUse,
    _file_lock,
    _pid_alive,
    _write_record,
    default_data_dir,
    find_java,
    kafka_version,
    lost_a_port,
    new_cluster_id,
    pick_free_port,
    port_is_free,
    read_record,
    render_log4j2_properties,
    resolve_jars,
    tool_class_share_flags,
    wait_until_ready,
)

__all__ = ["ClusterNode", "LocalCluster", "cluster_properties", "is_cluster_dir", "quorum_voters",
           "read_cluster_record"]

DEFAULT_NODES = 3
QUORUM_TOOL = "QuorumLeader.java"


def quorum_voters(controller_ports: Sequence[int]) -> str:
    """``controller.quorum.voters`` of nodes 1..N on 127.0.0.1: ``1@127.0.0.1:c1,2@...``."""
    return ",".join(f"{i}@{LOOPBACK}:{port}" for i, port in enumerate(controller_ports, start=1))


def cluster_properties(nodes: int) -> dict[str, str]:
    """The server properties every node of an ``nodes``-node cluster adds to
    :func:`~streams.devtools.broker.server_properties`: internal topics and topics created without
    a factor replicated ``min(3, nodes)`` times, ``min.insync.replicas`` 2 from three replicas
    on, never an unclean leader election."""
    rf = max(1, min(3, nodes))
    isr = 2 if rf >= 3 else 1
    return {
        "default.replication.factor": str(rf),
        "min.insync.replicas": str(isr),
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": str(rf),
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(isr),
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": str(isr),
    }


def read_cluster_record(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The content of ``data_dir/cluster.json`` (None when absent or unreadable)."""
    try:
        return json.loads((Path(data_dir) / CLUSTER_RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_cluster_dir(data_dir: str | os.PathLike[str] | None) -> bool:
    """True when ``data_dir`` (default :func:`default_data_dir`) holds a cluster."""
    path = Path(data_dir).expanduser().resolve() if data_dir is not None else default_data_dir()
    return (path / CLUSTER_RECORD_FILE).is_file()


def _write_json(path: Path, record: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(dict(record), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class ClusterNode(LocalBroker):
    """One combined node of a :class:`LocalCluster`: a LocalBroker in ``<cluster>/node-<id>``
    with its node id, the quorum's voters, the cluster's id and (secure) the cluster's PKI."""

    def __init__(self, cluster_dir: Path, node_id: int, port: int, controller_port: int, voters: str,
                 cluster_id: str, **kwargs: Any) -> None:
        super().__init__(cluster_dir / f"node-{node_id}", port, controller_port, **kwargs)
        self.cluster_dir = cluster_dir
        self.node_id = node_id
        self.quorum_voters = voters
        self.cluster_id = cluster_id

    def __repr__(self) -> str:
        return f"ClusterNode(node_id={self.node_id}, port={self.port}, data_dir={str(self.data_dir)!r})"

    @property
    def secure_dir(self) -> Path:  # one CA, one certificate, one set of users for every node
        return self.cluster_dir / _secure.SECURE_DIR

    @property
    def pid(self) -> int | None:
        """The pid of this node's JVM while it runs (a paused one runs), else None."""
        return self._running_pid(read_record(self.data_dir))

    @property
    def bootstrap_address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def _cluster_id(self, record: Mapping[str, Any]) -> str:
        formatted = super()._cluster_id({})
        meta = (self.kraft_dir / "meta.properties").is_file()
        return formatted if meta else self.cluster_id

    def launch(self, java: str, libs: Path, *, format_only: bool = False) -> subprocess.Popen | None:
        """Write this node's configs, format its storage once, start its JVM (the caller's thread
        becomes its parent: with ``die_with_parent`` that thread must outlive it)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with _file_lock(self.data_dir / ".lock"):
            record = read_record(self.data_dir) or {}
            if self._running_pid(record) is not None:
                return None
            self._check_mode(record)
            for port in (self.port, self.controller_port):
                self._check_port(port)
            secure = self._secure_setup(self.port, self.controller_port) if self.secure else None
            log4j, tools_log4j = self._write_configs(self.port, self.controller_port, secure)
            base = {"version": self.version, "cluster_id": self.cluster_id, "port": self.port,
                    "controller_port": self.controller_port, "bootstrap": self.bootstrap_address,
                    "node_id": self.node_id, "data_dir": str(self.data_dir), "libs": str(libs), "pid": None,
                    **({"secure": True} if secure else {})}
            if not (self.kraft_dir / "meta.properties").is_file():
                self._format(java, libs, tools_log4j, self.cluster_id,
                             _secure.scram_format_args(secure["users"]) if secure else ())
            _write_record(self.data_dir, base)
            if format_only:
                return None
            proc = self._launch(java, libs, log4j)
            _write_record(self.data_dir, {**base, "pid": proc.pid, "started_at": time.time()})
            return proc

    def signal(self, sig: int) -> int:
        """Send ``sig`` to this node's JVM; its pid (BrokerError when it does not run)."""
        pid = self.pid
        if pid is None:
            raise BrokerError(f"node {self.node_id} of the cluster in {self.cluster_dir} is not running; "
                              f"start it with start_node({self.node_id})")
        os.kill(pid, sig)
        return pid

    def wait_gone(self, pid: int, timeout: float = 15.0) -> None:
        """Wait until ``pid`` has exited (reaped when it is our child); then forget it."""
        deadline = time.monotonic() + timeout
        proc = self._proc if self._proc is not None and self._proc.pid == pid else None
        while time.monotonic() < deadline:
            if (proc.poll() is not None) if proc is not None else not _pid_alive(pid, str(self.properties_file)):
                break
            time.sleep(0.05)
        else:
            raise BrokerError(f"node {self.node_id} (pid {pid}) did not exit within {timeout:.0f}s")
        self._proc = None
        self._clear_pid()


class LocalCluster:
    """``nodes`` combined KRaft nodes on 127.0.0.1, their state under ``data_dir``.

    ``port``: the first node's client port (the others pick free ports); None = the ports of the
    last start when still free, else free ones. Other keywords as :class:`LocalBroker`.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        nodes: int = DEFAULT_NODES,
        port: int | None = None,
        version: str | None = None,
        *,
        controller_port: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        heap_max: str = "512m",
        heap_min: str = "256m",
        extra_properties: Mapping[str, Any] | None = None,
        die_with_parent: bool = False,
        secure: bool = False,
        jvm: str | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster has at least one node")
        self.data_dir = Path(data_dir).expanduser().resolve() if data_dir is not None else default_data_dir()
        record = read_cluster_record(self.data_dir) or {}
        self.size = len(record.get("nodes") or []) or nodes
        self.port = port
        self.controller_port = controller_port
        self.version = version or record.get("version") or kafka_version()
        self.cache_dir = cache_dir
        self.secure = secure
        self._node_kwargs = {"version": self.version, "cache_dir": cache_dir, "heap_max": heap_max,
                             "heap_min": heap_min, "die_with_parent": die_with_parent, "secure": secure,
                             "jvm": jvm, "extra_properties": {**cluster_properties(self.size), **(extra_properties or {})}}
        self.nodes: list[ClusterNode] = self._nodes_from(record) if record.get("nodes") else []

    def __repr__(self) -> str:
        return f"LocalCluster(data_dir={str(self.data_dir)!r}, nodes={self.size})"

    @property
    def record_file(self) -> Path:
        return self.data_dir / CLUSTER_RECORD_FILE

    @classmethod
    def from_data_dir(cls, data_dir: str | os.PathLike[str] | None = None) -> "LocalCluster | None":
        """The cluster recorded in ``data_dir`` (running or not), or None."""
        path = Path(data_dir).expanduser().resolve() if data_dir is not None else default_data_dir()
        record = read_cluster_record(path)
        if record is None:
            return None
        return cls(path, len(record.get("nodes") or []) or DEFAULT_NODES, secure=bool(record.get("secure")))

    # nodes ----------------------------------------------------------------------------
    def _nodes_from(self, record: Mapping[str, Any]) -> list[ClusterNode]:
        ports = [(int(n["port"]), int(n["controller_port"])) for n in record["nodes"]]
        return self._make_nodes(ports, str(record["cluster_id"]))

    def _make_nodes(self, ports: Sequence[tuple[int, int]], cluster_id: str) -> list[ClusterNode]:
        voters = quorum_voters([c for _p, c in ports])
        return [ClusterNode(self.data_dir, i, p, c, voters, cluster_id, **self._node_kwargs)
                for i, (p, c) in enumerate(ports, start=1)]

    def node(self, node_id: int) -> ClusterNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise BrokerError(f"the cluster in {self.data_dir} has no node {node_id} "
                          f"(nodes {[n.node_id for n in self.nodes]})")

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:p1,127.0.0.1:p2,...`` (every node, running or not)."""
        return ",".join(n.bootstrap_address for n in self.nodes)

    def _choose_ports(self, record: Mapping[str, Any]) -> list[tuple[int, int]]:
        recorded = [(int(n["port"]), int(n["controller_port"])) for n in record.get("nodes") or []]
        taken: set[int] = set()
        out: list[tuple[int, int]] = []
        for i in range(self.size):
            pair = []
            for j, given in enumerate((self.port, self.controller_port) if i == 0 else (None, None)):
                if given is not None:
                    if given in taken or not port_is_free(given):
                        raise PortInUse(f"port {given} on {LOOPBACK} is already in use; choose another "
                                        "(--port / --controller-port) or omit it", given)
                    port = given
                else:
                    old = recorded[i][j] if i < len(recorded) else None
                    port = old if old and old not in taken and port_is_free(old) else pick_free_port(taken)
                taken.add(port)
                pair.append(port)
            out.append((pair[0], pair[1]))
        return out

    # state ----------------------------------------------------------------------------
    def is_running(self) -> bool:
        """True when every node's JVM runs."""
        return bool(self.nodes) and all(n.pid is not None for n in self.nodes)

    def status(self) -> dict[str, Any]:
        """``{running, nodes: [{node_id, port, controller_port, pid, running, log_file}], bootstrap,
        data_dir, version, cluster_id, running_nodes}``; ``running`` is True when every node runs."""
        record = read_cluster_record(self.data_dir) or {}
        nodes = [{"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port,
                  "pid": n.pid, "running": n.pid is not None, "log_file": str(n.log_file)} for n in self.nodes]
        up = sum(1 for n in nodes if n["running"])
        return {
            "cluster": True,
            "running": bool(nodes) and up == len(nodes),
            "running_nodes": up,
            "nodes": nodes,
            "bootstrap": self.bootstrap if up else None,
            "data_dir": str(self.data_dir),
            "version": record.get("version") or self.version,
            "cluster_id": record.get("cluster_id"),
            **({"secure": True, "client_properties": record.get("client_properties", {})}
               if record.get("secure") else {}),
        }

    def _save(self, cluster_id: str, **extra: Any) -> None:
        old = read_cluster_record(self.data_dir) or {}
        nodes = [{"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port, "pid": n.pid,
                  "data_dir": str(n.data_dir)} for n in self.nodes]
        keep = {k: v for k, v in old.items() if k in ("client_properties",)}
        _write_json(self.record_file, {**keep, "cluster": True, "version": self.version, "cluster_id": cluster_id,
                                       "bootstrap": self.bootstrap, "nodes": nodes,
                                       **({"secure": True} if self.secure else {}), **extra})

    # start ----------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> str:
        """Start every node (or find them running) and return the bootstrap of all of them, once
        each node answers with metadata listing every broker. Nodes are launched from the calling
        thread; with ``die_with_parent`` that thread must outlive the cluster."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if (self.data_dir / RECORD_FILE).is_file():
            raise BrokerError(f"{self.data_dir} holds a single broker (started without --nodes); start it "
                              "that way or use another --data-dir")
        with _file_lock(self.data_dir / ".lock"):
            record = read_cluster_record(self.data_dir) or {}
            if self.nodes and self.is_running():
                return self.bootstrap
            if record.get("nodes") and bool(record.get("secure")) != self.secure:
                what = "with --secure" if record.get("secure") else "without --secure"
                raise BrokerError(f"the cluster in {self.data_dir} was set up {what}; start it the same way "
                                  "or use another --data-dir")
            running = [n for n in self.nodes if n.pid is not None]
            java, libs = find_java(), resolve_jars(self.version, self.cache_dir)
            cluster_id = str(record.get("cluster_id") or new_cluster_id())
            for attempt in range(1, PORT_ATTEMPTS + 1):
                if running:  # a partial cluster: keep its ports, start the missing nodes
                    ports = [(n.port, n.controller_port) for n in self.nodes]
                else:
                    ports = self._choose_ports(record)
                self.nodes = self._make_nodes(ports, cluster_id)
                self._save(cluster_id)
                try:
                    self._format_all(java, libs)
                    procs = [p for p in (n.launch(java, libs) for n in self.nodes) if p is not None]
                    self._save(cluster_id, started_at=time.time())
                    self._await_all(timeout, procs)
                    break
                except (BrokerStartFailed, PortInUse) as exc:
                    # ports it picked free were taken before a node bound them (the machine's other
                    # servers pick ports too: a fault suite's cluster was lost so): pick others
                    lost = isinstance(exc, PortInUse) or any(lost_a_port(n.log_file) for n in self.nodes)
                    if attempt == PORT_ATTEMPTS or running or self.port is not None \
                            or self.controller_port is not None or not lost:
                        raise
                    self._kill_all(grace=5.0)  # the nodes launched before one found its port taken
                    record = {k: v for k, v in record.items() if k != "nodes"}
            if self.secure:
                self._secure_ready(cluster_id)
            return self.bootstrap

    def _format_all(self, java: str, libs: Path) -> None:
        """Format the nodes' storage concurrently (a JVM each, only the first time)."""
        todo = [n for n in self.nodes if not (n.kraft_dir / "meta.properties").is_file()]
        if self.secure and todo:  # the shared PKI and users are made once, before the threads
            todo[0].launch(java, libs, format_only=True)
            todo = todo[1:]
        with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:
            for fut in [pool.submit(n.launch, java, libs, format_only=True) for n in todo]:
                fut.result()

    def _alive(self) -> bool:
        return all(n.pid is not None for n in self.nodes)

    def _await_all(self, timeout: float, procs: list[subprocess.Popen]) -> None:
        """Each node answers metadata listing all nodes; else kill them all and say which died."""
        deadline = time.monotonic() + timeout
        try:
            for node in self.nodes:
                wait_until_ready(node.bootstrap_address, max(1.0, deadline - time.monotonic()), alive=self._alive,
                                 kafka=self._settings(node.bootstrap_address), brokers=self.size)
        except BrokerStartFailed as exc:
            dead = [n for n in self.nodes if n.pid is None]
            self._kill_all(grace=5.0)
            if dead:
                raise BrokerStartFailed(f"node {dead[0].node_id} of the cluster exited during start-up; "
                                        f"see {dead[0].log_file}", log_tail=dead[0].log_tail()) from None
            raise BrokerStartTimeout(f"{exc.message}; the cluster was killed, see the node logs in "
                                     f"{self.data_dir}", log_tail=self.nodes[0].log_tail()) from None
        except BaseException:
            self._kill_all(grace=5.0)
            raise

    def _secure_ready(self, cluster_id: str) -> None:
        from streams.kafka.acls import acl_bindings, apply_acls
        from streams.kafka.topics import TopicNames

        node = self.nodes[0]
        pki, users = _secure.ensure_pki(node.secure_dir), _secure.ensure_users(node.secure_dir)
        try:
            apply_acls(self._settings(self.bootstrap), acl_bindings(TopicNames()))
        except Exception as exc:
            self._kill_all(grace=5.0)
            raise BrokerStartFailed(f"the secure cluster started but its ACLs could not be set: {exc}") from exc
        files = _secure.write_client_files(node.secure_dir, users, pki["ca"], self.bootstrap)
        self._save(cluster_id, started_at=time.time(), client_properties=files)

    def _settings(self, bootstrap: str) -> Any:
        """The admin's KafkaSettings on this cluster (PLAINTEXT, or the admin user when secure)."""
        from streams.kafka.settings import KafkaSettings

        if not self.secure:
            return KafkaSettings(bootstrap)
        secure_dir = self.data_dir / _secure.SECURE_DIR
        users, pki = _secure.ensure_users(secure_dir), _secure.ensure_pki(secure_dir)
        props = _secure.client_properties(_secure.ADMIN, users[_secure.ADMIN], pki["ca"])
        return KafkaSettings(bootstrap, properties=tuple(props.items()))

    # stop -----------------------------------------------------------------------------
    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM every node at once, SIGKILL after ``timeout`` s; True if one was running."""
        with _file_lock(self.data_dir / ".lock"):
            was = any(n.pid is not None for n in self.nodes)
            self._kill_all(grace=timeout)
            if self.nodes and read_cluster_record(self.data_dir):
                self._save(str((read_cluster_record(self.data_dir) or {}).get("cluster_id")))
            return was

    def _kill_all(self, grace: float) -> None:
        live = [(n, n.pid) for n in self.nodes]
        live = [(n, pid) for n, pid in live if pid is not None]
        if not live:
            return
        with ThreadPoolExecutor(max_workers=len(live)) as pool:
            for fut in [pool.submit(n._kill, pid, grace) for n, pid in live]:
                fut.result()
        for n, _pid in live:
            n._clear_pid()

    # one node (the fault suite) -----------------------------------------------------------
    def kill(self, node_id: int, sig: int = signal.SIGKILL, timeout: float = 15.0) -> int:
        """Send ``sig`` to node ``node_id``; with SIGKILL/SIGTERM wait until it is gone. Its pid."""
        node = self.node(node_id)
        pid = node.signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            node.wait_gone(pid, timeout)
        return pid

    def pause(self, node_id: int) -> int:
        """SIGSTOP node ``node_id`` (it stops answering; its sessions expire)."""
        return self.node(node_id).signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> int:
        """SIGCONT node ``node_id``."""
        return self.node(node_id).signal(signal.SIGCONT)

    def stop_node(self, node_id: int, timeout: float = 30.0) -> bool:
        """Stop node ``node_id`` cleanly (SIGTERM: controlled shutdown; SIGKILL after ``timeout``)."""
        return self.node(node_id).stop(timeout=timeout)

    def start_node(self, node_id: int, timeout: float = 60.0) -> None:
        """Start node ``node_id`` again on its data and ports; return once it answers with
        metadata listing every node."""
        node = self.node(node_id)
        proc = node.launch(find_java(), resolve_jars(self.version, self.cache_dir))
        if proc is None:
            return
        try:
            wait_until_ready(node.bootstrap_address, timeout, alive=lambda: proc.poll() is None,
                             kafka=self._settings(node.bootstrap_address), brokers=self.size)
        except BaseException:
            node._kill(proc.pid, grace=5.0)
            node._clear_pid()
            raise
        finally:
            record = read_cluster_record(self.data_dir) or {}
            self._save(str(record.get("cluster_id") or node.cluster_id))

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The node id leading ``topic``/``partition`` now (-1 while it has none)."""
        admin = self._settings(self.bootstrap).admin()
        md = admin.list_topics(topic=topic, timeout=timeout)
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None or partition not in meta.partitions:
            raise BrokerError(f"topic {topic} partition {partition} is not in the cluster's metadata "
                              f"({meta.error if meta is not None else 'no such topic'})")
        return int(meta.partitions[partition].leader)

    def coordinator_of(self, group: str, timeout: float = 10.0) -> int:
        """The node id coordinating consumer group ``group`` now."""
        admin = self._settings(self.bootstrap).admin()
        fut = admin.describe_consumer_groups([group], request_timeout=timeout)[group]
        return int(fut.result().coordinator.id)

    def active_controller(self, timeout: float = 30.0) -> int:
        """The node id of the KRaft quorum's leader (the active controller)."""
        java, libs = find_java(), resolve_jars(self.version, self.cache_dir)
        tool = self._quorum_tool()
        args = self._quorum_client_args()
        cmd = [java, "-Xmx128m", *JVM_MODES["lean"], *tool_class_share_flags(java, libs), f"-Dlog4j2.configurationFile={tool.with_suffix('.log4j2.properties')}",
               "-cp", str(libs / "*"), str(tool), *args]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30,
                                 stdin=subprocess.DEVNULL, cwd=self.data_dir)
        except subprocess.TimeoutExpired:
            raise BrokerError(f"describing the KRaft quorum of {self.data_dir} timed out; is the cluster up?") from None
        found = re.search(r"^LeaderId: (-?\d+)$", out.stdout, re.M)
        if out.returncode != 0 or found is None or int(found.group(1)) < 0:
            last = next((ln for ln in reversed((out.stderr + out.stdout).splitlines()) if ln.strip()), "no output")
            raise BrokerError(f"could not describe the KRaft quorum of {self.data_dir} ({last.strip()[:200]}); "
                              "is the cluster up?")
        return int(found.group(1))

    def _quorum_client_args(self) -> list[str]:
        """``key=value`` properties of the Java Admin asking for the quorum."""
        if not self.secure:
            controllers = ",".join(f"{LOOPBACK}:{n.controller_port}" for n in self.nodes)
            return [f"bootstrap.controllers={controllers}"]
        secure_dir = self.data_dir / _secure.SECURE_DIR
        users, pki = _secure.ensure_users(secure_dir), _secure.ensure_pki(secure_dir)
        return [f"bootstrap.servers={self.bootstrap}", "security.protocol=SASL_SSL",
                f"sasl.mechanism={_secure.MECHANISM}",
                f"sasl.jaas.config={_secure._jaas(_secure.ADMIN, users[_secure.ADMIN])}",
                "ssl.truststore.type=PEM", f"ssl.truststore.location={pki['ca']}"]

    def _quorum_tool(self) -> Path:
        """A single-file Java program (run by ``java`` from source, JDK 11+) printing the leader."""
        tool = self.data_dir / QUORUM_TOOL
        if not tool.is_file() or tool.read_text(encoding="utf-8") != _QUORUM_SOURCE:
            tool.write_text(_QUORUM_SOURCE, encoding="utf-8")
        log4j = tool.with_suffix(".log4j2.properties")
        if not log4j.is_file():
            log4j.write_text(render_log4j2_properties(None, level="ERROR"), encoding="utf-8")
        return tool

    # context manager --------------------------------------------------------------------
    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_QUORUM_SOURCE = """\
// written by traintrace (streams.devtools.cluster): prints the KRaft quorum leader's node id
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;

public class QuorumLeader {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("request.timeout.ms", "10000");
        props.put("default.api.timeout.ms", "25000");
        for (String arg : args) {
            int eq = arg.indexOf('=');
            props.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        try (Admin admin = Admin.create(props)) {
            System.out.println("LeaderId: " + admin.describeMetadataQuorum().quorumInfo().get().leaderId());
        }
    }
}
"""
