"""The local Kafka broker for real: metadata, produce/consume, and LocalBroker's lifecycle."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from streams.devtools.broker import LocalBroker, PortInUse, find_running_broker, read_record


def test_fixture_broker_answers_metadata(kafka_bootstrap: str) -> None:
    md = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    assert md.brokers, "the broker returned no broker in its metadata"
    assert md.cluster_id


def test_produce_and_consume_on_a_fresh_topic(kafka_bootstrap: str, topic_factory, group_id: str) -> None:
    topic = topic_factory(partitions=3)
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
        }
    )
    sent = {f"key-{i}".encode(): f"value-{i}".encode() for i in range(10)}
    errors: list[object] = []
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value, on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0
    assert not errors

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    received: dict[bytes, bytes] = {}
    partitions_by_key: dict[bytes, int] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(received) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            received[msg.key()] = msg.value()
            partitions_by_key[msg.key()] = msg.partition()
    finally:
        consumer.close()
    assert received == sent
    # murmur2 (the Java client's partitioner) is deterministic per key
    producer2 = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    again: dict[bytes, int] = {}
    for key in sent:
        producer2.produce(topic, key=key, value=b"x", on_delivery=lambda err, msg: again.__setitem__(msg.key(), msg.partition()))
    assert producer2.flush(30) == 0
    assert again == partitions_by_key


def test_topic_factory_applies_config(kafka_admin, topic_factory) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    topic = topic_factory(partitions=2, config={"cleanup.policy": "compact"}, prefix="compacted")
    assert topic.startswith("compacted-")
    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = kafka_admin.describe_configs([res])[res].result(timeout=30)
    assert configs["cleanup.policy"].value == "compact"
    assert len(kafka_admin.list_topics(topic=topic, timeout=10).topics[topic].partitions) == 2


def test_group_ids_are_fresh(group_id: str, group_factory) -> None:
    assert group_id.startswith("g-")
    assert len({group_id, group_factory(), group_factory("other")}) == 3


def test_local_broker_lifecycle(tmp_path: Path) -> None:
    """A second broker, on its own data dir and ports: start, status, restart, stop, PortInUse."""
    data_dir = tmp_path / "second-broker"
    broker = LocalBroker(data_dir, die_with_parent=True)
    try:
        bootstrap = broker.start(timeout=90)
        st = broker.status()
        assert st["running"] is True
        assert st["bootstrap"] == bootstrap
        assert bootstrap.startswith("127.0.0.1:")
        assert st["data_dir"] == str(data_dir.resolve())
        assert st["pid"] and st["version"]
        found = find_running_broker(data_dir)
        assert found is not None and found.status()["pid"] == st["pid"]
        # starting again while it runs is a no-op that reports the same address
        assert broker.start() == bootstrap
        assert AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
        # its temporary files are its own: an lz4 batch makes it unpack liblz4-java, into its
        # data directory (not /tmp, where a killed broker left it for good)
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4"})
        p.produce("lz4-check", b"x" * 1000)
        assert p.flush(30) == 0
        assert list((data_dir / "tmp").glob("liblz4-java-*.so")), sorted((data_dir / "tmp").iterdir())

        # its client port is taken now: another broker asking for it gets PortInUse
        with pytest.raises(PortInUse) as info:
            LocalBroker(tmp_path / "third", port=st["port"]).start(timeout=30)
        assert info.value.port == st["port"]
        assert not (tmp_path / "third" / "kraft").exists()

        assert broker.stop() is True
        st2 = broker.status()
        assert st2["running"] is False and st2["pid"] is None and st2["bootstrap"] is None
        assert read_record(data_dir)["pid"] is None
        assert broker.stop() is False  # idempotent

        # a restart reuses the formatted storage (same cluster id) and the same free port
        assert broker.start(timeout=90) == bootstrap
        assert broker.status()["cluster_id"] == st["cluster_id"]
    finally:
        broker.stop()
    assert not broker.is_running()


def test_start_on_a_taken_port_raises_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(PortInUse, match=str(port)):
            LocalBroker(tmp_path / "b", port=port).start(timeout=10)


def test_a_broker_whose_picked_port_is_taken_before_it_binds_picks_another(tmp_path: Path, monkeypatch) -> None:
    """A port picked free can be taken before the JVM binds it (the machine's other servers pick
    ports too): a fresh clone's test run lost one test process's session broker so, and 85
    tests with it. A broker that picks its own ports starts again on others."""
    from streams.devtools import broker as mod

    pick, taken = mod.pick_free_port, []
    thief = socket.socket()

    def pick_then_lose(exclude=frozenset(), host="127.0.0.1"):
        port = pick(exclude, host)
        if not taken:  # the first pick (the client port) is taken right after it was found free
            thief.bind((host, port))
            thief.listen()
            taken.append(port)
        return port

    monkeypatch.setattr(mod, "pick_free_port", pick_then_lose)
    b = LocalBroker(tmp_path / "raced", die_with_parent=True)
    try:
        bootstrap = b.start(timeout=90)
        assert taken and bootstrap != f"127.0.0.1:{taken[0]}"
        assert AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
    finally:
        b.stop()
        thief.close()


def test_a_record_reader_reads_single_records_at_their_offsets(kafka_bootstrap, topic_factory):
    """``RecordReader`` (a snapshot brought back into memory): the record at each offset asked for,
    in any order and partition, through one consumer kept open; None past the end."""
    from confluent_kafka import Producer

    from streams.kafka.reader import RecordReader

    topic = topic_factory(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(60):
        producer.produce(topic, key=b"k%d" % i, value=b"%05d" % i + b"x" * 5000, partition=i % 2)
    assert producer.flush(30) == 0
    reader = RecordReader(kafka_bootstrap, topic)
    try:
        for i in (7, 0, 29, 3, 3, 18, 1, 29):
            for p in (0, 1):
                msg = reader.read(p, i, timeout=30)
                assert msg is not None and (msg.partition(), msg.offset()) == (p, i)
                assert int(msg.value()[:5]) == 2 * i + p
        assert reader.read(0, 30, timeout=5) is None  # nothing written there
        assert reader.read(1, 2, timeout=30).offset() == 2  # and on again
    finally:
        reader.close()


def test_brokers_train_a_class_data_archive_once_and_later_ones_map_it(tmp_path: Path) -> None:
    """The session's first broker started the training of the lean brokers' archive (unless an
    earlier run made it): it appears, whole; the JVM maps it with sharing required (``-Xshare:on``
    fails when it cannot) and loads Kafka's classes from it; a broker started now runs with it."""
    import subprocess

    from streams.devtools import class_share
    from streams.devtools.broker import find_java, java_identity, resolve_jars

    java, libs = find_java(), resolve_jars()
    archive = class_share.archive_path(libs, java_identity(java), "lean")
    deadline = time.monotonic() + 300
    while not class_share.is_whole(archive) and time.monotonic() < deadline:
        failed = archive.with_suffix(".failed")
        assert not failed.exists(), (failed.read_text(), archive.with_suffix(".log").read_text())
        if not archive.with_suffix(".training").exists():  # none ran in this session: start one
            class_share.start_training(archive, java, libs, "lean", LocalBroker(tmp_path).version)
        time.sleep(1)
    assert class_share.is_whole(archive), sorted(archive.parent.iterdir())

    run = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-Xlog:class+load=info",
                          "-Xmx128m", "-cp", str(libs / "*"), "kafka.tools.StorageTool", "random-uuid"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    kafka = [ln for ln in run.stdout.splitlines() if "[class,load] org.apache.kafka." in ln]
    mapped = [ln for ln in kafka if "source: shared objects file (top)" in ln]  # the archive's layer
    assert len(mapped) > len(kafka) / 2, (len(mapped), len(kafka))

    broker = LocalBroker(tmp_path / "mapped", die_with_parent=True)
    try:
        broker.start(timeout=90)
        cmdline = Path(f"/proc/{broker.status()['pid']}/cmdline").read_bytes().split(b"\0")
        assert f"-XX:SharedArchiveFile={archive}".encode() in cmdline
    finally:
        broker.stop()
