"""Reading events from JSON Lines files (the test-vector format of SPEC §11).

Each line is parsed and validated; a bad line becomes a :class:`LineError` that names the
file, the line number and the field, so the CLI can print it or skip it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from streams.core.errors import InvalidEvent
from streams.core.events import Event, parse_event
from streams.files.errors import FilesError

try:  # a faster parser of the same JSON where installed (the worker extra); the standard one else
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - depends on the install
    _fast_loads = None


#: orjson reads an integer past 64 bits as a float: a float this large may have been one
_INT_EDGE = 9.2e18


def _as_json_reads(value: object) -> bool:
    """Whether orjson's ``value`` of an event line is surely what ``json.loads`` gives: a flat
    object with no float as large as an integer past 64 bits (orjson reads those as floats)."""
    if type(value) is not dict:
        return False
    for v in value.values():
        t = type(v)
        if t is float:
            if not -_INT_EDGE < v < _INT_EDGE:
                return False
        elif t is dict or t is list:
            return False
    return True


def parse_line(line: str) -> object:
    """One line's JSON value, as :func:`json.loads` gives it. orjson, where installed, parses
    a flat object (an event) and its value is taken when it is surely the same; everything
    else goes to :func:`json.loads`, whose answer, or error, stands: what orjson refuses
    (``NaN``, lone surrogates, real errors), nested values, and a float that may have been an
    integer past 64 bits."""
    if _fast_loads is not None:
        try:
            value = _fast_loads(line)
        except ValueError:
            pass
        else:
            if _as_json_reads(value):
                return value
    return json.loads(line)


@dataclass(frozen=True)
class LineError:
    path: str
    line: int
    field: str | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}"
        if self.field:
            return f"{where}: field {self.field!r} {self.reason}"
        return f"{where}: {self.reason}"


class JsonlError(FilesError):
    def __init__(self, error: LineError) -> None:
        super().__init__(str(error))
        self.error = error


def open_text(path: str) -> IO[str]:
    if path == "-":
        return sys.stdin
    # undecodable bytes are kept as surrogates and reported per line (read_events), instead of
    # failing the whole read with a UnicodeDecodeError
    return open(Path(path), "r", encoding="utf-8", errors="surrogateescape")


def line_data(name: str, lineno: int, line: str) -> object:
    """One non-blank line's JSON value, or the :class:`LineError` of a line that is not UTF-8
    text or not JSON."""
    if not line.isascii():
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = line[exc.start].encode("utf-8", "surrogateescape")
            return LineError(name, lineno, None, f"not UTF-8 text (byte 0x{bad.hex()} at column {exc.start + 1}); "
                             "expected JSON Lines (or an archive of `traintrace export`)")
    try:
        return parse_line(line)
    except json.JSONDecodeError as exc:
        return LineError(name, lineno, None, f"not valid JSON: {exc.msg} at column {exc.colno}")


def event_of(name: str, lineno: int, data: object) -> Event | LineError:
    """The event a line's JSON value holds, or the :class:`LineError` saying why it holds none."""
    if isinstance(data, LineError):
        return data
    try:
        return parse_event(data)
    except InvalidEvent as exc:
        return LineError(name, lineno, exc.field, exc.reason)


def display_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def read_events(path: str, handle: IO[str] | None = None) -> Iterator[Event | LineError]:
    """Yield each line's event, or a LineError for a line that is not a valid event."""
    name = display_name(path)
    fh = handle if handle is not None else open_text(path)
    try:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            yield event_of(name, lineno, line_data(name, lineno, line))
    finally:
        if handle is None and fh is not sys.stdin:
            fh.close()
