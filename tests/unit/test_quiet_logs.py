"""Quiet logs under faults (streams.kafka.quiet): what aiokafka repeats every ~100 ms while a
broker is away is logged once per window and counted, with a fake clock."""

from __future__ import annotations

import logging

import pytest

from streams.kafka import quiet
from streams.kafka.quiet import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.name, record.levelname, record.getMessage()))


@pytest.fixture
def logs():
    """Two library loggers under one filter with a fake clock, and what reached their handler."""
    clock = Clock()
    f = RepeatFilter(30.0, clock=clock)
    lines = Lines()
    names = ("tt-test.aiokafka", "tt-test.aiokafka.consumer.fetcher")
    loggers = [logging.getLogger(n) for n in names]
    for lg in loggers:
        lg.addFilter(f)
        lg.propagate = False
        lg.addHandler(lines)
        lg.setLevel(logging.DEBUG)
    try:
        yield f, clock, lines, loggers
    finally:
        for lg in loggers:
            lg.removeFilter(f)
            lg.removeHandler(lines)


def _outage(clock: Clock, loggers, seconds: float, every: float = 0.1) -> None:
    """What aiokafka logs during an outage of node 1 and 2: two messages, every ``every`` s."""
    client, fetcher = loggers
    for _ in range(round(seconds / every)):
        for node in (1, 2):
            client.error("Unable connect to node with id %s: %s", node,
                         f"[Errno 111] Connect call failed ('127.0.0.1', {19292 + node})")
            fetcher.error("Failed fetch messages from %s: %s", node, "NodeNotReadyError: not ready")
        clock.t += every


def test_the_first_is_logged_the_repeats_are_counted_and_said_once_per_window(logs):
    f, clock, lines, loggers = logs
    _outage(clock, loggers, 19.0)  # 190 rounds x 2 nodes x 2 messages
    assert [m for _n, _l, m in lines.lines] == [
        "Unable connect to node with id 1: [Errno 111] Connect call failed ('127.0.0.1', 19293)",
        "Failed fetch messages from 1: NodeNotReadyError: not ready",
    ]
    assert f.dropped == 190 * 4 - 2
    clock.t += 12  # the broker is back; the window ends; the next record of any filtered logger says the counts
    loggers[0].info("Discovered coordinator 1")
    said = [m for _n, _l, m in lines.lines[2:]]
    assert said[-1] == "Discovered coordinator 1"
    assert sorted(said[:-1]) == [
        "Failed fetch messages from 2: NodeNotReadyError: not ready (repeated 379 times in the last 31 s)",
        "Unable connect to node with id 2: [Errno 111] Connect call failed ('127.0.0.1', 19294) "
        "(repeated 379 times in the last 31 s)",
    ]
    assert {(n, lvl) for n, lvl, _m in lines.lines[2:4]} == {("tt-test.aiokafka", "ERROR"),
                                                             ("tt-test.aiokafka.consumer.fetcher", "ERROR")}
    loggers[0].info("Discovered coordinator 1")
    assert len(lines.lines) == 6  # said once: nothing more to say


def test_a_long_outage_says_each_message_once_per_window(logs):
    f, clock, lines, loggers = logs
    _outage(clock, loggers, 95.0)  # 950 rounds x 4 records
    assert len(lines.lines) == 8  # per message: the first, then one line per 30 s window
    assert [n for n, _l, _m in lines.lines].count("tt-test.aiokafka") == 4
    later = [m for _n, _l, m in lines.lines[2:]]
    assert all(m.endswith(("(repeated 601 times in the last 30 s)", "(repeated 602 times in the last 30 s)"))
               for m in later), later
    assert sum(int(m.split("(repeated ")[1].split()[0]) for m in later) <= f.dropped < 950 * 4


def test_messages_differ_by_logger_and_template_not_by_their_arguments(logs):
    f, clock, lines, loggers = logs
    client, fetcher = loggers
    client.error("Unable to update metadata from %s", [1])
    client.error("Unable to update metadata from %s", [2])  # same template: a repeat
    fetcher.error("Unable to update metadata from %s", [1])  # another logger: another message
    client.error("Heartbeat session expired - marking coordinator dead")
    client.error("[^--Producer]: node 1 is down")  # formatted beforehand: numbers do not count
    client.error("[^--Producer]: node 2 is down")
    assert [m for _n, _l, m in lines.lines] == [
        "Unable to update metadata from [1]", "Unable to update metadata from [1]",
        "Heartbeat session expired - marking coordinator dead", "[^--Producer]: node 1 is down"]
    assert f.dropped == 2


def test_below_warning_passes_and_a_later_outage_is_told_again(logs):
    f, clock, lines, loggers = logs
    client = loggers[0]
    for _ in range(5):
        client.debug("Sending metadata request %s", 1)
    assert len(lines.lines) == 5 and f.dropped == 0
    client.warning("Got error produce response: %s", "NotLeaderForPartitionError")
    clock.t += 45  # a window without repeats is forgotten
    client.warning("Got error produce response: %s", "NotLeaderForPartitionError")
    assert [m for _n, _l, m in lines.lines[5:]] == ["Got error produce response: NotLeaderForPartitionError"] * 2


def test_the_first_record_after_the_window_carries_the_count_and_flush_says_the_rest(logs):
    f, clock, lines, loggers = logs
    client = loggers[0]
    for _ in range(10):
        client.error("Unable to update metadata from %s", [1])
        clock.t += 1
    clock.t += 25
    client.error("Unable to update metadata from %s", [1])
    assert lines.lines[-1][2] == "Unable to update metadata from [1] (repeated 9 times in the last 35 s)"
    clock.t += 2
    client.error("Unable to update metadata from %s", [1])
    f.flush()  # e.g. at exit: the open window's count, once
    assert lines.lines[-1][2] == "Unable to update metadata from [1] (repeated 1 times in the last 2 s)"
    f.flush()
    assert len(lines.lines) == 3


def test_install_puts_one_filter_on_every_library_logger_and_can_be_turned_off(monkeypatch):
    child = logging.getLogger("tt-install.lib.sub.module")
    root = logging.getLogger("tt-install.lib")
    try:
        first = quiet.install(prefixes=("tt-install.lib",), imports=())
        assert first in child.filters and first in root.filters
        second = quiet.install(prefixes=("tt-install.lib",), imports=())
        assert child.filters == [second] and root.filters == [second]  # replaced, not stacked
        monkeypatch.setenv(quiet.OFF_ENV, "all")
        assert quiet.install(prefixes=("tt-install.lib",), imports=()) is None
    finally:
        for lg in (child, root):
            for flt in list(lg.filters):
                lg.removeFilter(flt)


def test_install_covers_aiokafka():
    pytest.importorskip("aiokafka")
    f = quiet.install()
    try:
        for name in ("aiokafka", "aiokafka.conn", "aiokafka.consumer.fetcher", "aiokafka.consumer.group_coordinator",
                     "aiokafka.producer.sender"):
            assert f in logging.getLogger(name).filters, name
    finally:
        for name, lg in list(logging.root.manager.loggerDict.items()):
            if isinstance(lg, logging.Logger) and f in lg.filters:
                lg.removeFilter(f)
