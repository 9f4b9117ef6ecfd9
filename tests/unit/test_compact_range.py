"""The compact range of an append-only RFC 6962 log (streams.core.merkle.CompactRange)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core import merkle
from streams.core.merkle import CompactRange

from .test_merkle import LEAVES, ROOTS


def grown(leaves) -> CompactRange:
    cr = CompactRange()
    for leaf in leaves:
        cr.append(leaf)
    return cr


def test_empty_range_is_the_empty_tree():
    cr = CompactRange()
    assert cr.size == 0 and cr.nodes == ()
    assert cr.root() == merkle.EMPTY_ROOT == hashlib.sha256(b"").digest()


def test_reference_roots_after_every_append():
    cr = CompactRange()
    assert cr.root() == ROOTS[0]
    for n, leaf in enumerate(LEAVES, start=1):
        cr.append(leaf)
        assert cr.size == n
        assert cr.root() == ROOTS[n], n


def test_one_node_per_set_bit_of_the_size():
    leaves = [b"%d" % i for i in range(70)]
    cr = CompactRange()
    lo = 0
    for n, leaf in enumerate(leaves, start=1):
        cr.append(leaf)
        assert len(cr.nodes) == bin(n).count("1"), n
    # the nodes are the roots of the perfect subtrees, left to right
    n = cr.size
    expected = []
    for bit in reversed(range(n.bit_length())):
        if n >> bit & 1:
            expected.append(merkle.root(leaves[lo:lo + (1 << bit)]))
            lo += 1 << bit
    assert list(cr.nodes) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=140))
def test_root_equals_the_merkle_root_of_every_prefix(leaves):
    cr = CompactRange()
    assert cr.root() == merkle.root([])
    for n, leaf in enumerate(leaves, start=1):
        cr.append(leaf)
        assert cr.root() == merkle.root(leaves[:n])
    assert cr.size == len(leaves)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=16), min_size=1, max_size=80), st.data())
def test_consistency_proofs_between_any_two_states_of_a_growing_range(leaves, data):
    old = data.draw(st.integers(min_value=0, max_value=len(leaves)))
    a, b = grown(leaves[:old]), grown(leaves)
    proof = merkle.consistency_proof(leaves, old)
    assert merkle.verify_consistency(old, len(leaves), a.root(), b.root(), proof)


def test_append_hash_and_copy():
    cr = grown(LEAVES[:5])
    other = CompactRange()
    for leaf in LEAVES[:5]:
        other.append_hash(merkle.leaf_hash(leaf))
    assert other == cr and other.root() == ROOTS[5]
    snap = cr.copy()
    cr.append(LEAVES[5])
    assert snap.size == 5 and snap.root() == ROOTS[5]
    assert cr.root() == ROOTS[6] and cr != snap


def test_append_costs_at_most_log_n_hashes(monkeypatch):
    calls = []

    class CountingHashlib:
        @staticmethod
        def sha256(data=b""):
            calls.append(1)
            return hashlib.sha256(data)

    monkeypatch.setattr(merkle, "hashlib", CountingHashlib)
    cr = CompactRange()
    worst = 0
    for i in range(1024):
        calls.clear()
        cr.append(b"%d" % i)
        worst = max(worst, len(calls))
    assert worst <= 1 + 10  # one leaf hash, at most log2(1024) carries
    calls.clear()
    cr.append(b"x")
    cr.root()
    assert len(calls) <= 1 + 2 * 11


@pytest.mark.parametrize("bad", ["a", None, 1])
def test_append_rejects_non_bytes(bad):
    with pytest.raises(ValueError):
        CompactRange().append(bad)


@pytest.mark.parametrize("bad", [b"", b"x" * 31, b"x" * 33, "a" * 32, None])
def test_append_hash_rejects_non_hashes(bad):
    with pytest.raises(ValueError):
        CompactRange().append_hash(bad)
