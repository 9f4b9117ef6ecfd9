"""Every public exception of traintrace derives from :class:`streams.errors.TraintraceError`,
so a user can catch ours (and only ours) in one clause."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import streams
from streams.errors import TraintraceError

#: raised on purpose by the stdlib's rules, not ours to root (private control-flow exceptions
#: start with an underscore and are skipped)
ALLOWED: set[str] = set()


def _public_exceptions():
    seen = {}
    for info in pkgutil.walk_packages(streams.__path__, "streams."):
        if info.name.endswith("__main__") or ".cli" in info.name:
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name
                    and not name.startswith("_")):
                seen[f"{info.name}.{name}"] = obj
    return seen


def test_every_public_exception_is_a_traintrace_error():
    found = _public_exceptions()
    assert len(found) >= 20
    stray = sorted(n for n, cls in found.items() if not issubclass(cls, TraintraceError) and n not in ALLOWED)
    assert not stray, f"derive these from a TraintraceError family: {stray}"


def test_families_stay_what_callers_catch():
    from streams.codec import DecodeError
    from streams.files.jsonl import JsonlError
    from streams.devtools.broker import BrokerError
    from streams.kafka.errors import KafkaAdapterError
    from streams.kafka.reader import ReaderError

    assert issubclass(DecodeError, ValueError)  # callers catch ValueError for bad bytes too
    assert issubclass(BrokerError, KafkaAdapterError) and issubclass(ReaderError, KafkaAdapterError)
    assert issubclass(JsonlError, TraintraceError)
