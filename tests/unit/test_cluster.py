"""The local cluster's pure pieces (no broker): voters, properties, the record, port choice,
and the replication findings the worker checks at start."""

from __future__ import annotations

import json

import pytest

from streams.devtools import broker
from streams.devtools.broker import BrokerError, LocalBroker, PortInUse, server_properties
from streams.devtools.cluster import (
    ClusterNode,
    LocalCluster,
    cluster_properties,
    is_cluster_dir,
    quorum_voters,
)
from streams.kafka.errors import KafkaAdapterError
from streams.kafka.topics import (
    SNAPSHOT_CONFIG,
    AUDIT_TOPICS,
    TopicNames,
    UnderReplicatedError,
    standard_topics,
    topic_config_findings,
    topic_replication_findings,
)


def test_quorum_voters_name_every_node_on_loopback():
    assert quorum_voters([9101, 9102, 9103]) == "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"


def test_server_properties_take_the_voters_and_the_node_id():
    single = server_properties(9092, 9093, "/x")
    assert single["controller.quorum.voters"] == "1@127.0.0.1:9093" and single["node.id"] == "1"
    voters = quorum_voters([9093, 9095, 9097])
    node = server_properties(9094, 9095, "/x", node_id=2, voters=voters, extra=cluster_properties(3))
    assert node["controller.quorum.voters"] == voters and node["node.id"] == "2"
    assert node["process.roles"] == "broker,controller"
    assert node["listeners"] == "PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9095"


@pytest.mark.parametrize("nodes, rf, isr", [(1, "1", "1"), (2, "2", "1"), (3, "3", "2"), (5, "3", "2")])
def test_cluster_properties_replicate_internal_topics(nodes, rf, isr):
    props = cluster_properties(nodes)
    assert props["offsets.topic.replication.factor"] == rf
    assert props["transaction.state.log.replication.factor"] == rf
    assert props["transaction.state.log.min.isr"] == isr
    assert props["share.coordinator.state.topic.replication.factor"] == rf
    assert props["share.coordinator.state.topic.min.isr"] == isr
    assert props["default.replication.factor"] == rf and props["min.insync.replicas"] == isr
    assert props["unclean.leader.election.enable"] == "false"


def test_node_writes_its_own_configs_in_its_own_dir(tmp_path):
    voters = quorum_voters([7001, 7003, 7005])
    node = ClusterNode(tmp_path, 3, 7004, 7005, voters, "cid", extra_properties=cluster_properties(3))
    assert node.data_dir == tmp_path / "node-3" and node.secure_dir == tmp_path / "secure"
    node.data_dir.mkdir()
    node._write_configs(7004, 7005)
    text = node.properties_file.read_text()
    assert "node.id=3\n" in text and "offsets.topic.replication.factor=3\n" in text
    assert "controller.quorum.voters=" + voters.replace(":", "\\:") in text or voters in text
    assert node._cluster_id({}) == "cid"  # not formatted yet: the cluster's id
    (node.kraft_dir).mkdir()
    (node.kraft_dir / "meta.properties").write_text("cluster.id=formatted\nnode.id=3\n")
    assert node._cluster_id({}) == "formatted"


def test_single_broker_refuses_a_cluster_dir_and_the_reverse(tmp_path):
    cluster_dir, single_dir = tmp_path / "c", tmp_path / "s"
    cluster_dir.mkdir()
    (cluster_dir / broker.CLUSTER_RECORD_FILE).write_text(json.dumps({"cluster": True, "nodes": []}))
    assert is_cluster_dir(cluster_dir) and not is_cluster_dir(single_dir)
    with pytest.raises(BrokerError, match="holds a cluster"):
        LocalBroker(cluster_dir).start(timeout=1)
    single_dir.mkdir()
    (single_dir / broker.RECORD_FILE).write_text(json.dumps({"port": 1, "pid": None}))
    with pytest.raises(BrokerError, match="holds a single broker"):
        LocalCluster(single_dir).start(timeout=1)


