"""The JSON Lines reader's parser: orjson where installed, with the standard parser's answer
for everything (what orjson refuses goes to ``json.loads``, whose value or error stands)."""

from __future__ import annotations

import json
import math

import pytest

from streams.files import jsonl
from streams.files.jsonl import parse_line, read_events

LINES = [
    '{"type": "Progress", "job_id": "A", "seq": 3, "loss": 0.25}',
    '{"loss": NaN, "x": Infinity, "y": -Infinity}',  # the standard parser's extensions
    '{"seq": 123456789012345678901234567890}',  # past 64 bits
    '{"a": 1, "a": 2}',  # a repeated key: the last one
    '{"s": "\\ud800"}',  # a lone surrogate escape
    '{"u": "\\u00e9t\\u00e9", "e": 1e3, "z": -0, "f": 1.0}',
    '[1, 2.5, "x", null, true, false]',
    '{"big": 1e400}',
    '{"seq": 9223372036854775808, "step": -9223372036854775809}',  # just past 64 bits
    '{"seq": 9223372036854775807, "loss": 0.1234567890123456789}',
    '{"a": {"b": 123456789012345678901234567890}, "c": [18446744073709551616]}',  # nested, past 64 bits
    '{"seq": 18446744073709551615, "n": -9223372036854775808, "x": 1e19}',
]


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("line", LINES)
def test_parse_line_gives_what_json_loads_gives(line):
    assert same(parse_line(line), json.loads(line))


@pytest.mark.parametrize("line", ['{"a": 1', '{"a": tru}', "{'a': 1}", '{"a": 1} x'])
def test_a_bad_line_raises_the_standard_parsers_error(line):
    with pytest.raises(json.JSONDecodeError) as got:
        parse_line(line)
    with pytest.raises(json.JSONDecodeError) as want:
        json.loads(line)
    assert (got.value.msg, got.value.colno) == (want.value.msg, want.value.colno)


def test_the_reader_names_the_line_and_column_with_either_parser(tmp_path, monkeypatch):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type": "JobStarted", "seq": 0\n{"type": "Progress" "seq": 1}\n')
    for fast in (jsonl._fast_loads, None):
        monkeypatch.setattr(jsonl, "_fast_loads", fast)
        errors = [str(e) for e in read_events(str(path))]
        # the line's own newline ends the first object early: the standard parser's column
        assert errors == [f"{path}:1: not valid JSON: Expecting ',' delimiter at column 1",
                          f"{path}:2: not valid JSON: Expecting ',' delimiter at column 21"]
