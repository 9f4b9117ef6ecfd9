"""A stage waits for one batch's deliveries while the next batch is processed (issue 27): what an
outbox sent between two cuts is a ticket, waited for on its own; a stage's call sends its
records and waits for the previous call's; a position counts as processed (and is committed)
only once its batch is delivered; a feed that finds nothing more settles at once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from streams.codec import Codec
from streams.kafka.settings import KafkaSettings
from streams.worker import assignment as assignment_mod, outbox as outbox_mod, stages
from streams.worker.assignment import Assignment
from streams.worker.feed import FEED_IDLE_S
from streams.worker.outbox import Outbox, Ticket
from streams.worker.settings import WorkerSettings

from tests.unit.test_feed import FakeConsumer, Msg, feed_of


class HeldProducer:
    """Delivers only what the test releases (``release(n)``: the next n records, in order, failed
    if ``fail``); records each ``flush()`` timeout."""

    def __init__(self, conf: dict) -> None:
        self.conf = conf
        self.queue: list = []  # (topic, on_delivery) not yet reported
        self.released = 0
        self.fail: set[int] = set()  # indexes (in send order) whose delivery fails
        self.sent = 0
        self.flushes: list[float] = []

    def produce(self, topic, key=None, value=None, headers=None, on_delivery=None, **kw) -> None:
        self.queue.append((self.sent, topic, on_delivery))
        self.sent += 1

    def poll(self, _t=0) -> int:
        return self._report()

    def flush(self, t=0) -> int:
        self.flushes.append(t)
        self._report()
        return len(self.queue)

    def _report(self) -> int:
        n = 0
        while self.queue and self.released > 0:
            i, topic, cb = self.queue.pop(0)
            self.released -= 1
            cb(KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out") if i in self.fail else None,
               SimpleNamespace(topic=lambda topic=topic: topic))
            n += 1
        return n


@pytest.fixture
def box(monkeypatch) -> Outbox:
    monkeypatch.setattr(outbox_mod, "FLUSH_ROUND_S", 0.05)
    monkeypatch.setattr(KafkaSettings, "producer", lambda self, **o: HeldProducer(self.producer_config(**o)))
    return Outbox(WorkerSettings("127.0.0.1:9092"), Codec())


def _send(box: Outbox, n: int) -> Ticket:
    for _ in range(n):
        box.send("lineage.alerts", b"k", b"v", headers=[])
    return box.cut()


def test_a_ticket_is_waited_for_while_a_later_one_is_still_on_its_way(box):
    first, second = _send(box, 2), _send(box, 3)
    assert (first.sent, second.sent) == (2, 3)
    box.producer.released = 2  # the first ticket's records only
    asyncio.run(box.wait(first))  # returns: the later records do not hold it
    assert first.remaining == 0 and second.remaining == 3
    # while later records were on their way, the flushes were short (a flush returns early only
    # once every record is delivered)
    assert box.producer.flushes and max(box.producer.flushes) <= outbox_mod.WAIT_SLICE_S
    box.producer.released = 3
    asyncio.run(box.wait(second))
    assert second.remaining == 0 and second.acked_at is not None


def test_a_failed_delivery_fails_its_own_ticket_only(box):
    box.producer.fail = {1}
    first, second = _send(box, 2), _send(box, 2)
    box.producer.released = 4
    with pytest.raises(RuntimeError, match="delivery failed"):
        asyncio.run(box.wait(first))
    asyncio.run(box.wait(second))


def test_flush_waits_for_what_was_sent_since_the_last_cut(box):
    _send(box, 2)  # an earlier ticket, left pending
    box.send("lineage.alerts", b"k", b"v", headers=[])
    box.producer.released = 3
    asyncio.run(box.flush())
    assert box._ticket.sent == 0  # cut


class Stage(stages.Stage):
    """A stage whose every record sends one record to its outbox."""

    name = "route"

    def __init__(self, outbox: Outbox) -> None:
        super().__init__(SimpleNamespace(), "lineage.events", None, outbox, asyncio.Lock())  # type: ignore[arg-type]
        self.done: list[int] = []  # the batches whose deliveries are in, by their first offset

    def begin(self) -> list:
        return []

    def take(self, batch: list, rec) -> None:
        batch.append(rec.offset)
        self.outbox.send("lineage.by-cohort", b"c", b"v", headers=[])

    def finish(self, batch: list):
        return lambda _ticket: self.done.append(batch[0])


def rec(offset: int) -> stages.RawRecord:
    return stages.RawRecord("lineage.events", 0, offset, b"k", b"v")


def test_a_call_waits_for_the_previous_calls_deliveries_not_its_own(box):
    st = Stage(box)
    st.input.assign(0, 0)

    async def run() -> None:
        await st.process([rec(0), rec(1)])
        assert st.pending is not None and st.done == []  # sent, not waited for
        box.producer.released = 2  # the first call's records are delivered, the second's are not
        await st.process([rec(2), rec(3), rec(4)])
        assert st.done == [0] and st.pending[0].remaining == 3
        box.producer.released = 3
        await st.settle()
        assert st.done == [0, 2] and st.pending is None

    asyncio.run(run())
    assert st.input.position[0] == 5


def _assignment(st: Stage, committed: list) -> Assignment:
    fold = Stage(st.outbox)
    fold.input = type(st.input)("lineage.by-cohort")

    async def commit_offsets(offsets):
        committed.append({tp.partition: o for tp, o in offsets.items()})
        return offsets

    return Assignment(SimpleNamespace(), st, fold, None, commit_offsets)  # type: ignore[arg-type]


def test_a_commit_waits_for_the_last_batch_and_a_failed_delivery_ends_the_worker(box, monkeypatch):
    st = Stage(box)
    st.input.assign(0, 0)
    committed: list = []
    asg = _assignment(st, committed)

    async def run() -> None:
        await st.process([rec(0), rec(1)])
        box.producer.released = 1  # one of two: the commit waits
        waiting = asyncio.ensure_future(asg.commit())
        await asyncio.sleep(0.02)
        assert not waiting.done() and committed == []
        box.producer.released = 1
        await waiting
        assert committed == [{0: 2}] and st.done == [0]

    asyncio.run(run())

    died = []

    def die(agent, exc):  # (the worker's exits: os._exit(70))
        died.append((agent, str(exc)))
        raise SystemExit(70)

    monkeypatch.setattr(assignment_mod, "die", die)
    box.producer.fail = {box.producer.sent}
    box.producer.released = 1

    async def failing() -> None:
        await st.process([rec(2)])
        await asg.commit()

    with pytest.raises(SystemExit):
        asyncio.run(failing())
    assert died and died[0][0] == "route" and "delivery failed" in died[0][1]
    assert committed == [{0: 2}]  # nothing more


def test_a_feed_that_finds_nothing_more_settles_the_last_batch(box, monkeypatch):
    st = Stage(box)
    st.input.assign(0, 0)
    feed, consumer = feed_of(st, monkeypatch)  # type: ignore[arg-type]
    assert isinstance(consumer, FakeConsumer)
    consumer.queue = [[Msg(0, 0), Msg(0, 1)]]
    box.producer.released = 2

    async def run() -> None:
        task = asyncio.ensure_future(feed.run())
        while st.done != [0]:  # settled after the empty poll, with no next batch
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(run())
    assert st.pending is None and st.input.position[0] == 2
    # with a batch pending, the feed took only what was fetched already (no wait for more), and
    # found nothing: the settle came at once, not after an idle wait or librdkafka's linger
    polls = [c for c in consumer.calls if c[0] == "poll"]
    assert polls[0] == ("poll", FEED_IDLE_S) and polls[1] == ("poll", 0.0)
