"""The worker's data directory check (streams.worker.datadir), with a fake AdminClient.

The fake answers ``describe_cluster`` / ``describe_topics`` / ``list_offsets`` the way
confluent-kafka's ``AdminClient`` does (futures; an unknown topic fails with
``UNKNOWN_TOPIC_OR_PART``). The table stores are real RocksDB databases in Faust's layout,
written with rocksdict exactly as Faust's store writes them (one test writes them with Faust's
own ``Store`` to hold the reader to that format).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.errors import TraintraceError
from streams.kafka.topics import TopicNames
from streams.worker import datadir
from streams.worker.datadir import (
    MARKER_NAME,
    OFFSET_KEY,
    DataDirError,
    faust_paths,
    prepare_data_dir,
    read_local_store,
    read_marker,
)
from streams.worker.settings import WorkerSettings

APP = "tt-unit"
CHANGELOG = f"{APP}-job-cohort-changelog"


class Future:
    def __init__(self, value=None, exc: BaseException | None = None) -> None:
        self.value, self.exc = value, exc

    def result(self, timeout=None):
        if self.exc is not None:
            raise self.exc
        return self.value


class FakeAdmin:
    """The three AdminClient calls datadir makes. ``topics``: name -> (topic id, [high watermark
    of each partition]); ``down``: every call fails as an unreachable cluster does."""

    def __init__(self, cluster_id: str = "cluster-A", topics: dict | None = None, down: bool = False) -> None:
        self.cluster_id = cluster_id
        self.topics = dict(topics or {})
        self.down = down
        self.calls: list[str] = []

    def describe_cluster(self, request_timeout=None):
        self.calls.append("describe_cluster")
        if self.down:
            return Future(exc=KafkaException(KafkaError(
                KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure")))
        return Future(SimpleNamespace(cluster_id=self.cluster_id, nodes=[], controller=None))

    def describe_topics(self, topics, request_timeout=None):
        self.calls.append("describe_topics")
        out = {}
        for name in topics.topic_names:
            if name not in self.topics:
                out[name] = Future(exc=KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
                continue
            tid, hws = self.topics[name]
            out[name] = Future(SimpleNamespace(
                name=name, topic_id=tid, is_internal=False,
                partitions=[SimpleNamespace(id=p, leader=None, replicas=[], isr=[]) for p in range(len(hws))]))
        return out

    def list_offsets(self, requests, request_timeout=None):
        self.calls.append("list_offsets")
        out = {}
        for tp, _spec in requests.items():
            _tid, hws = self.topics[tp.topic]
            out[tp] = Future(SimpleNamespace(offset=hws[tp.partition], timestamp=-1, leader_epoch=None))
        return out


def settings(data_dir: Path, app_id: str = APP, store: str = "rocksdb://") -> WorkerSettings:
    return WorkerSettings(bootstrap="kafka.test:9092", topics=TopicNames.from_env("u."), app_id=app_id,
                          partitions=2, data_dir=data_dir, store=store)


def tabledir(data_dir: Path) -> Path:
    return data_dir / "v1" / "tables"


def write_store(data_dir: Path, offsets: dict[int, int | None], table: str = "job-cohort") -> None:
    """Faust's RocksDB layout: {tabledir}/{table}-{partition}.db, raw mode, the offset key."""
    from rocksdict import Options, Rdict

    for partition, offset in offsets.items():
        path = tabledir(data_dir) / f"{table}-{partition}.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        db = Rdict(str(path), options=Options(raw_mode=True))
        db[f"job-{partition}".encode()] = b"cohort-x"
        if offset is not None:
            db[OFFSET_KEY] = str(offset).encode()
        db.close()
    (tabledir(data_dir) / f"{table}-backups").mkdir(exist_ok=True)


def write_marker(data_dir: Path, app_id: str = APP, cluster_id: str | None = "cluster-A",
                 topic_id: str | None = "topic-1", created: str = "2026-01-01T00:00:00Z") -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / MARKER_NAME).write_text(json.dumps({
        "format": 1, "app_id": app_id, "kafka": {"cluster_id": cluster_id},
        "changelogs": {f"{app_id}-job-cohort-changelog": {"topic_id": topic_id, "partitions": 2}},
        "created": created,
    }))


def marker(data_dir: Path) -> dict:
    return json.loads((data_dir / MARKER_NAME).read_text())


def store_exists(data_dir: Path) -> bool:
    return any(tabledir(data_dir).glob("*.db")) if tabledir(data_dir).exists() else False


# -- paths and format ----------------------------------------------------------------------


def test_paths_are_fausts(tmp_path):
    paths = faust_paths(settings(tmp_path / "w"))
    assert paths.tabledir == tmp_path / "w" / "v1" / "tables"
    assert paths.faust_id == APP
    assert paths.changelog_topic("job-cohort") == CHANGELOG
    assert paths.store_scheme == "rocksdb"


