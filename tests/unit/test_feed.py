"""A stage's direct feed (issue 27, streams.worker.feed): it follows where the stage is
(its consumer sought to the stage's positions whenever they differ) and hands the stage its
records in batches; what the stage does with them (in order, owned only) is the stage's."""

from __future__ import annotations

import asyncio

from streams.kafka.topics import TopicNames
from streams.worker.feed import DirectFeed
from streams.worker.positions import InputPartitions
from streams.worker.settings import WorkerSettings


class Msg:
    def __init__(self, p: int, o: int) -> None:
        self.p, self.o = p, o

    def error(self):
        return None

    def topic(self):
        return "t.events"

    def partition(self):
        return self.p

    def offset(self):
        return self.o

    def key(self):
        return b"k"

    def value(self):
        return b"v"

    def timestamp(self):
        return (1, 1000 + self.o)

    def headers(self):
        return []


class FakeConsumer:
    """``queue``: the fetches to come, each a list of records; ``poll()`` waits for the next
    (none: None) and returns its first record, ``consume()`` what is fetched already."""

    def __init__(self) -> None:
        self.assigned: list[list[tuple[int, int]]] = []
        self.queue: list[list[Msg]] = []
        self.fetched: list[Msg] = []
        self.calls: list[tuple] = []

    def assign(self, tps) -> None:
        self.assigned.append([(tp.partition, tp.offset) for tp in tps])

    def poll(self, timeout):
        self.calls.append(("poll", timeout))
        if not self.fetched and self.queue:
            self.fetched = self.queue.pop(0)
        return self.fetched.pop(0) if self.fetched else None

    def consume(self, n, timeout):
        self.calls.append(("consume", n, timeout))
        got, self.fetched = self.fetched[:n], self.fetched[n:]
        return got

    def get_watermark_offsets(self, tp, cached=False):
        assert cached  # the lag metric never costs a broker call
        return (0, 42) if tp.partition == 0 else (-1001, -1001)

    def close(self) -> None:
        pass


class FakeStage:
    """The stage's contract as the feed sees it: its name, its input partitions, and process()."""

    name = "route"

    def __init__(self) -> None:
        self.input = InputPartitions("t.events")
        self.batches: list[list[tuple[int, int]]] = []
        self.pending = None  # (its batches are delivered at once: nothing to settle)
        self.lock = asyncio.Lock()

    @property
    def topic(self) -> str:
        return self.input.topic

    async def process(self, records) -> None:
        self.batches.append([(r.partition, r.offset) for r in records])
        for r in records:
            if self.input.classify(r.partition, r.offset).name == "PROCESS":
                self.input.advance(r.partition, r.offset)


def feed_of(stage: FakeStage, monkeypatch) -> tuple[DirectFeed, FakeConsumer]:
    consumer = FakeConsumer()
    settings = WorkerSettings("unused:9092", topics=TopicNames.from_env("t."))
    monkeypatch.setattr(type(settings.kafka), "consumer", lambda self, group, **kw: consumer)
    return DirectFeed(settings, stage), consumer


def test_the_feed_seeks_only_when_the_stage_is_not_where_its_consumer_stands(monkeypatch):
    stage = FakeStage()
    feed, consumer = feed_of(stage, monkeypatch)
    stage.input.assign(0, 5)
    stage.input.assign(1, 7)
    feed._follow()
    feed._follow()
    assert consumer.assigned == [[(0, 5), (1, 7)]]  # once
    stage.input.position[1] = 9  # the stall watch (or Faust) processed two records
    feed._follow()
    stage.input.revoke(0)
    feed._follow()
    assert consumer.assigned[1:] == [[(0, 5), (1, 9)], [(1, 9)]]


def test_the_feed_hands_the_stage_its_batches_and_follows_what_the_stage_processed(monkeypatch):
    stage = FakeStage()
    feed, consumer = feed_of(stage, monkeypatch)
    stage.input.assign(0, 0)
    consumer.queue = [[Msg(0, 0), Msg(0, 1)], [Msg(0, 2)]]

    async def two_rounds() -> None:
        task = asyncio.ensure_future(feed.run())
        while len(stage.batches) < 2:
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(two_rounds())
    assert stage.batches == [[(0, 0), (0, 1)], [(0, 2)]]
    assert stage.input.position[0] == 3 == feed.at[0] and consumer.assigned == [[(0, 0)]]


def test_a_batch_is_the_first_record_as_it_comes_and_then_what_is_fetched_without_waiting(monkeypatch):
    """One record of light traffic is handed on at once (a consume() of the whole batch waited
    its timeout for records that were not there), a backlog in batches of at most FEED_BATCH,
    and an idle feed waits FEED_IDLE_S a round."""
    from streams.worker.feed import FEED_BATCH, FEED_IDLE_S

    stage = FakeStage()
    feed, consumer = feed_of(stage, monkeypatch)
    consumer.queue = [[Msg(0, 0)], [Msg(0, o) for o in range(1, FEED_BATCH + 11)]]
    assert [r.offset for r in feed._consume()] == [0]
    assert consumer.calls == [("poll", FEED_IDLE_S), ("consume", FEED_BATCH - 1, 0)]
    assert len(feed._consume()) == FEED_BATCH and [r.offset for r in feed._consume()] == list(range(2001, 2011))
    consumer.calls.clear()
    assert feed._consume() == [] and consumer.calls == [("poll", FEED_IDLE_S)]


def test_the_feed_knows_the_high_watermarks_faust_no_longer_fetches(monkeypatch):
    from streams.worker import metrics

    stage = FakeStage()
    feed, _consumer = feed_of(stage, monkeypatch)
    stage.input.assign(0, 40)
    stage.input.assign(1, 0)
    feed._follow()
    assert feed.highwater("t.events", 0) == 42 and feed.highwater("t.events", 1) is None
    assert feed.highwater("t.by-cohort", 0) is None

    class FaustConsumer:  # paused partitions: Faust's own high watermark is stale
        def assignment(self):
            from faust.types import TP
            return {TP("t.events", 0)}

        def highwater(self, tp):
            return 10

    assert metrics.observe_lag(FaustConsumer(), (stage.input,), highwater=feed.highwater) == {("t.events", 0): (40, 2)}


def test_a_clean_stop_during_a_consume_ends_the_feed_and_closes_its_consumer_after_the_call(monkeypatch):
    """The worker's stop closes the feed while a poll() runs in its thread: the consumer is
    closed once that call returns (never under it), what it got is left to the next owner, and
    the feed ends instead of failing on a closed consumer (which made every SIGTERM an exit 70)."""
    import threading

    stage = FakeStage()
    feed, consumer = feed_of(stage, monkeypatch)
    stage.input.assign(0, 0)
    entered, release, calls = threading.Event(), threading.Event(), []

    def poll(timeout):
        entered.set()
        release.wait(5)
        assert not calls, "poll() ran on a closed consumer"
        return Msg(0, 0)

    def consume(n, timeout):
        assert not calls, "consume() ran on a closed consumer"
        return []

    consumer.poll, consumer.consume = poll, consume
    consumer.close = lambda: calls.append("close")

    async def stop_midway() -> None:
        task = asyncio.ensure_future(feed.run())
        while not entered.is_set():
            await asyncio.sleep(0.01)
        feed.close()
        assert calls == []  # not under the running call
        release.set()
        await asyncio.wait_for(task, 5)  # ends, no exception

    asyncio.run(stop_midway())
    assert calls == ["close"] and stage.batches == []
    feed.close()
    assert calls == ["close"]  # once
