"""A stalled broker or network is retriable for the worker's outbox (issue 23, found by the fault
suite's network blackhole): a flush round that ends with deliveries pending and none failed is
waited out, told once and counted, never a failed batch (which would end the worker); a delivery
that fails still fails the batch."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from confluent_kafka import KafkaError

from streams.codec import Codec
from streams.kafka.settings import KafkaSettings
from streams.worker import metrics, outbox as outbox_mod
from streams.worker.outbox import Outbox
from streams.worker.settings import WorkerSettings


class SlowProducer:
    """Acknowledges nothing for ``stalled`` seconds, then everything (or fails every record)."""

    def __init__(self, conf: dict, stalled: float, fail: bool = False) -> None:
        self.conf, self.until, self.fail, self.pending = conf, time.monotonic() + stalled, fail, []

    def produce(self, topic, key=None, value=None, headers=None, on_delivery=None, **kw) -> None:
        self.pending.append((topic, on_delivery))

    def poll(self, _t=0) -> int:
        return 0

    def flush(self, t=0) -> int:
        if time.monotonic() < self.until:
            time.sleep(min(t, 0.005))
            return len(self.pending)
        for _topic, cb in self.pending:  # a delivery report for every record, as librdkafka gives
            cb(KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out") if self.fail else None, None)
        self.pending = []
        return 0


def _outbox(monkeypatch, stalled: float, fail: bool = False) -> Outbox:
    monkeypatch.setattr(outbox_mod, "FLUSH_ROUND_S", 0.01)
    monkeypatch.setattr(KafkaSettings, "producer", lambda self, **o: SlowProducer(self.producer_config(**o), stalled, fail))
    box = Outbox(WorkerSettings("127.0.0.1:9092"), Codec())
    box.send("lineage.alerts", b"k", b"v", headers=[])
    return box


def test_a_stalled_flush_is_waited_out_and_told_once(monkeypatch, caplog):
    box = _outbox(monkeypatch, stalled=0.1)
    before = metrics.OUTBOX_STALLS._value.get()
    with caplog.at_level(logging.WARNING, "traintrace.worker"):
        asyncio.run(box.flush())  # raises nothing
    said = [r.getMessage() for r in caplog.records if "outbox:" in r.getMessage()]
    assert len(said) == 2 and "waiting" in said[0] and "acknowledged again" in said[1], said
    assert metrics.OUTBOX_STALLS._value.get() == before + 1


def test_a_failed_delivery_still_fails_the_batch(monkeypatch):
    box = _outbox(monkeypatch, stalled=0.1, fail=True)
    with pytest.raises(RuntimeError, match="delivery failed"):
        asyncio.run(box.flush())