def test_record_gives_the_nodes_back(tmp_path):
    record = {"cluster": True, "cluster_id": "abc", "version": "4.1.1",
              "nodes": [{"node_id": i, "port": 8000 + i, "controller_port": 8100 + i} for i in (1, 2, 3)]}
    (tmp_path / broker.CLUSTER_RECORD_FILE).write_text(json.dumps(record))
    cluster = LocalCluster.from_data_dir(tmp_path)
    assert cluster is not None and cluster.size == 3
    assert [(n.node_id, n.port, n.controller_port) for n in cluster.nodes] == [(1, 8001, 8101), (2, 8002, 8102),
                                                                              (3, 8003, 8103)]
    assert cluster.bootstrap == "127.0.0.1:8001,127.0.0.1:8002,127.0.0.1:8003"
    assert {n.quorum_voters for n in cluster.nodes} == {quorum_voters([8101, 8102, 8103])}
    st = cluster.status()
    assert st["cluster"] and not st["running"] and st["running_nodes"] == 0 and st["bootstrap"] is None
    assert [n["running"] for n in st["nodes"]] == [False] * 3
    with pytest.raises(BrokerError, match="no node 4"):
        cluster.node(4)
    with pytest.raises(BrokerError, match="not running"):
        cluster.pause(2)


def test_ports_are_distinct_and_the_first_is_the_given_one(tmp_path):
    free = broker.pick_free_port()
    cluster = LocalCluster(tmp_path, 3, port=free)
    ports = cluster._choose_ports({})
    flat = [p for pair in ports for p in pair]
    assert ports[0][0] == free and len(set(flat)) == 6
    # the recorded ports are reused when free
    again = cluster._choose_ports({"nodes": [{"port": p, "controller_port": c} for p, c in ports]})
    assert again[1:] == ports[1:]


def test_a_taken_port_is_refused(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(PortInUse):
            LocalCluster(tmp_path, 3, port=s.getsockname()[1])._choose_ports({})


# --------------------------------------------------------------------------- topics


def test_snapshots_topic_is_compacted_and_partitioned_like_by_cohort():
    names = TopicNames()
    assert names.snapshots == "lineage.snapshots" and "snapshots" in names.all()
    topics = {name: (parts, config) for name, parts, config in standard_topics(names, 6)}
    assert topics[names.snapshots][0] == topics[names.by_cohort][0] == 6
    assert topics[names.snapshots][1] == SNAPSHOT_CONFIG
    assert SNAPSHOT_CONFIG["cleanup.policy"] == "compact" and SNAPSHOT_CONFIG["max.message.bytes"] == "67108864"
    # the active segment is never compacted: it must roll, or a takeover reads every snapshot ever written
    assert int(SNAPSHOT_CONFIG["segment.bytes"]) <= 64 << 20 and int(SNAPSHOT_CONFIG["segment.ms"]) <= 3_600_000
    assert "snapshots" not in AUDIT_TOPICS  # compaction is its point: the retention check skips it
    assert TopicNames.from_env("p.").snapshots == "p.lineage.snapshots"


def test_snapshot_config_would_be_a_retention_finding_on_an_audit_topic():
    # ... which is why it must never be one
    assert topic_config_findings("x", dict(SNAPSHOT_CONFIG))


def test_replication_findings_per_setting():
    good = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert topic_replication_findings("t", 3, good, 3) == []
    assert topic_replication_findings("t", 1, {"min.insync.replicas": "1"}, 1) == []  # one broker
    low = topic_replication_findings("t", 1, {"min.insync.replicas": "1"}, 3)
    assert [f.setting for f in low] == ["replication.factor"] and low[0].wanted == "3"
    isr = topic_replication_findings("t", 3, {"min.insync.replicas": "1"}, 3)
    assert [(f.setting, f.value, f.wanted) for f in isr] == [("min.insync.replicas", "1", "2")]
    unclean = topic_replication_findings("t", 3, {**good, "unclean.leader.election.enable": "true"}, 3)
    assert [f.setting for f in unclean] == ["unclean.leader.election.enable"]
    assert topic_replication_findings("t", 1, {"unclean.leader.election.enable": "true"}, 1)


def test_under_replicated_error_is_one_line_with_the_fix():
    findings = (topic_replication_findings("a", 1, {}, 3)
                + topic_replication_findings("b", 3, {"min.insync.replicas": "1"}, 3))
    exc = UnderReplicatedError(findings, "127.0.0.1:9092")
    assert isinstance(exc, KafkaAdapterError)
    text = str(exc)
    assert "\n" not in text and "topic a has replication.factor=1" in text and "(1 more such setting)" in text
    assert "kafka-reassign-partitions.sh --bootstrap-server 127.0.0.1:9092" in text
    assert "kafka-topics.sh" in text
    fix = findings[1].fix("B")
    assert "kafka-configs.sh --bootstrap-server B --alter --entity-type topics --entity-name b" in fix
    assert "min.insync.replicas=2" in fix
