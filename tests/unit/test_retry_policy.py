"""One policy for retriable broker errors (issue 23): every error a coordinator move or a paused
broker produces is retried with backoff within a deadline, then reported as one clear error; the
worker's timers never crash the app on it; and every broker call of the runtime packages goes
through the policy (or degrades by itself where a test lists why)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams.kafka.errors import KafkaAdapterError
from streams.kafka.retry import Degradation, RetryPolicy, TransientError, is_transient, retry_transient

REPO = Path(__file__).resolve().parents[2]

#: the errors the issue saw, and the others a coordinator move or a broker pause produces
RETRIABLE = [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
             KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
             KafkaError._TRANSPORT, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.OFFSET_NOT_AVAILABLE,
             KafkaError.LEADER_NOT_AVAILABLE, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._ALL_BROKERS_DOWN,
             KafkaError.REBALANCE_IN_PROGRESS, KafkaError.NOT_ENOUGH_REPLICAS]


def kafka_exc(code: int, fatal: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, f"injected {code}", fatal=fatal))


class Flaky:
    """A call that raises ``errors`` one after the other, then returns ``value``."""

    def __init__(self, errors, value="ok") -> None:
        self.errors, self.value, self.calls = list(errors), value, 0

    def __call__(self, timeout: float):
        self.calls += 1
        assert 0 < timeout <= 5.0
        if self.errors:
            raise self.errors.pop(0)
        return self.value


@pytest.mark.parametrize("code", RETRIABLE, ids=lambda c: KafkaError(c).name())
def test_every_retriable_error_is_retried_until_the_call_succeeds(code):
    call = Flaky([kafka_exc(code)] * 3)
    slept: list[float] = []
    assert retry_transient(call, "x", RetryPolicy(deadline_s=30), sleep=slept.append) == "ok"
    assert call.calls == 4 and slept == [0.1, 0.2, 0.4]  # exponential backoff
    assert is_transient(kafka_exc(code))


def test_past_the_deadline_a_transient_error_is_one_clear_error():
    call = Flaky([kafka_exc(KafkaError.NOT_COORDINATOR)] * 1000)
    with pytest.raises(TransientError) as info:
        retry_transient(call, "the committed offsets of g", RetryPolicy(deadline_s=0.3, first_backoff_s=0.05))
    assert "the committed offsets of g" in str(info.value) and "NOT_COORDINATOR" in str(info.value)
    assert isinstance(info.value, KafkaAdapterError) and call.calls >= 2


def test_a_non_retriable_or_fatal_error_is_not_retried():
    for exc in (kafka_exc(KafkaError.TOPIC_AUTHORIZATION_FAILED), kafka_exc(KafkaError._FATAL, fatal=True),
                kafka_exc(KafkaError.NOT_COORDINATOR, fatal=True)):
        call = Flaky([exc])
        with pytest.raises(KafkaAdapterError):
            retry_transient(call, "x", 30, sleep=lambda s: None)
        assert call.calls == 1 and not is_transient(exc)


def test_the_backoff_is_capped():
    call = Flaky([kafka_exc(KafkaError._TRANSPORT)] * 8)
    slept: list[float] = []
    retry_transient(call, "x", RetryPolicy(deadline_s=60, max_backoff_s=1.0), sleep=slept.append)
    assert max(slept) == 1.0 and slept[:4] == [0.1, 0.2, 0.4, 0.8]


def test_a_degradation_is_told_once_and_its_end_with_how_long(caplog):
    t = [100.0]
    d = Degradation("housekeeping", clock=lambda: t[0])
    with caplog.at_level("WARNING", logger="traintrace.kafka"):
        for _ in range(50):
            d.failed("NOT_COORDINATOR")
            t[0] += 1
        d.ok()
        d.ok()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "skipped (NOT_COORDINATOR)" in lines[0] and "back after 50.0 s (50 round(s) skipped)" in lines[1]
    assert d.count == 50 and not d.degraded


# -- the worker's input clock and timers, with a fake consumer ----------------------------------


class FakeOffsets:
    """The InputClock's offsets consumer: each method raises its queued errors first."""

    def __init__(self, errors) -> None:
        self.errors = {k: list(v) for k, v in errors.items()}

    def _maybe(self, name):
        if self.errors.get(name):
            raise self.errors[name].pop(0)

    def list_topics(self, topic, timeout):
        self._maybe("list_topics")

        class MD:
            topics = {topic: type("T", (), {"partitions": {0: None, 1: None}})()}
        return MD()

    def committed(self, tps, timeout):
        self._maybe("committed")
        return [TopicPartition(tp.topic, tp.partition, 10) for tp in tps]

    def get_watermark_offsets(self, tp, timeout):
        self._maybe("get_watermark_offsets")
        return 0, 10  # routed to its end

    def close(self):
        pass


