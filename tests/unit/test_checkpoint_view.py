"""The worker's ``/checkpoints/{id}`` view (streams.worker.checkpoint_view): on disk with the
RocksDB store, so its memory does not grow with every checkpoint ever written (issue 27); the
same answers from the dict of ``--store memory``."""

from __future__ import annotations

import threading

import pytest

from streams.codec import Codec
from streams.worker.checkpoint_view import CheckpointView
from streams.worker.rocks import DiskMap
from streams.worker.settings import WorkerSettings

pytest.importorskip("rocksdict")


def record(i: int, status: str = "OK", content: str | None = None, ids: list[str] | None = None) -> dict:
    return {"checkpoint_id": f"ck-{i}", "status": status, "job_id": f"job-{i % 3}", "incarnation": 1,
            "step": i * 10, "content_hash": content if content is not None else f"{i:064x}",
            "incident_ids": ids or []}


@pytest.mark.parametrize("store", ["rocksdb://", "memory://"])
def test_the_last_status_of_a_checkpoint_is_answered_as_it_was_written(tmp_path, store):
    view = CheckpointView(WorkerSettings("127.0.0.1:1", data_dir=tmp_path, store=store), Codec())
    assert view.status == {} and not any(tmp_path.iterdir())  # nothing on disk before it starts
    view._thread = threading.Thread(target=lambda: None)  # no Kafka: only the store opens
    view.start()
    assert isinstance(view.status, DiskMap if store.startswith("rocksdb") else dict)
    for i in range(200):
        view.put(record(i))
    view.put(record(7, status="TAINTED", ids=["inc-1", "inc-2"]))
    view.put(record(8, content="not-hex"))  # kept as given
    view.put(record(9, content="ABCD" * 16))  # upper case: kept as given, not re-told in lower case
    assert view.get("ck-7") == {**record(7, status="TAINTED", ids=["inc-1", "inc-2"])}
    assert view.get("ck-8")["content_hash"] == "not-hex"
    assert view.get("ck-9")["content_hash"] == "ABCD" * 16
    assert view.get("ck-100") == record(100)
    assert view.get("nope") is None
    assert len(view.status) == 200


def test_the_disk_view_starts_empty_each_time(tmp_path):
    first = DiskMap(tmp_path / "v")
    first["a"] = ("OK", "j", 1, 2, b"\x00" * 32, ())
    assert first["a"] == ("OK", "j", 1, 2, b"\x00" * 32, ()) and len(first) == 1 and list(first) == ["a"]
    del first["a"]
    with pytest.raises(KeyError):
        first["a"]
    first["b"] = ("OK", "j", 1, 2, "x", ("i",))
    first.close()
    again = DiskMap(tmp_path / "v")  # a cache of the topic: refilled from it, never trusted from before
    assert len(again) == 0 and again.get("b") is None


@pytest.mark.parametrize("store", ["rocksdb://", "memory://"])
def test_records_kept_as_they_came_are_decoded_when_asked(tmp_path, store):
    """The thread keeps each lineage.checkpoints record undecoded (put_raw); get() decodes it."""
    codec = Codec()
    view = CheckpointView(WorkerSettings("127.0.0.1:1", data_dir=tmp_path, store=store), codec)
    view._thread = threading.Thread(target=lambda: None)
    view.start()

    def raw(i: int, **more) -> tuple[bytes, bytes]:
        rec = {**record(i), "status": "CLEAN", "cohort_id": "c", "ts": 1, **more}
        return rec["checkpoint_id"].encode(), codec.encode_record("CheckpointStatus", rec)

    for i in range(50):
        view.put_raw(*raw(i))
    view.put_raw(*raw(7, status="TAINTED", incident_ids=["inc-1"]))  # the last one of a checkpoint wins
    view.put_raw(b"ck-8", raw(9)[1])  # a record under another checkpoint's key: not ck-8's status
    view.put_raw(b"ck-10", b"not avro")  # undecodable: no status
    view.put_raw(None, raw(11)[1])  # no key: not kept
    assert view.get("ck-7") == {**record(7), "status": "TAINTED", "incident_ids": ["inc-1"]}
    assert view.get("ck-3") == {**record(3), "status": "CLEAN"}
    assert view.get("ck-8") is None and view.get("ck-10") is None and view.get("nope") is None
    assert len(view.status) == 50
