"""Delivery (streams.client.delivery) with a fake producer: failed deliveries are sent again, the
same bytes, in seq order, and nothing new overtakes them."""

from __future__ import annotations

import threading
import time

from confluent_kafka import KafkaError

from streams.client import delivery as delivery_mod
from streams.client.delivery import Delivery


class FakeProducer:
    """Delivers (or fails) everything queued at each poll(); records what reached 'the topic'.

    Like librdkafka with ``enable.gapless.guarantee``: once a message fails, every message
    queued after it fails too, until the queue is empty (no gap on the topic)."""

    instances: list["FakeProducer"] = []
    topic: list[bytes] = []
    fail: set[bytes] = set()        # values whose next delivery fails (once each)
    fatal = False

    def __init__(self, conf):
        self.conf = conf
        self.queue: list[tuple[bytes, object]] = []
        self.lock = threading.Lock()
        self.poisoned = False
        FakeProducer.instances.append(self)

    def produce(self, topic, key=None, value=None, on_delivery=None):
        with self.lock:
            self.queue.append((value, on_delivery))

    def poll(self, timeout=0):
        with self.lock:
            batch, self.queue = self.queue, []
        if not batch:
            time.sleep(min(timeout, 0.01))
        for value, cb in batch:
            # a value's planned failure is its own, the first in its batch; one that fails after
            # it (gapless) keeps its plan for its next delivery, so the test's failures are as
            # many rounds however the delivery thread's polls fall (a loaded CI machine put two
            # in one batch)
            planned = value in FakeProducer.fail and not self.poisoned
            if self.poisoned or planned:
                self.poisoned = True
                if planned:
                    FakeProducer.fail.discard(value)
                cb(KafkaError(KafkaError._FATAL if FakeProducer.fatal else KafkaError._MSG_TIMED_OUT,
                              "failed", fatal=FakeProducer.fatal), None)
            else:
                FakeProducer.topic.append(value)
                cb(None, None)
        with self.lock:
            if not self.queue:
                self.poisoned = False
        return len(batch)

    def flush(self, timeout=0):
        return len(self.queue)

    def __len__(self):
        with self.lock:
            return len(self.queue)


def setup(monkeypatch, fail=(), fatal=False):
    FakeProducer.instances = []
    FakeProducer.topic = []
    FakeProducer.fail = set(fail)
    FakeProducer.fatal = fatal
    monkeypatch.setattr(delivery_mod, "Producer", FakeProducer)


def wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_failed_delivery_is_sent_again_in_order(monkeypatch):
    setup(monkeypatch, fail={b"e3"})
    d = Delivery("x:1", "events", "A", retry_backoff=0.05)
    try:
        for i in range(10):
            d.send(i, f"e{i}".encode())
        assert d.flush(10) == 0
        # e3 failed (and e4.. with it): sent again from e3, in order, nothing lost or reordered
        assert FakeProducer.topic == [f"e{i}".encode() for i in range(10)]
        assert d.resends == 1 and d.failures >= 1 and d.pending() == 0
        assert len(FakeProducer.instances) == 1      # not fatal: same producer
    finally:
        d.close(1)


def test_a_fatal_error_gets_a_new_producer(monkeypatch):
    setup(monkeypatch, fail={b"e0"}, fatal=True)
    d = Delivery("x:1", "events", "A", retry_backoff=0.05)
    try:
        d.send(0, b"e0")
        d.send(1, b"e1")
        assert d.flush(10) == 0
        assert len(FakeProducer.instances) == 2
        assert FakeProducer.topic == [b"e0", b"e1"]
    finally:
        d.close(1)


def test_capacity(monkeypatch):
    setup(monkeypatch)
    d = Delivery("x:1", "events", "A", buffer_max=2)
    try:
        d._closed = False
        assert d.wait_capacity(0.1)
        assert d.acked_through(0) == -1
        d.send(0, b"a")
        d.send(1, b"b")
        assert d.flush(5) == 0 and d.acked_through(2) == 1
    finally:
        d.close(1)


def test_producer_configuration():
    d = Delivery("127.0.0.1:1", "events", "A", buffer_max=250_000)
    try:
        conf = d.conf
        assert conf["enable.idempotence"] is True and conf["acks"] == "all"
        assert conf["partitioner"] == "murmur2_random"
        assert conf["message.timeout.ms"] == 0                       # never expire
        assert conf["enable.gapless.guarantee"] is True
        assert conf["queue.buffering.max.messages"] >= 250_000
    finally:
        d.close(0)


def test_failures_while_sending_never_leave_a_gap(monkeypatch):
    setup(monkeypatch, fail={b"e17", b"e90", b"e150"})
    d = Delivery("x:1", "events", "A", retry_backoff=0.01)
    try:
        for i in range(200):
            d.send(i, f"e{i}".encode())
            if i % 7 == 0:
                time.sleep(0.002)   # let the delivery thread interleave
        assert d.flush(10) == 0
        # what the processor sees: every seq is the next one or an identical earlier one
        nxt = 0
        for v in FakeProducer.topic:
            s = int(v[1:])
            assert s <= nxt, f"gap: seq {s} arrived while {nxt} was expected"
            if s == nxt:
                nxt += 1
        assert nxt == 200 and d.resends >= 3
    finally:
        d.close(1)


# -- group commit: nothing is produced before the journal's sync ------------------------------


class GatedSync:
    """A journal sync that waits until the test lets it go, and records what was produced then."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.calls = 0
        self.produced_at_call: list[int] = []
        self.fail_next = False

    def __call__(self) -> None:
        self.produced_at_call.append(len(FakeProducer.topic))
        self.gate.wait(10)
        self.calls += 1
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk full")


def test_group_commit_produces_only_after_the_sync_in_order(monkeypatch):
    setup(monkeypatch)
    sync = GatedSync()
    d = Delivery("x:1", "events", "A", sync=sync)
    try:
        for i in range(5):
            d.send(i, f"e{i}".encode())
        d.send_seal(4, b"s4")
        assert d.pending() == 5  # pending from the send on
        time.sleep(0.1)
        assert FakeProducer.topic == []  # nothing reached the producer before the sync returned
        sync.gate.set()
        assert d.flush(10) == 0
        assert FakeProducer.topic == [b"e0", b"e1", b"e2", b"e3", b"e4", b"s4"]
        assert sync.calls <= 2  # the sends of a burst share a sync (the first may start alone)
        assert d.syncs == sync.calls
    finally:
        d.close(1)


def test_group_commit_retries_a_failed_sync_and_resends_only_what_is_durable(monkeypatch):
    setup(monkeypatch, fail={b"e1"})
    sync = GatedSync()
    sync.fail_next = True
    sync.gate.set()
    d = Delivery("x:1", "events", "A", retry_backoff=0.05, sync=sync)
    try:
        for i in range(4):
            d.send(i, f"e{i}".encode())
        assert d.flush(10) == 0
        # the failed sync produced nothing; the retry did; e1's failed delivery was sent again
        assert FakeProducer.topic == [f"e{i}".encode() for i in range(4)]
        assert sync.calls >= 2 and d.resends >= 1
        assert sync.produced_at_call[0] == 0
    finally:
        d.close(1)
