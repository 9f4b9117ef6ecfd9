"""SPEC §10 identifiers and the SPEC §9 hash chain primitives."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from streams.core.chain import GENESIS, canonical_bytes, chain_hash, verify_link
from streams.core.errors import InvalidEvent
from streams.core.events import parse_event
from streams.core.ids import command_id, hash_parts, incident_id

from .core_builders import IA, Cohort, analyze, plans, seed

A_0_500 = "a7441e344acbdfb8bc5d454f00cdf9bbf434f469e813e5aedf9fa5a6414bf0f5"


def test_incident_id_of_the_spec_example():
    assert hashlib.sha256(b"A\x000\x00500\x00").hexdigest() == A_0_500
    assert incident_id("A", 0, 500) == A_0_500
    assert IA == A_0_500


def test_incident_id_in_the_output():
    assert analyze(seed().events)["incidents"][0]["incident_id"] == A_0_500


def test_command_id_formula_sorts_incident_ids():
    x, y = "f" * 64, "0" * 64
    expected = hashlib.sha256(
        (y + "\0" + x + "\0" + "B\0" + "1\0" + "ROLLBACK\0" + "B-500\0").encode()).hexdigest()
    assert command_id([x, y], "B", 1, "ROLLBACK", "B-500") == expected
    assert command_id([y, x], "B", 1, "ROLLBACK", "B-500") == expected


def test_null_is_the_empty_string():
    expected = hashlib.sha256((A_0_500 + "\0A\x000\0RESTART_FROM_BASE\0\0").encode()).hexdigest()
    assert command_id([A_0_500], "A", 0, "RESTART_FROM_BASE", None) == expected
    assert hash_parts([None]) == hashlib.sha256(b"\x00").hexdigest()
    assert hash_parts(["a", None, 7]) == hashlib.sha256(b"a\x00\x007\x00").hexdigest()


def test_plan_command_id_in_the_output():
    p = plans(analyze(seed().events))["A"]
    expected = hashlib.sha256((A_0_500 + "\0A\x000\0ROLLBACK\0A-480\0").encode()).hexdigest()
    assert p["command_id"] == expected


def test_same_plan_same_id_across_runs():
    a = analyze(seed().events)["plans"]
    b = analyze(seed().events)["plans"]
    assert [p["command_id"] for p in a] == [p["command_id"] for p in b]


# ---------------------------------------------------------------------- chain (SPEC §9)

def test_genesis_is_32_zero_bytes():
    assert GENESIS == "0" * 64
    ev = Cohort().start("A").last
    assert chain_hash(GENESIS, ev) == hashlib.sha256(bytes(32) + canonical_bytes(ev)).hexdigest()


def test_canonical_bytes_exclude_the_hash_and_include_prev_hash():
    ev = Cohort().start("A").last
    assert canonical_bytes(dataclasses.replace(ev, hash="ab" * 32)) == canonical_bytes(ev)
    assert canonical_bytes(dataclasses.replace(ev, prev_hash=GENESIS)) != canonical_bytes(ev)


def test_verify_link():
    c = Cohort().start("A").progress("A", 10)
    e0 = dataclasses.replace(c.events[0], prev_hash=GENESIS)
    e0 = dataclasses.replace(e0, hash=chain_hash(GENESIS, e0))
    e1 = dataclasses.replace(c.events[1], prev_hash=e0.hash)
    e1 = dataclasses.replace(e1, hash=chain_hash(e0.hash, e1))
    assert verify_link(e0, GENESIS) is None
    assert verify_link(e1, e0.hash) is None
    assert verify_link(dataclasses.replace(e1, loss=2.0), e0.hash) is not None
    assert verify_link(e1, GENESIS) is not None


# ---------------------------------------------------------------------- RolledBack.from_scratch (revision 2)

def _rolled_back(**kw):
    d = {"type": "RolledBack", "job_id": "B", "seq": 7, "incarnation": 1, "ts": 1760000000123,
         "prev_hash": "ab" * 32, "restored_checkpoint_id": None, "resumed_step": 0, "command_id": "c1"}
    d.update(kw)
    return parse_event(d)


def test_from_scratch_false_keeps_the_canonical_bytes_of_before_revision_2():
    """The bytes a RolledBack always had (type, envelope, restored_checkpoint_id, resumed_step,
    command_id): from_scratch false, explicit or left out, adds nothing, so old chains verify."""
    before = b"RolledBack\x00B\x007\x001\x001760000000123\x00" + b"ab" * 32 + b"\x00\x000\x00c1\x00"
    assert canonical_bytes(_rolled_back()) == before
    assert canonical_bytes(_rolled_back(from_scratch=False)) == before
    assert canonical_bytes(_rolled_back(restored_checkpoint_id="B-5", resumed_step=5)) == \
        b"RolledBack\x00B\x007\x001\x001760000000123\x00" + b"ab" * 32 + b"\x00B-5\x005\x00c1\x00"


def test_from_scratch_true_is_one_more_part_and_is_chained():
    ev = _rolled_back(from_scratch=True)
    assert canonical_bytes(ev) == canonical_bytes(_rolled_back()) + b"true\x00"
    signed = dataclasses.replace(ev, hash=chain_hash(ev.prev_hash, ev))
    assert verify_link(signed, ev.prev_hash) is None
    # flipping the flag breaks the link: the flag is part of the record
    assert verify_link(dataclasses.replace(signed, from_scratch=False), ev.prev_hash) is not None


def test_from_scratch_is_validated():
    assert _rolled_back().from_scratch is False
    assert _rolled_back(from_scratch=True).from_scratch is True
    for bad in (None, 1, "true"):
        with pytest.raises(InvalidEvent) as info:
            _rolled_back(from_scratch=bad)
        assert info.value.field == "from_scratch"
    # a restart from the pretrained model restores no checkpoint (SPEC §4)
    with pytest.raises(InvalidEvent) as info:
        _rolled_back(from_scratch=True, restored_checkpoint_id="B-5")
    assert info.value.field == "restored_checkpoint_id"
