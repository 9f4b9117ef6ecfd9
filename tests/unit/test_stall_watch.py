"""The worker's stall watch (``streams.worker.stages.StallWatch``): records that wait on an owned
partition are processed from the topic when Faust skipped them (it read past them) or when its
fetcher stopped (neither its read offset nor the position moved for ``fetch_stall_passes``)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from streams.worker import stages
from streams.worker.stages import StallWatch


class Watermarks:
    def __init__(self, high: int) -> None:
        self.high = high

    def get_watermark_offsets(self, tp, timeout):
        return 0, self.high

    def close(self) -> None:
        pass


class Stage:
    topic = "lineage.events"

    def __init__(self, position: int) -> None:
        self.input = SimpleNamespace(owned={0}, position={0: position})
        self.processed: list[list[int]] = []

    async def process(self, records) -> None:
        self.processed.append(records)
        self.input.position[0] = records[-1] + 1


def watch(monkeypatch, high: int, position: int, faust_read: int | None) -> tuple[StallWatch, Stage, dict]:
    reads: dict = {"faust": faust_read}
    monkeypatch.setattr(stages, "read_records", lambda _s, _t, _p, start, end: list(range(start, end)))
    settings = SimpleNamespace(kafka=SimpleNamespace(consumer=lambda group: Watermarks(high)), app_id="tt")
    stage = Stage(position)
    return StallWatch(settings, (stage,), faust_read_offset=lambda t, p: reads["faust"]), stage, reads


def passes(w: StallWatch, n: int) -> None:
    for _ in range(n):
        asyncio.run(w.check())


def test_a_tail_faust_read_but_never_delivered_is_processed_after_one_whole_pass(monkeypatch):
    w, stage, _ = watch(monkeypatch, high=10, position=7, faust_read=9)
    passes(w, 1)
    assert stage.processed == []
    passes(w, 1)
    assert stage.processed == [[7, 8, 9]]


@pytest.mark.parametrize("faust_read", [None, 3])
def test_a_stuck_fetch_is_read_around_after_its_passes(monkeypatch, faust_read):
    w, stage, _ = watch(monkeypatch, high=10, position=2, faust_read=faust_read)
    passes(w, StallWatch.fetch_stall_passes - 1)
    assert stage.processed == []
    passes(w, 1)
    assert stage.processed == [list(range(2, 10))]


def test_a_fetch_that_moves_is_left_to_faust(monkeypatch):
    w, stage, reads = watch(monkeypatch, high=100, position=2, faust_read=3)
    for i in range(3 * StallWatch.fetch_stall_passes):
        reads["faust"] = 3 + i  # Faust reads on: it delivers in its own time
        passes(w, 1)
    assert stage.processed == []


def test_nothing_waiting_is_no_stall(monkeypatch):
    w, stage, _ = watch(monkeypatch, high=5, position=5, faust_read=None)
    passes(w, 2 * StallWatch.fetch_stall_passes)
    assert stage.processed == []


class NullOutbox:
    """Sends nothing: a ticket of nothing, delivered at once."""

    def cut(self) -> None:
        return None

    async def wait(self, _ticket) -> None:
        return None


class Taking(stages.Stage):
    """A stage that only records what it takes."""

    def __init__(self) -> None:
        super().__init__(SimpleNamespace(), "lineage.by-cohort", None, NullOutbox(), asyncio.Lock())
        self.taken: list[int] = []

    def begin(self):
        return None

    def take(self, batch, rec) -> None:
        self.taken.append(rec.offset)

    def finish(self, batch):
        return lambda _ticket: None


def rec(offset: int) -> stages.RawRecord:
    return stages.RawRecord("lineage.by-cohort", 0, offset, b"k", b"v")


def test_records_before_a_gap_are_read_and_a_short_read_is_tried_again(monkeypatch):
    """A record past the position: what lies before it is read from the topic first. A read
    that comes back early with nothing is read again, never stepped over (records the stage never
    saw would be lost)."""
    calls = []

    def read(_s, _t, _p, start, end):
        calls.append((start, end))
        if len(calls) == 1:
            raise stages.ShortRead("came back early")
        return [rec(o) for o in range(start, end)]

    monkeypatch.setattr(stages, "read_records", read)
    monkeypatch.setattr(stages, "GAP_BACKOFF_S", 0.0)
    st = Taking()
    st.input.assign(0, 3)
    asyncio.run(st.process([rec(6), rec(7)]))
    assert calls == [(3, 6), (3, 6)]
    assert st.taken == [3, 4, 5, 6, 7]
    assert st.input.position[0] == 8


def test_a_read_that_keeps_coming_back_short_stops_the_stage(monkeypatch):
    def read(_s, _t, _p, start, end):
        raise stages.ShortRead("came back early")

    monkeypatch.setattr(stages, "read_records", read)
    monkeypatch.setattr(stages, "GAP_BACKOFF_S", 0.0)
    st = Taking()
    st.input.assign(0, 3)
    with pytest.raises(stages.ShortRead):
        asyncio.run(st.process([rec(6)]))
    assert st.taken == [] and st.input.position[0] == 3


def test_a_real_gap_is_stepped_over(monkeypatch):
    """A read that reached the record and found nothing before it (a compacted or transactional
    log): the position moves to the record."""
    monkeypatch.setattr(stages, "read_records", lambda *_a: [])
    st = Taking()
    st.input.assign(0, 3)
    asyncio.run(st.process([rec(6)]))
    assert st.taken == [6] and st.input.position[0] == 7