@pytest.mark.parametrize("call", ["list_topics", "committed", "get_watermark_offsets"])
@pytest.mark.parametrize("code", [KafkaError.NOT_COORDINATOR, KafkaError.OFFSET_NOT_AVAILABLE,
                                  KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID,
                                  KafkaError._TIMED_OUT], ids=lambda c: KafkaError(c).name())
def test_the_input_clock_rides_out_what_crashed_the_worker(call, code, monkeypatch):
    """The issue's crash: ``committed()`` raised NOT_COORDINATOR (clock.py:106) and
    ``get_watermark_offsets()`` OFFSET_NOT_AVAILABLE (clock.py:109) while a coordinator moved."""
    from streams.worker import clock as clock_mod

    monkeypatch.setattr("time.sleep", lambda s: None)
    c = clock_mod.InputClock.__new__(clock_mod.InputClock)
    import threading

    c.topic, c.group, c.slack_ms, c._lock, c._ts_cache = "t", "g", 1000, threading.Lock(), {}
    c._offsets = FakeOffsets({call: [kafka_exc(code)] * 3})
    assert c.watermark(5_000) == 4_000


def test_a_failing_timer_round_is_counted_and_never_reaches_faust():
    from streams.worker import metrics
    from streams.worker.health import Health, guarded

    health = Health()

    async def boom() -> None:
        raise KafkaAdapterError("cannot get the committed offsets: NOT_COORDINATOR")

    async def fine() -> None:
        return None

    before = metrics.TIMER_FAILURES.labels("housekeeping", "KafkaAdapterError")._value.get()
    for _ in range(3):
        asyncio.run(guarded(health, "housekeeping", boom))  # raises nothing
    assert metrics.TIMER_FAILURES.labels("housekeeping", "KafkaAdapterError")._value.get() == before + 3
    view = health.view()
    assert view["state"] == "degraded" and view["degraded"]["housekeeping"]["rounds_skipped"] == 3
    asyncio.run(guarded(health, "housekeeping", fine))
    assert health.view()["state"] == "ready"
    health.dead = "crashed: boom"
    assert health.view()["state"] == "dead" and not health.view()["ok"]


# -- every broker call site -----------------------------------------------------------------------

BROKER_CALL = re.compile(r"\.(committed|list_topics|list_offsets|get_watermark_offsets|offsets_for_times|describe_configs|"
                         r"create_topics|describe_consumer_groups|list_consumer_group_offsets|create_acls|"
                         r"describe_acls|delete_acls|alter_configs|incremental_alter_configs)\(")

#: call sites that handle retriable errors themselves, and how (file, call) -> why
HANDLED_ELSEWHERE = {
    ("streams/client/control.py", "list_topics"): "the fetcher retries every second while it fails",
    ("streams/client/control.py", "get_watermark_offsets"): "the fetcher retries every second while it fails",
    ("streams/worker/stages.py", "get_watermark_offsets"): "the stall check skips the pass on a KafkaException",
    ("streams/kafka/security.py", "list_topics"): "its own slices within a deadline (the security probe)",
}
#: packages whose broker calls are the laptop's conveniences or one-shot commands, not the runtime
NOT_RUNTIME = ("streams/devtools/", "streams/demo/",
               "streams/kafka/acls.py", "streams/cli/")


def test_every_broker_call_of_the_runtime_goes_through_the_policy():
    """Every ``committed``, ``list_topics``, ``get_watermark_offsets``, admin call... under
    ``streams/`` is inside a ``retry_transient(...)`` call, says on its line how it is retried
    (``# retried: ...``), or is listed above with how it degrades."""
    unguarded = []
    for path in sorted((REPO / "streams").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(NOT_RUNTIME):
            continue
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = BROKER_CALL.search(line)
            if not m or line.lstrip().startswith(("#", "def ")):
                continue
            window = "\n".join(lines[max(0, i - 3): i + 1])
            if "retry_transient(" in window or "# retried:" in line or (rel, m.group(1)) in HANDLED_ELSEWHERE:
                continue
            unguarded.append(f"{rel}:{i + 1}: {line.strip()}")
    assert not unguarded, "broker calls outside the retry policy:\n" + "\n".join(unguarded)