def test_reads_the_offsets_fausts_own_store_persists(tmp_path):
    """Faust's RocksDB Store (the worker's table) writes; datadir reads without Faust."""
    import faust
    from faust.types import TP

    app = faust.App(APP, datadir=str(tmp_path / "w"), store="rocksdb://")
    table = app.Table("job-cohort", partitions=2, key_type=str, value_type=str)
    assert table.changelog_topic.get_topic_name() == CHANGELOG
    table.data.set_persisted_offset(TP(CHANGELOG, 1), 41)
    table.data.set_persisted_offset(TP(CHANGELOG, 0), 7)
    for db in table.data._dbs.values():
        db.close()
    assert Path(app.conf.tabledir) == faust_paths(settings(tmp_path / "w")).tabledir
    store = read_local_store(Path(app.conf.tabledir))
    assert store.offsets == {("job-cohort", 0): 7, ("job-cohort", 1): 41}
    assert not store.unreadable and not store.in_use


# -- fresh, memory, consistent -------------------------------------------------------------


def test_fresh_data_dir_gets_a_marker(tmp_path):
    d = tmp_path / "w"
    admin = FakeAdmin(topics={CHANGELOG: ("topic-1", [0, 0])})
    assert prepare_data_dir(settings(d), admin=admin) is None
    m = marker(d)
    assert m["app_id"] == APP and m["faust_id"] == APP
    assert m["kafka"] == {"bootstrap": "kafka.test:9092", "cluster_id": "cluster-A"}
    assert m["changelogs"] == {CHANGELOG: {"topic_id": "topic-1", "partitions": 2}}
    assert m["topics"]["events"] == "u.lineage.events"
    assert m["created"] == m["updated"] and m["created"].endswith("Z")
    assert m["tabledir"] == str(tabledir(d))


def test_fresh_data_dir_before_faust_created_the_changelog(tmp_path):
    d = tmp_path / "w"
    assert prepare_data_dir(settings(d), admin=FakeAdmin()) is None
    assert marker(d)["changelogs"] == {CHANGELOG: {"topic_id": None, "partitions": None}}


def test_memory_store_has_nothing_to_check(tmp_path):
    d = tmp_path / "w"
    write_marker(d, app_id="someone-else")
    admin = FakeAdmin(down=True)
    assert prepare_data_dir(settings(d, store="memory://"), admin=admin) is None
    assert admin.calls == []
    assert marker(d)["app_id"] == "someone-else"  # untouched


def test_consistent_store_is_kept_and_the_marker_refreshed(tmp_path):
    d = tmp_path / "w"
    write_marker(d)
    write_store(d, {0: 4, 1: 9})
    admin = FakeAdmin(topics={CHANGELOG: ("topic-1", [5, 10])})  # persisted = high watermark - 1
    assert prepare_data_dir(settings(d), admin=admin) is None
    assert store_exists(d)
    assert read_local_store(tabledir(d)).offsets == {("job-cohort", 0): 4, ("job-cohort", 1): 9}
    m = marker(d)
    assert m["created"] == "2026-01-01T00:00:00Z" and m["updated"] != m["created"]


def test_store_with_no_persisted_offset_is_kept(tmp_path):
    d = tmp_path / "w"
    write_marker(d)
    write_store(d, {0: None})
    assert prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [0, 0])})) is None
    assert store_exists(d)


def test_missing_marker_and_consistent_store_adopts_the_dir(tmp_path):
    d = tmp_path / "w"
    write_store(d, {0: 2})
    assert prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [3, 0])})) is None
    assert store_exists(d)
    assert marker(d)["app_id"] == APP


# -- another app id ------------------------------------------------------------------------


def test_another_app_id_is_refused_in_one_line(tmp_path):
    d = tmp_path / "w"
    write_marker(d, app_id="tt-other")
    write_store(d, {0: 3})
    admin = FakeAdmin(topics={CHANGELOG: ("topic-9", [0, 0])})
    with pytest.raises(DataDirError) as info:
        prepare_data_dir(settings(d), admin=admin)
    msg = str(info.value)
    assert isinstance(info.value, TraintraceError)
    assert "\n" not in msg
    assert "'tt-other'" in msg and repr(APP) in msg and str(d) in msg
    assert "--data-dir" in msg and "remove" in msg
    assert admin.calls == []  # refused before asking Kafka
    assert store_exists(d) and marker(d)["app_id"] == "tt-other"  # nothing touched


