"""A three-node local cluster for real: replicated topics, ``acks=all`` through the loss of a
partition leader (SIGKILL), the active controller, a node restarted on its data, a clean stop.

It starts its own cluster in a temporary directory (whatever ``KAFKA_BOOTSTRAP_SERVERS`` says),
its JVMs tied to this process (``die_with_parent``)."""

from __future__ import annotations

import logging
import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from streams.devtools.broker import BrokerError, JavaMissing, MavenMissing
from streams.devtools.cluster import LocalCluster
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import (
    TopicNames,
    check_replication,
    ensure_topics,
    replication_findings,
    standard_topics,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("kafka-cluster"), 3, die_with_parent=True)
    try:
        c.start(timeout=120)
    except (JavaMissing, MavenMissing) as exc:
        pytest.skip(f"no Kafka for the cluster test: {exc}")
    except BrokerError as exc:
        pytest.fail(f"could not start the test cluster: {exc}\n{exc.detail or ''}", pytrace=False)
    try:
        yield c
    finally:
        c.stop(timeout=30)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000,
                         # its "connection refused" to a stopped node goes to pytest's log, not CI's output
                         "logger": logging.getLogger("tests.cluster.producer")})
    errors: list[object] = []
    for v in values:
        producer.produce(topic, key=v, value=v, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(70) == 0
    assert not errors, errors


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_three_nodes_replicate_and_survive_a_leader_kill(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap
    assert len(bootstrap.split(",")) == 3
    st = cluster.status()
    assert st["running"] and [n["node_id"] for n in st["nodes"]] == [1, 2, 3]
    assert all(n["pid"] for n in st["nodes"])

    # the standard topics: RF 3, min ISR 2, unclean off; the worker's check finds nothing
    names = TopicNames.from_env(f"cl{uuid.uuid4().hex[:6]}.")
    kafka = KafkaSettings(bootstrap)
    ensure_topics(kafka, standard_topics(names, 3))
    admin = kafka.admin()
    # the node a metadata request reaches may not know the new topics yet (a loaded machine)
    deadline = time.monotonic() + 60
    while True:
        md = admin.list_topics(timeout=10)
        if set(names.all().values()) <= set(md.topics) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(md.brokers) == 3
    for topic in names.all().values():
        assert all(len(p.replicas) == 3 for p in md.topics[topic].partitions.values()), topic
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.TOPIC, names.events)
    while True:  # as above: the node asked may not know the topic yet
        try:
            conf = admin.describe_configs([res])[res].result(timeout=30)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert conf["min.insync.replicas"].value == "2"
    assert conf["unclean.leader.election.enable"].value == "false"
    assert replication_findings(kafka, names) == []
    check_replication(kafka, names)

    # acks=all, then SIGKILL the leader of partition 0: produce and consume still work
    topic = names.events
    first = [f"a{i}".encode() for i in range(50)]
    _produce(bootstrap, topic, first)
    leader = cluster.leader_of(topic, 0)
    assert leader in (1, 2, 3)
    killed_pid = cluster.kill(leader, signal.SIGKILL)
    assert cluster.node(leader).pid is None and not cluster.status()["running"]
    assert cluster.status()["running_nodes"] == 2
    second = [f"b{i}".encode() for i in range(50)]
    _produce(bootstrap, topic, second)
    assert sorted(_consume_all(bootstrap, topic, 100)) == sorted(first + second)
    assert cluster.leader_of(topic, 0) != leader

    # the quorum still has a leader (the KRaft active controller), which is a live node
    controller = cluster.active_controller()
    assert controller in {1, 2, 3} - {leader}

    # the killed node comes back on its data and ports
    cluster.start_node(leader, timeout=60)
    assert cluster.status()["running"]
    assert cluster.node(leader).pid not in (None, killed_pid)
    assert len(admin.list_topics(timeout=10).brokers) == 3
    _produce(bootstrap, topic, [b"c"])


def test_pause_and_resume_keep_the_process(cluster: LocalCluster) -> None:
    node = cluster.nodes[-1]
    pid = cluster.pause(node.node_id)
    try:
        assert node.pid == pid  # a stopped process still runs
    finally:
        assert cluster.resume(node.node_id) == pid


def test_stop_stops_every_node(cluster: LocalCluster) -> None:
    pids = [n.pid for n in cluster.nodes]
    assert all(pids)
    assert cluster.stop(timeout=30)
    st = cluster.status()
    assert st["running_nodes"] == 0 and st["bootstrap"] is None
    assert not cluster.stop()


def test_a_cluster_whose_picked_port_is_taken_before_a_node_binds_it_picks_others(tmp_path, monkeypatch):
    """A port picked free can be taken before a node's JVM binds it (the machine's other servers
    pick ports too): a CI run lost the fault suite's cluster so, and ten tests with it. A cluster
    that picks its own ports starts again on others."""
    import socket

    from streams.devtools import cluster as mod

    pick, taken = mod.pick_free_port, []
    thief = socket.socket()

    def pick_then_lose(exclude=frozenset(), host="127.0.0.1"):
        port = pick(exclude, host)
        if not taken:  # the first node's client port is taken right after it was found free
            thief.bind((host, port))
            thief.listen()
            taken.append(port)
        return port

    monkeypatch.setattr(mod, "pick_free_port", pick_then_lose)
    c = LocalCluster(tmp_path / "raced", 2, die_with_parent=True)
    try:
        bootstrap = c.start(timeout=120)
        assert taken and f"127.0.0.1:{taken[0]}" not in bootstrap.split(",")
        md = KafkaSettings(bootstrap).admin().list_topics(timeout=10)
        assert len(md.brokers) == 2
    finally:
        c.stop(timeout=30)
        thief.close()
