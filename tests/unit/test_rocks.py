"""The worker's RocksDB-backed set (:mod:`streams.worker.rocks`): every command id on
``lineage.control`` kept out of memory, so a worker's memory does not grow with every command it
ever published (issue 27)."""

from __future__ import annotations

import pytest

from streams.referee.referee import Referee
from streams.worker.rocks import DiskMap, DiskSet, open_disk_set
from tests.unit.test_referee import routed_events, run
from tests.unit.vectors import load_lines


def test_a_disk_set_is_a_set(tmp_path):
    s = DiskSet(tmp_path / "s")
    assert "a" not in s and len(s) == 0
    s.add("a")
    s.add("a")
    s |= {"b", "c"}
    assert len(s) == 3 and "a" in s and "b" in s and set(s) == {"a", "b", "c"}
    s.discard("b")
    s.discard("zz")
    assert set(s) == {"a", "c"} and len(s) == 2
    assert 3 not in s  # not a string: never in it
    s.close()


def test_a_disk_set_opens_empty_the_topic_fills_it_again(tmp_path):
    first = DiskSet(tmp_path / "s")
    first.add("kept-before")
    first.close()
    again = open_disk_set(tmp_path / "s", "ids", ["learnt-now"])
    assert again is not None and set(again) == {"learnt-now"}


def test_a_disk_set_that_cannot_be_opened_leaves_the_set_in_memory(tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert open_disk_set(blocked / "s", "ids", ["x"]) is None
    assert "kept in memory instead" in caplog.text


@pytest.mark.parametrize("cut_at", [3, 2])
def test_a_referee_with_its_published_ids_on_disk_publishes_what_one_in_memory_does(tmp_path, cut_at):
    """The replay-and-go-on of ``test_referee``: a recovered referee whose published ids are a
    :class:`DiskSet` publishes exactly what the one that saw everything did, nothing twice."""
    pairs = list(routed_events(load_lines("14_pbt_cohort")))
    cut = len(pairs) // cut_at
    whole = Referee()
    first = run(whole, pairs[:cut])
    second = run(whole, pairs[cut:], t0=1_000 + cut)

    recovered = Referee()
    disk = open_disk_set(tmp_path / "published", "ids", recovered.published)
    assert disk is not None
    recovered.published = disk
    recovered.published |= {em.value["command_id"] for em in first if em.topic == "control"}
    assert run(recovered, pairs[:cut], publish=False) == []
    again = run(recovered, pairs[cut:], t0=1_000 + cut)
    assert [(e.topic, e.key, e.record, e.value) for e in again] == [
        (e.topic, e.key, e.record, e.value) for e in second]
    assert len(disk) > 0 and set(disk) == set(whole.published)
    ids = [em.value["command_id"] for em in first + again if em.topic == "control"]
    assert len(ids) == len(set(ids))


def test_a_disk_map_gives_back_what_it_was_given(tmp_path):
    m = DiskMap(tmp_path / "m")
    value = ("cid", (("action", "ROLLBACK"), ("ids", ("a", "b")), ("step", 3), ("x", None)))
    m["job"] = value
    m["job"] = value
    assert m["job"] == value and m.get("other") is None and len(m) == 1 and list(m) == ["job"]
    del m["job"]
    assert len(m) == 0 and "job" not in m


def test_the_resting_cohorts_rows_live_on_disk_with_the_rocksdb_store(tmp_path):
    """The views' rows of every cohort out of memory (a resting cohort's jobs, its incidents with
    their tainted checkpoints, its plans) are on disk with the default store. They were kept in
    a dict instead: ``open_disk_map(...) or {}`` took the new, empty, DiskMap for false. A worker
    that had folded a 1M-event backlog held the rows of 93 cohorts in memory that way (issue 27)."""
    from streams.worker.resting import RestingViews

    rows = ([{"job_id": "j1", "finished": True}], [{"incident_id": "x", "tainted_checkpoints": ["c1", "c2"]}], [])
    views = RestingViews("rocksdb://", tmp_path)
    views.keep_rows("early", rows, (1, 0, 0, 0))  # before start: a takeover at once
    views.start()
    assert isinstance(views.rows, DiskMap)
    views.keep_rows("late", rows, (1, 0, 0, 0))
    assert views.get("early") == views.get("late") == rows
    assert sorted(views.rows) == ["early", "late"] and len(views.rows) == 2
    views.drop("early")
    assert views.get("early") is None and len(views.rows) == 1 and views.totals() == (1, 0, 0, 0)
    in_memory = RestingViews("memory://", tmp_path / "m")
    in_memory.start()
    assert type(in_memory.rows) is dict