def test_another_app_id_with_reset_discards_and_takes_over(tmp_path):
    d = tmp_path / "w"
    write_marker(d, app_id="tt-other")
    write_store(d, {0: 3, 1: 1})
    (d / "worker.log").write_text("keep me\n")
    note = prepare_data_dir(settings(d), reset=True, admin=FakeAdmin(topics={CHANGELOG: ("topic-9", [0, 0])}))
    assert note is not None and "\n" not in note
    assert "'tt-other'" in note and "discarded" in note and "rebuilt from the changelog" in note
    assert not tabledir(d).exists()
    assert (d / "worker.log").read_text() == "keep me\n"
    m = marker(d)
    assert m["app_id"] == APP and m["changelogs"][CHANGELOG]["topic_id"] == "topic-9"
    assert m["created"] != "2026-01-01T00:00:00Z"  # a new owner, a new creation time


def test_another_app_id_with_reset_and_no_store(tmp_path):
    d = tmp_path / "w"
    write_marker(d, app_id="tt-other")
    note = prepare_data_dir(settings(d), reset=True, admin=FakeAdmin())
    assert note is not None and "'tt-other'" in note and repr(APP) in note
    assert marker(d)["app_id"] == APP


# -- same app id, another Kafka log --------------------------------------------------------


def test_another_cluster_discards_the_table_store_only(tmp_path):
    d = tmp_path / "w"
    write_marker(d, cluster_id="cluster-OLD")
    write_store(d, {0: 1, 1: 0})
    (d / "worker.log").write_text("log\n")
    (d / "v1" / "other").mkdir(parents=True)
    admin = FakeAdmin(cluster_id="cluster-NEW", topics={CHANGELOG: ("topic-1", [50, 50])})  # offsets look fine
    note = prepare_data_dir(settings(d), admin=admin)
    assert note is not None and "\n" not in note
    assert note.startswith(f"data dir {d} held a table cache of another Kafka log (")
    assert "cluster-OLD" in note and "cluster-NEW" in note
    assert note.endswith("it is rebuilt from the changelog")
    assert not tabledir(d).exists()
    assert (d / "worker.log").exists() and (d / "v1" / "other").is_dir()  # nothing else
    assert marker(d)["kafka"]["cluster_id"] == "cluster-NEW"


def test_recreated_changelog_topic_is_detected_by_its_id(tmp_path):
    d = tmp_path / "w"
    write_marker(d, topic_id="topic-1")
    write_store(d, {0: 1})
    # refilled past the persisted offsets: Faust's own check would not notice
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-2", [100, 100])}))
    assert note is not None and "recreated" in note and "topic-1" in note and "topic-2" in note
    assert not store_exists(d)
    assert marker(d)["changelogs"][CHANGELOG]["topic_id"] == "topic-2"


def test_deleted_changelog_topic(tmp_path):
    d = tmp_path / "w"
    write_marker(d, topic_id="topic-1")
    write_store(d, {0: 1})
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={}))
    assert note is not None and "deleted" in note
    assert "does not exist" not in note  # the offsets of a deleted topic add nothing
    assert not store_exists(d)
    assert marker(d)["changelogs"][CHANGELOG]["topic_id"] is None


@pytest.mark.parametrize("persisted, hw, stale", [
    (4, 5, False),   # the last record of the partition: consistent
    (5, 5, True),    # Faust: ConsistencyError (persisted > highwater - 1)
    (7, 0, True),    # an emptied/recreated partition (Faust: 7 > -1)
    (0, 0, True),    # one record cached, empty log: Faust does not notice, the key would stay
    (0, 1, False),
])
def test_persisted_offset_against_the_high_watermark(tmp_path, persisted, hw, stale):
    d = tmp_path / "w"
    write_marker(d, topic_id=None)  # no topic id to compare: only the offsets tell
    write_store(d, {1: persisted})
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [0, hw])}))
    assert (note is not None) is stale
    assert store_exists(d) is not stale
    if stale:
        assert f"persisted offset {persisted} of {CHANGELOG} partition 1 is past its end (high watermark {hw})" in note


def test_offsets_are_checked_without_a_marker(tmp_path):
    d = tmp_path / "w"  # a data dir of a worker from before the marker existed
    write_store(d, {0: 12, 1: 30})
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [3, 3])}))
    assert note is not None and "is past its end (high watermark 3)" in note
    assert note.count("past its end") == 1  # one reason per kind keeps it one short line
    assert not store_exists(d)


def test_store_partition_the_topic_does_not_have(tmp_path):
    d = tmp_path / "w"
    write_marker(d)
    write_store(d, {0: 0, 5: 3})
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [1, 1])}))
    assert note is not None and "no partition 5" in note
    assert not store_exists(d)


def test_changelog_missing_while_the_store_holds_offsets(tmp_path):
    d = tmp_path / "w"
    write_marker(d, topic_id=None)
    write_store(d, {0: 0})
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={}))
    assert note is not None and "does not exist" in note
    assert not store_exists(d)


