"""Reading events from JSON Lines files (the test-vector format of SPEC §11).

Each line is parsed and validated; a bad line becomes a :class:`LineError` that names the
file, the line number and the field, so the CLI can print it or skip it.
"""

from __future__ import annotations

import json
import re
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


#: 19 digits in a row: maybe an integer past 64 bits, which orjson reads as a float
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def parse_line(line: str) -> object:
    """One line's JSON value, as :func:`json.loads` gives it. orjson, where installed, parses
    what both read the same; the rest goes to :func:`json.loads`, whose answer, or error,
    stands: what orjson refuses (``NaN``, lone surrogates, real errors) and a line with 19
    digits in a row (an integer past 64 bits, which orjson would read as a float)."""
    if _fast_loads is not None and _LONG_DIGITS.search(line) is None:
        try:
            return _fast_loads(line)
        except ValueError:
            pass
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


def read_events(path: str, handle: IO[str] | None = None) -> Iterator[Event | LineError]:
    """Yield each line's event, or a LineError for a line that is not a valid event."""
    name = "<stdin>" if path == "-" else path
    fh = handle if handle is not None else open_text(path)
    try:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            if not line.isascii():
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError as exc:
                    bad = line[exc.start].encode("utf-8", "surrogateescape")
                    yield LineError(name, lineno, None, f"not UTF-8 text (byte 0x{bad.hex()} at column {exc.start + 1}); "
                                    "expected JSON Lines (or an archive of `traintrace export`)")
                    continue
            try:
                data = parse_line(line)
            except json.JSONDecodeError as exc:
                yield LineError(name, lineno, None, f"not valid JSON: {exc.msg} at column {exc.colno}")
                continue
            try:
                yield parse_event(data)
            except InvalidEvent as exc:
                yield LineError(name, lineno, exc.field, exc.reason)
    finally:
        if handle is None and fh is not sys.stdin:
            fh.close()
