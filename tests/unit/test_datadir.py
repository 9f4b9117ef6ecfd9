"""The worker's data directory check (streams.worker.datadir), with a fake AdminClient.

The fake answers ``describe_cluster`` the way confluent-kafka's ``AdminClient`` does (a future;
an unreachable cluster fails). The worker keeps no Faust table, so what is checked is whose
directory it is: the marker names the app id and the Kafka cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.errors import TraintraceError
from streams.kafka.topics import TopicNames
from streams.worker.datadir import MARKER_NAME, DataDirError, prepare_data_dir, read_marker
from streams.worker.settings import WorkerSettings

APP = "tt-unit"


class Future:
    def __init__(self, value=None, exc: BaseException | None = None) -> None:
        self.value, self.exc = value, exc

    def result(self, timeout=None):
        if self.exc is not None:
            raise self.exc
        return self.value


class FakeAdmin:
    """The AdminClient call datadir makes; ``down``: it fails as an unreachable cluster does."""

    def __init__(self, cluster_id: str = "cluster-A", down: bool = False) -> None:
        self.cluster_id = cluster_id
        self.down = down
        self.calls: list[str] = []

    def describe_cluster(self, request_timeout=None):
        self.calls.append("describe_cluster")
        if self.down:
            return Future(exc=KafkaException(KafkaError(
                KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure")))
        return Future(SimpleNamespace(cluster_id=self.cluster_id, nodes=[], controller=None))


def settings(data_dir: Path, app_id: str = APP, store: str = "rocksdb://") -> WorkerSettings:
    return WorkerSettings(bootstrap="kafka.test:9092", topics=TopicNames.from_env("u."), app_id=app_id,
                          partitions=2, data_dir=data_dir, store=store)


def write_marker(data_dir: Path, app_id: str = APP, cluster_id: str | None = "cluster-A",
                 created: str = "2026-01-01T00:00:00Z") -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / MARKER_NAME).write_text(json.dumps({
        "format": 1, "app_id": app_id, "kafka": {"cluster_id": cluster_id}, "created": created,
    }))


def marker(data_dir: Path) -> dict:
    return json.loads((data_dir / MARKER_NAME).read_text())


def test_fresh_data_dir_gets_a_marker(tmp_path):
    d = tmp_path / "w"
    assert prepare_data_dir(settings(d), admin=FakeAdmin()) is None
    m = marker(d)
    assert m["app_id"] == APP and m["format"] == 1 and m["store"] == "rocksdb://"
    assert m["kafka"] == {"bootstrap": "kafka.test:9092", "cluster_id": "cluster-A"}
    assert m["topics"]["events"] == "u.lineage.events"
    assert m["created"] == m["updated"] and m["created"].endswith("Z")


def test_memory_store_has_nothing_to_check(tmp_path):
    d = tmp_path / "w"
    write_marker(d, app_id="someone-else")
    admin = FakeAdmin(down=True)
    assert prepare_data_dir(settings(d, store="memory://"), admin=admin) is None
    assert admin.calls == []
    assert marker(d)["app_id"] == "someone-else"  # untouched


def test_own_data_dir_keeps_its_creation_time(tmp_path):
    d = tmp_path / "w"
    write_marker(d)
    assert prepare_data_dir(settings(d), admin=FakeAdmin()) is None
    m = marker(d)
    assert m["created"] == "2026-01-01T00:00:00Z" and m["updated"] != m["created"]


def test_another_cluster_is_recorded(tmp_path):
    d = tmp_path / "w"
    write_marker(d, cluster_id="cluster-OLD")
    (d / "worker.log").write_text("log\n")
    assert prepare_data_dir(settings(d), admin=FakeAdmin(cluster_id="cluster-NEW")) is None
    assert marker(d)["kafka"]["cluster_id"] == "cluster-NEW"
    assert (d / "worker.log").read_text() == "log\n"


def test_another_app_id_is_refused_in_one_line(tmp_path):
    d = tmp_path / "w"
    write_marker(d, app_id="tt-other")
    admin = FakeAdmin()
    with pytest.raises(DataDirError) as info:
        prepare_data_dir(settings(d), admin=admin)
    msg = str(info.value)
    assert isinstance(info.value, TraintraceError)
    assert "\n" not in msg
    assert "'tt-other'" in msg and repr(APP) in msg and str(d) in msg
    assert "--data-dir" in msg and "remove" in msg
    assert admin.calls == []  # refused before asking Kafka
    assert marker(d)["app_id"] == "tt-other"  # nothing touched


def test_another_app_id_with_reset_takes_over(tmp_path):
    d = tmp_path / "w"
    write_marker(d, app_id="tt-other")
    (d / "worker.log").write_text("keep me\n")
    note = prepare_data_dir(settings(d), reset=True, admin=FakeAdmin())
    assert note is not None and "\n" not in note
    assert "'tt-other'" in note and repr(APP) in note
    assert (d / "worker.log").read_text() == "keep me\n"
    m = marker(d)
    assert m["app_id"] == APP
    assert m["created"] != "2026-01-01T00:00:00Z"  # a new owner, a new creation time


def test_reset_of_an_own_data_dir_says_nothing(tmp_path):
    d = tmp_path / "w"
    write_marker(d)
    assert prepare_data_dir(settings(d), reset=True, admin=FakeAdmin()) is None
    assert marker(d)["app_id"] == APP


@pytest.mark.parametrize("text", ["{not json", "[]", '{"app_id": ""}', '{"app_id": "x", "kafka": 3}', ""])
def test_corrupted_marker_is_rewritten(tmp_path, text):
    d = tmp_path / "w"
    d.mkdir()
    (d / MARKER_NAME).write_text(text)
    assert read_marker(d)[0] is None and read_marker(d)[1]
    assert prepare_data_dir(settings(d), admin=FakeAdmin()) is None
    assert marker(d)["app_id"] == APP


def test_undecodable_marker_is_rewritten(tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    (d / MARKER_NAME).write_bytes(b"\x00\xff garbage")
    assert prepare_data_dir(settings(d), admin=FakeAdmin()) is None
    assert marker(d)["app_id"] == APP


def test_unreachable_kafka_is_one_line(tmp_path):
    d = tmp_path / "w"
    with pytest.raises(DataDirError) as info:
        prepare_data_dir(settings(d), admin=FakeAdmin(down=True))
    assert "\n" not in str(info.value) and "kafka.test:9092" in str(info.value)
    assert not (d / MARKER_NAME).exists()
