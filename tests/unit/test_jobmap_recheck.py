"""An event of a job the router's map has no cohort for is looked up again in
``lineage.job-cohorts`` before it goes to the unregistered bucket (streams.worker.jobmap): when
another worker routed the job's JobStarted since this one read the map (two workers routing one
partition for a while, one of them replaced by the group without knowing it yet), the event
still goes to its job's cohort, as ``analyze`` routes it. Without Kafka: the map's read is
replaced."""

from __future__ import annotations

import asyncio

import pytest

from streams.codec import Codec
from streams.worker import jobmap, stages
from streams.worker.jobmap import JobCohortMap, entry_headers
from streams.worker.outbox import Outbox
from streams.worker.router import RawRecord, Routed
from streams.worker.settings import WorkerSettings
from streams.worker.stages import RouteStage

CODEC = Codec()
T0 = 1_760_000_000_000


def event(job: str, seq: int, kind: str = "Progress") -> dict:
    base = {"job_id": job, "seq": seq, "incarnation": 0, "ts": T0 + seq}
    if kind == "JobStarted":
        return {"type": "JobStarted", **base, "cohort_id": "c1", "base_model": "m", "base_checkpoint_id": None,
                "config_hash": None}
    return {"type": "Progress", **base, "step": seq, "epoch": 0, "loss": 1.0, "grad_norm": 1.0, "lr": 0.1}


def record(d: dict, offset: int, partition: int = 2) -> RawRecord:
    return RawRecord("lineage.events", partition, offset, d["job_id"].encode(), CODEC.encode_event(d))


@pytest.fixture
def stage(monkeypatch):
    """A route stage whose map reads are served from ``reads`` (partition -> entries) and counted."""
    settings = WorkerSettings.from_env({}, default_bootstrap="127.0.0.1:9")
    st = RouteStage(settings, CODEC, JobCohortMap(), Outbox(settings, CODEC), asyncio.Lock())
    st.reads = {}  # type: ignore[attr-defined]
    st.read_calls = []  # type: ignore[attr-defined]

    def fake_read(_kafka, topic, partitions, timeout=60.0):
        assert topic == settings.topics.job_cohorts
        st.read_calls.append(list(partitions))
        return {job: e for p in partitions for job, e in st.reads.get(p, {}).items()}

    monkeypatch.setattr(stages, "read_map_entries", fake_read)
    return st


def route(stage: RouteStage, recs: list[RawRecord]) -> Routed:
    """``take`` each record as ``Stage._in_order`` does: a read it asks for first, then again."""
    routed, now = stage.begin()
    for r in recs:
        while True:
            try:
                stage.take((routed, now), r)
                break
            except stages._ReadFirst as first:
                first.read()
    stage.jobmap.partition = stage.jobmap.offset = None
    return routed


def cohorts_of(routed: Routed) -> dict[str, list[int]]:
    return {c: [e["offset"] for e in evs] for c, evs in routed.batches.items()}


def test_a_job_started_by_another_worker_since_the_map_was_read_is_routed_to_its_cohort(stage, caplog):
    stage.reads[2] = {"J": ("c1", 10)}
    routed = route(stage, [record(event("J", 1), 11), record(event("J", 2), 12)])
    assert cohorts_of(routed) == {"c1": [11, 12]}
    assert stage.read_calls == [[2]]  # once: the job is in the map now
    assert stage.jobmap.map == {"J": "c1"} and not stage.jobmap.pending  # already on the topic
    assert "another worker routed this partition" in caplog.text


def test_a_re_read_keeps_only_what_the_map_lacks(stage):
    stage.jobmap.map.update({f"K{i}": "c0" for i in range(100)})
    stage.reads[2] = {**{f"K{i}": ("c0", i) for i in range(100)}, "J": ("c1", 200)}
    route(stage, [record(event("J", 1), 201)])
    assert stage.map_reads[2][1] == {}  # J is in the map now, the others were
    assert stage.jobmap.map["J"] == "c1"


def test_an_entry_learnt_after_the_event_leaves_it_unregistered(stage):
    """The event comes before its job's JobStarted in the log: ``analyze`` routes it to the
    unregistered bucket, so does the router."""
    stage.reads[2] = {"J": ("c1", 20)}
    routed = route(stage, [record(event("J", 1), 11)])
    assert cohorts_of(routed) == {"": [11]}
    assert "J" not in stage.jobmap.map


def test_an_unregistered_job_costs_one_read_a_partition_per_period(stage, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(stages.time, "monotonic", lambda: clock[0])
    routed = route(stage, [record(event(f"U{i}", 1), 30 + i) for i in range(50)])
    assert cohorts_of(routed) == {"": list(range(30, 80))}
    assert stage.read_calls == [[2]]
    clock[0] += jobmap.RECHECK_S
    route(stage, [record(event("U0", 2), 90)])
    assert stage.read_calls == [[2], [2]]


def test_a_job_started_here_is_not_looked_up_and_its_entry_names_its_offset(stage):
    routed = route(stage, [record(event("K", 0, "JobStarted"), 5), record(event("K", 1), 6)])
    assert cohorts_of(routed) == {"c1": [5, 6]}
    assert stage.read_calls == []
    assert stage.jobmap.take_pending() == [("K", "c1", 2, 5)]
    assert dict(entry_headers(5))["traintrace.offset"] == b"5"
    assert jobmap._offset_of(entry_headers(5)) == 5 and jobmap._offset_of(entry_headers(None)) is None


def test_the_stage_reads_the_map_off_the_event_loop_and_takes_the_record_again(stage):
    """Through ``Stage._in_order``: the read runs in an executor (a broker that does not answer
    must not stop the event loop, whose heartbeats keep the worker in its group)."""
    import threading

    stage.reads[2] = {"J": ("c1", 10)}
    threads = []
    real = stages.read_map_entries

    def spy(*a, **kw):
        threads.append(threading.current_thread() is threading.main_thread())
        return real(*a, **kw)

    stages.read_map_entries = spy
    stage.input.assign(2, 11)
    routed, now = stage.begin()
    asyncio.run(stage._in_order([record(event("J", 1), 11), record(event("J", 2), 12)], (routed, now)))
    assert cohorts_of(routed) == {"c1": [11, 12]} and threads == [False]
    assert stage.input.position[2] == 13
