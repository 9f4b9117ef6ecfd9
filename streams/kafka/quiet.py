"""Quiet logs under faults: what the Kafka libraries repeat is said once per window, counted.

While a broker is away aiokafka logs the same few lines for every node every ~100 ms ("Unable
connect to node with id 1: ...", "Unable to update metadata from [1]", "Failed fetch messages
from 1: NodeNotReadyError ...", "Group Coordinator Request failed: ..."): a 20 s outage wrote
thousands of ERROR lines to one worker's log and buried the lines that say what changed.

:class:`RepeatFilter` keeps, per (logger, message template) — the template before its ``%``
arguments, so "node 1" and "node 2" are one message — the first record of a window
(``window_s``, 30 s) and drops the repeats within it, counting them. The first record after the
window carries the count::

    Unable connect to node with id 1: [Errno 111] Connect call failed ('127.0.0.1', 9092)
      (repeated 243 times in the last 30 s)

and a message that stopped repeating (the broker is back) gets its count said once, as its own
record, when the next record of a filtered logger comes by after its window, or at
:meth:`RepeatFilter.flush`; that summary opens the message's next window, so a message still
repeating is said once per window, however the records interleave.
Only records at ``min_level`` (WARNING) and above are limited: with ``--loglevel debug`` the
libraries' debug lines pass as they are.

:func:`install` puts one filter on every logger of the libraries (``aiokafka``, Faust's Kafka
transport); a logger's filter sees only its own records, so each existing logger of those trees
gets it (the libraries are imported first, so their module loggers exist).
``TRAINTRACE_KAFKA_LOG_REPEATS=all`` turns it off.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

__all__ = ["DEFAULT_LOGGERS", "RepeatFilter", "install"]

#: the loggers whose repeats are limited (each with its descendants)
DEFAULT_LOGGERS = ("aiokafka", "kafka", "faust.transport")
#: the libraries imported before their loggers are looked up
_IMPORTS = ("aiokafka", "faust.transport.drivers.aiokafka")
OFF_ENV = "TRAINTRACE_KAFKA_LOG_REPEATS"
_SUMMARY = "_traintrace_repeat_summary"  # the attribute marking a summary record (passed through)
_DIGITS = re.compile(r"\d+")


@dataclass
class _Seen:
    since: float  # when the window opened (its first record was let through)
    level: int
    repeats: int = 0  # dropped in this window
    last: str = ""  # the last dropped record's message


class RepeatFilter(logging.Filter):
    """Lets the first record of each (logger, template) through per ``window_s``; counts and
    drops the rest; says the count once (module doc). ``clock``: seconds, monotonic."""

    def __init__(self, window_s: float = 30.0, *, min_level: int = logging.WARNING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = float(window_s)
        self.min_level = min_level
        self.clock = clock
        self.dropped = 0  # ever, for a test or a metric
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._lock = threading.Lock()

    @staticmethod
    def template(record: logging.LogRecord) -> str:
        """The message before its arguments; a message formatted beforehand with its numbers
        as ``N`` (node ids, ports and milliseconds do not make another message)."""
        if record.args:
            return str(record.msg)
        return _DIGITS.sub("N", str(record.msg))

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _SUMMARY, False):
            return True
        now = self.clock()
        key = (record.name, self.template(record))
        with self._lock:
            due = self._due(now, key)
            keep = True
            if record.levelno >= self.min_level:
                seen = self._seen.get(key)
                if seen is not None and now - seen.since < self.window_s:
                    seen.repeats += 1
                    seen.last = record.getMessage()
                    self.dropped += 1
                    keep = False
                else:
                    if seen is not None and seen.repeats:
                        self._annotate(record, seen.repeats, _span(now - seen.since))
                    self._seen[key] = _Seen(now, record.levelno)
        self._emit(due)
        return keep

    def flush(self) -> None:
        """Say the count of every window that dropped something, and forget them all (e.g. at exit)."""
        with self._lock:
            due = self._due(self.clock(), None, everything=True)
        self._emit(due)

    # -- under the lock --------------------------------------------------------------------------

    def _due(self, now: float, current: tuple[str, str] | None, everything: bool = False) -> list[logging.LogRecord]:
        """The summaries of the windows that ended with repeats (not ``current``'s: its record
        carries them). A summary opens the next window of its message (a message still
        repeating is said once per window); a window that ended without repeats is forgotten."""
        out = []
        for key, seen in list(self._seen.items()):
            if key == current or not (everything or now - seen.since >= self.window_s):
                continue
            if seen.repeats:
                out.append(self._summary(key, seen, now))
            if seen.repeats and not everything:
                self._seen[key] = _Seen(now, seen.level)
            else:
                del self._seen[key]
        return out

    def _summary(self, key: tuple[str, str], seen: _Seen, now: float) -> logging.LogRecord:
        msg = f"{seen.last} (repeated {seen.repeats} times in the last {_span(now - seen.since)} s)"
        record = logging.LogRecord(key[0], seen.level, __file__, 0, msg, (), None)
        setattr(record, _SUMMARY, True)
        return record

    @staticmethod
    def _annotate(record: logging.LogRecord, repeats: int, span: int) -> None:
        """``record`` (the first of a new window) with the count of the window before it."""
        record.msg = f"{record.getMessage()} (repeated {repeats} times in the last {span} s)"
        record.args = ()

    @staticmethod
    def _emit(records: list[logging.LogRecord]) -> None:
        for record in records:
            logging.getLogger(record.name).handle(record)


def _span(elapsed: float) -> int:
    """Whole seconds since a window opened: its repeats all came within them."""
    return max(1, round(elapsed))


def _loggers(prefixes: Iterable[str]) -> list[logging.Logger]:
    prefixes = tuple(prefixes)
    found = [logging.getLogger(p) for p in prefixes]
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and any(name.startswith(p + ".") for p in prefixes):
            found.append(logger)
    return found


def install(window_s: float = 30.0, prefixes: Iterable[str] = DEFAULT_LOGGERS,
            imports: Iterable[str] = _IMPORTS) -> RepeatFilter | None:
    """Put one :class:`RepeatFilter` on every logger of ``prefixes`` (module doc); returns it
    (None when ``$TRAINTRACE_KAFKA_LOG_REPEATS=all`` says to log every repeat). Installing
    again replaces the filter an earlier call installed."""
    if os.environ.get(OFF_ENV, "").strip().lower() == "all":
        return None
    for module in imports:
        try:
            __import__(module)
        except ImportError:  # the worker extra is not installed: nothing of it to quiet
            pass
    quiet = RepeatFilter(window_s)
    for logger in _loggers(prefixes):
        for old in [f for f in logger.filters if isinstance(f, RepeatFilter)]:
            logger.removeFilter(old)
        logger.addFilter(quiet)
    return quiet