def test_marker_without_topic_id_learns_it_then_catches_a_recreation(tmp_path):
    d = tmp_path / "w"
    assert prepare_data_dir(settings(d), admin=FakeAdmin()) is None  # first start, no changelog yet
    write_store(d, {0: 2})  # Faust created the topic and filled the store
    assert prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [3, 0])})) is None
    assert marker(d)["changelogs"][CHANGELOG]["topic_id"] == "topic-1"
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-2", [30, 30])}))
    assert note is not None and "recreated" in note


def test_reset_discards_even_a_consistent_store(tmp_path):
    d = tmp_path / "w"
    write_marker(d)
    write_store(d, {0: 0})
    note = prepare_data_dir(settings(d), reset=True, admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [1, 0])}))
    assert note is not None and "reset" in note
    assert not store_exists(d)


# -- a damaged directory -------------------------------------------------------------------


@pytest.mark.parametrize("text", ["{not json", "[]", '{"app_id": ""}', '{"app_id": "x", "kafka": 3}', ""])
def test_corrupted_marker_with_a_store_discards_it(tmp_path, text):
    d = tmp_path / "w"
    write_store(d, {0: 0})
    (d / MARKER_NAME).write_text(text)
    assert read_marker(d)[0] is None and read_marker(d)[1]
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [1, 0])}))
    assert note is not None and "unreadable" in note and "\n" not in note
    assert not store_exists(d)
    assert marker(d)["app_id"] == APP


def test_corrupted_marker_without_a_store_is_rewritten(tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    (d / MARKER_NAME).write_bytes(b"\x00\xff garbage")
    assert prepare_data_dir(settings(d), admin=FakeAdmin()) is None
    assert marker(d)["app_id"] == APP


def test_unreadable_database_is_discarded(tmp_path):
    d = tmp_path / "w"
    write_marker(d)
    bad = tabledir(d) / "job-cohort-0.db"
    bad.mkdir(parents=True)
    (bad / "CURRENT").write_text("MANIFEST-999999\n")  # points at nothing
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [0, 0])}))
    assert note is not None and "job-cohort-0.db unreadable" in note and "\n" not in note
    assert not tabledir(d).exists()


def test_unreachable_kafka_is_one_line(tmp_path):
    d = tmp_path / "w"
    with pytest.raises(DataDirError) as info:
        prepare_data_dir(settings(d), admin=FakeAdmin(down=True))
    assert "\n" not in str(info.value) and "kafka.test:9092" in str(info.value)
    assert not (d / MARKER_NAME).exists()


def test_store_open_in_another_process_is_never_discarded(tmp_path):
    d = tmp_path / "w"
    write_marker(d, cluster_id="cluster-OLD")
    write_store(d, {0: 1})
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from rocksdict import Options, Rdict
        db = Rdict({str(tabledir(d) / 'job-cohort-0.db')!r}, options=Options(raw_mode=True))
        print("open", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(DataDirError) as info:
            prepare_data_dir(settings(d), admin=FakeAdmin(cluster_id="cluster-NEW",
                                                          topics={CHANGELOG: ("topic-1", [5, 0])}))
        msg = str(info.value)
        assert "open in another process" in msg and "\n" not in msg
        assert store_exists(d)
        assert marker(d)["kafka"]["cluster_id"] == "cluster-OLD"
    finally:
        holder.stdin.close()
        holder.wait(10)


def test_tabledir_outside_the_data_dir_loses_only_store_entries(tmp_path, monkeypatch):
    elsewhere = tmp_path / "tables-elsewhere"
    monkeypatch.setenv("APP_TABLEDIR", str(elsewhere))
    d = tmp_path / "w"
    paths = faust_paths(settings(d))
    assert paths.tabledir == elsewhere
    from rocksdict import Options, Rdict

    elsewhere.mkdir()
    db = Rdict(str(elsewhere / "job-cohort-0.db"), options=Options(raw_mode=True))
    db[OFFSET_KEY] = b"9"
    db.close()
    (elsewhere / "job-cohort-backups").mkdir()
    (elsewhere / "unrelated.txt").write_text("x")
    note = prepare_data_dir(settings(d), admin=FakeAdmin(topics={CHANGELOG: ("topic-1", [1, 1])}))
    assert note is not None
    assert sorted(p.name for p in elsewhere.iterdir()) == ["unrelated.txt"]


def test_the_worker_tables_are_described_even_without_a_store(tmp_path):
    d = tmp_path / "w"
    admin = FakeAdmin(topics={CHANGELOG: ("topic-1", [0, 0]), f"{APP}-extra-changelog": ("topic-x", [0])})
    write_store(d, {0: 0}, table="extra")
    prepare_data_dir(settings(d), admin=admin)
    assert set(marker(d)["changelogs"]) == {CHANGELOG, f"{APP}-extra-changelog"}
    assert datadir.WORKER_TABLES == ("job-cohort",)
