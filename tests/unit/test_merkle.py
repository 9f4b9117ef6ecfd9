"""RFC 6962 / RFC 9162 Merkle trees (streams.core.merkle).

The reference data are the Certificate Transparency test vectors (the 8 leaf inputs, the roots of
every tree size 0..8, the node hashes, the inclusion and consistency proofs) as published in
google/certificate-transparency and transparency-dev/merkle (``testonly/constants.go``,
``proof/verify_test.go``). They are also checked here against a naive recursive implementation
written straight from the RFC 6962 §2.1 text, independent of the module under test.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core import merkle

# ---------------------------------------------------------------------- reference vectors

LEAVES = [bytes.fromhex(h) for h in (
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
)]

# RootHashes(): the root of the tree of the first n leaves, n = 0..8
ROOTS = [bytes.fromhex(h) for h in (
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]

# NodeHashes(): level 0 = the leaf hashes, level 3 = the root of 8
NODES = [[bytes.fromhex(h) for h in level] for level in (
    ("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
     "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
     "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
     "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
     "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
     "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
     "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
     "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1"),
    ("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
     "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
     "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
     "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
    ("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
     "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
    ("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",),
)]


def _h(*hexes: str) -> list[bytes]:
    return [bytes.fromhex(x) for x in hexes]


# (index (0-based), tree size, PATH)
INCLUSION_VECTORS = [
    (0, 1, []),
    (0, 8, _h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
              "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
              "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")),
    (5, 8, _h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
              "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
              "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
    (2, 3, _h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")),
    (1, 5, _h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
              "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
              "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b")),
]

# (old size, new size, PROOF)
CONSISTENCY_VECTORS = [
    (1, 1, []),
    (1, 8, _h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
              "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
              "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")),
    (6, 8, _h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
              "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
              "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
    (2, 5, _h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
              "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b")),
    (6, 7, _h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
              "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
              "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
]

SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


# ---------------------------------------------------------------------- naive RFC 6962 §2.1

def _sha(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[bytes]) -> bytes:
    n = len(d)
    if n == 0:
        return _sha(b"")
    if n == 1:
        return _sha(b"\x00" + d[0])
    k = _k(n)
    return _sha(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:]))


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    n = len(d)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = _k(n)
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def ref_proof(m: int, d: list[bytes]) -> list[bytes]:
    return ref_subproof(m, d, True)


SIXTEEN = [bytes([i]) * (i % 5) + b"leaf-%d" % i for i in range(16)]


# ---------------------------------------------------------------------- hashing and roots

def test_the_naive_reference_reproduces_the_published_roots():
    for n in range(len(LEAVES) + 1):
        assert ref_mth(LEAVES[:n]) == ROOTS[n], n


def test_roots_of_the_reference_vectors():
    for n in range(len(LEAVES) + 1):
        assert merkle.root(LEAVES[:n]) == ROOTS[n], f"size {n}"


def test_empty_root_is_sha256_of_nothing():
    assert merkle.root([]) == merkle.EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert merkle.EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_leaf_and_node_hash_prefixes():
    assert merkle.leaf_hash(b"") == hashlib.sha256(b"\x00").digest() == ROOTS[1]
    assert [merkle.leaf_hash(x) for x in LEAVES] == NODES[0]
    assert merkle.node_hash(NODES[0][0], NODES[0][1]) == NODES[1][0] == ROOTS[2]
    for level in range(1, 4):
        for i, h in enumerate(NODES[level]):
            assert merkle.node_hash(NODES[level - 1][2 * i], NODES[level - 1][2 * i + 1]) == h


def test_split_is_the_largest_power_of_two_below_n_not_the_midpoint():
    # 5 leaves: (4)(1), not (3)(2)
    mid = _sha(b"\x01" + ref_mth(LEAVES[:3]) + ref_mth(LEAVES[3:5]))
    assert merkle.root(LEAVES[:5]) != mid
    assert merkle.root(LEAVES[:5]) == _sha(b"\x01" + NODES[2][0] + NODES[0][4])


def test_root_agrees_with_the_naive_definition_up_to_70():
    leaves = [b"x%d" % i for i in range(70)]
    for n in range(71):
        assert merkle.root(leaves[:n]) == ref_mth(leaves[:n]), n


def test_root_hashes_each_node_once(monkeypatch):
    calls = []

    class CountingHashlib:
        @staticmethod
        def sha256(data=b""):
            calls.append(len(data))
            return hashlib.sha256(data)

    monkeypatch.setattr(merkle, "hashlib", CountingHashlib)
    merkle.root([b"%d" % i for i in range(1000)])
    assert len(calls) == 1000 + 999


def test_bytes_like_leaves():
    assert merkle.root([bytearray(b"a"), memoryview(b"b")]) == merkle.root([b"a", b"b"])


@pytest.mark.parametrize("bad", [["a"], [b"a", 1], [None], b"ab", "ab"])
def test_root_rejects_non_bytes(bad):
    with pytest.raises(ValueError):
        merkle.root(bad)
    with pytest.raises(ValueError):
        merkle.leaf_hash("a")


# ---------------------------------------------------------------------- inclusion

@pytest.mark.parametrize("index,size,path", INCLUSION_VECTORS)
def test_inclusion_vectors(index, size, path):
    assert merkle.inclusion_proof(LEAVES[:size], index) == path
    assert merkle.verify_inclusion(LEAVES[index], index, size, path, ROOTS[size])
    assert merkle.root_from_inclusion_proof(NODES[0][index], index, size, path) == ROOTS[size]


def _tampered_inclusion(leaf, index, size, proof, root):
    """(description, leaf, index, size, proof, root) probes that must all fail."""
    probes = [
        ("index - 1", leaf, index - 1, size, proof, root),
        ("index + 1", leaf, index + 1, size, proof, root),
        ("index ^ 2", leaf, index ^ 2, size, proof, root),
        ("size * 2", leaf, index, size * 2, proof, root),
        ("size / 2", leaf, index, size // 2, proof, root),
        ("wrong leaf", leaf + b"!", index, size, proof, root),
        ("empty root", leaf, index, size, proof, merkle.EMPTY_ROOT),
        ("random root", leaf, index, size, proof, SOME_HASH),
        ("trailing garbage", leaf, index, size, proof + [b""], root),
        ("trailing root", leaf, index, size, proof + [root], root),
        ("preceding garbage", leaf, index, size, [b""] + proof, root),
        ("preceding root", leaf, index, size, [root] + proof, root),
    ]
    for i in range(len(proof)):
        for bit in (0, 3, 7):
            p = list(proof)
            p[i] = bytes([p[i][0] ^ (1 << bit)]) + p[i][1:]
            probes.append((f"flipped proof[{i}] bit {bit}", leaf, index, size, p, root))
        p = list(proof)
        p[i] = p[i][:-1] + bytes([p[i][-1] ^ 1])
        probes.append((f"flipped proof[{i}] last byte", leaf, index, size, p, root))
    if proof:
        probes.append(("truncated", leaf, index, size, proof[:-1], root))
        probes.append(("first element dropped", leaf, index, size, proof[1:], root))
        probes.append(("extended", leaf, index, size, proof + [SOME_HASH], root))
    if len(proof) > 1:
        probes.append(("inserted", leaf, index, size, [proof[0], SOME_HASH] + proof[1:], root))
        probes.append(("reversed", leaf, index, size, proof[::-1], root))
    return [p for p in probes if not (p[0] == "reversed" and proof[::-1] == proof)]


@pytest.mark.parametrize("index,size,path", INCLUSION_VECTORS)
def test_tampered_inclusion_vectors_fail(index, size, path):
    for desc, *args in _tampered_inclusion(LEAVES[index], index, size, path, ROOTS[size]):
        assert merkle.verify_inclusion(*args) is False, desc


def test_every_inclusion_proof_up_to_16_leaves():
    checked = 0
    for n in range(1, 17):
        leaves = SIXTEEN[:n]
        r = merkle.root(leaves)
        for i in range(n):
            proof = merkle.inclusion_proof(leaves, i)
            assert proof == ref_path(i, leaves), (i, n)
            assert merkle.verify_inclusion(leaves[i], i, n, proof, r), (i, n)
            for desc, *args in _tampered_inclusion(leaves[i], i, n, proof, r):
                # a different leaf at the probed position can be legitimately proven only if
                # the probe happens to be the truth; it never is here (distinct leaves)
                assert merkle.verify_inclusion(*args) is False, (i, n, desc)
            # the proof of another leaf does not prove this one
            for j in range(n):
                if j != i:
                    assert not merkle.verify_inclusion(leaves[j], i, n, proof, r), (i, j, n)
            checked += 1
    assert checked == 136


def test_the_size_is_bound_by_the_root_not_by_the_proof():
    """RFC 9162 verification uses tree_size only for the shape of the path: a proof also
    verifies under another size whose path has the same shape (leaf 1 of 5 and of 6 here, with
    the root of 5). So the size must come from the same signed commitment as the root, as in CT."""
    proof = merkle.inclusion_proof(LEAVES[:5], 1)
    assert merkle.verify_inclusion(LEAVES[1], 1, 6, proof, ROOTS[5])
    assert not merkle.verify_inclusion(LEAVES[1], 1, 6, proof, ROOTS[6])
    cproof = merkle.consistency_proof(LEAVES[:8], 1)
    assert merkle.verify_consistency(1, 7, ROOTS[1], ROOTS[8], cproof)
    assert not merkle.verify_consistency(1, 7, ROOTS[1], ROOTS[7], cproof)


def test_inclusion_proof_argument_errors():
    with pytest.raises(ValueError, match="out of range"):
        merkle.inclusion_proof(LEAVES, 8)
    with pytest.raises(ValueError, match="out of range"):
        merkle.inclusion_proof(LEAVES, -1)
    with pytest.raises(ValueError, match="out of range"):
        merkle.inclusion_proof([], 0)
    with pytest.raises(ValueError, match="int"):
        merkle.inclusion_proof(LEAVES, 1.0)
    with pytest.raises(ValueError, match="int"):
        merkle.inclusion_proof(LEAVES, True)


@pytest.mark.parametrize("args", [
    (b"", 0, 0, [], merkle.EMPTY_ROOT),             # no leaf in an empty tree
    (b"", 1, 1, [], ROOTS[1]),                      # index == size
    (b"", -1, 1, [], ROOTS[1]),
    (b"", 0, -1, [], ROOTS[1]),
    ("", 0, 1, [], ROOTS[1]),                       # str leaf
    (None, 0, 1, [], ROOTS[1]),
    (b"", 0, 1, [], ROOTS[1][:31]),                 # short root
    (b"", 0, 1, [], None),
    (b"", "0", 1, [], ROOTS[1]),
    (b"", 0, 1.0, [], ROOTS[1]),
    (b"", 0, 1, None, ROOTS[1]),
    (b"", 0, 1, 5, ROOTS[1]),
    (b"", 0, 2, b"x" * 32, ROOTS[2]),               # proof given as one bytes value
    (b"", 0, 2, ["ab" * 16], ROOTS[2]),            # str element
    (b"", 0, 2, [None], ROOTS[2]),
    (b"", 0, 2, [NODES[0][1][:31]], ROOTS[2]),      # short element
    (b"", 0, 2, [NODES[0][1] + b"\x00"], ROOTS[2]),  # long element
])
def test_verify_inclusion_never_raises(args):
    assert merkle.verify_inclusion(*args) is False


def test_single_leaf_tree():
    assert merkle.verify_inclusion(b"data", 0, 1, [], merkle.leaf_hash(b"data"))
    assert not merkle.verify_inclusion(b"data", 0, 1, [], merkle.leaf_hash(b"other"))


# ---------------------------------------------------------------------- consistency

@pytest.mark.parametrize("m,n,proof", CONSISTENCY_VECTORS)
def test_consistency_vectors(m, n, proof):
    assert merkle.consistency_proof(LEAVES[:n], m) == proof
    assert merkle.verify_consistency(m, n, ROOTS[m], ROOTS[n], proof)


def _tampered_consistency(m, n, r1, r2, proof):
    probes = [
        ("m - 1", m - 1, n, r1, r2, proof),
        ("m + 1", m + 1, n, r1, r2, proof),
        ("m ^ 2", m ^ 2, n, r1, r2, proof),
        ("n * 2", m, n * 2, r1, r2, proof),
        ("n / 2", m, n // 2, r1, r2, proof),
        ("wrong root1", m, n, SOME_HASH, r2, proof),
        ("wrong root2", m, n, r1, SOME_HASH, proof),
        ("short root1", m, n, b"WrongRoot", r2, proof),
        ("swapped roots", m, n, r2, r1, proof),
        ("empty proof", m, n, r1, r2, []),
        ("trailing garbage", m, n, r1, r2, proof + [b""]),
        ("trailing root1", m, n, r1, r2, proof + [r1]),
        ("trailing root2", m, n, r1, r2, proof + [r2]),
        ("extended", m, n, r1, r2, proof + [SOME_HASH]),
        ("preceding garbage", m, n, r1, r2, [b""] + proof),
        ("preceding root1", m, n, r1, r2, [r1] + proof),
        ("preceding root2", m, n, r1, r2, [r2] + proof),
        ("preceding proof[0]", m, n, r1, r2, [proof[0]] + proof),
        ("truncated", m, n, r1, r2, proof[:-1]),
        ("first element dropped", m, n, r1, r2, proof[1:]),
    ]
    for i in range(len(proof)):
        for bit in (0, 4, 7):
            p = list(proof)
            p[i] = bytes([p[i][0] ^ (1 << bit)]) + p[i][1:]
            probes.append((f"flipped proof[{i}] bit {bit}", m, n, r1, r2, p))
    if len(proof) > 1:
        probes.append(("inserted", m, n, r1, r2, [proof[0], SOME_HASH] + proof[1:]))
    return probes


@pytest.mark.parametrize("m,n,proof", [v for v in CONSISTENCY_VECTORS if v[2]])
def test_tampered_consistency_vectors_fail(m, n, proof):
    for desc, *args in _tampered_consistency(m, n, ROOTS[m], ROOTS[n], proof):
        assert merkle.verify_consistency(*args) is False, desc


def test_every_consistency_proof_up_to_16_leaves():
    checked = 0
    roots = [merkle.root(SIXTEEN[:n]) for n in range(17)]
    for n in range(1, 17):
        for m in range(0, n + 1):
            proof = merkle.consistency_proof(SIXTEEN[:n], m)
            if 0 < m < n:
                assert proof == ref_proof(m, SIXTEEN[:n]), (m, n)
                assert proof, (m, n)
            else:
                assert proof == []
            assert merkle.verify_consistency(m, n, roots[m], roots[n], proof), (m, n)
            if proof:
                for desc, *args in _tampered_consistency(m, n, roots[m], roots[n], proof):
                    assert merkle.verify_consistency(*args) is False, (m, n, desc)
                # a tree that is not an extension of the old one
                other = SIXTEEN[:m - 1] + [b"changed"] + SIXTEEN[m:n]
                forged = merkle.consistency_proof(other, m)
                assert not merkle.verify_consistency(m, n, roots[m], merkle.root(other), forged)
            checked += 1
    assert checked == sum(n + 1 for n in range(1, 17))


def test_consistency_trivial_cases():
    r0, r1, r2 = ROOTS[0], ROOTS[1], ROOTS[2]
    assert merkle.verify_consistency(0, 0, r0, r0, [])
    assert merkle.verify_consistency(0, 5, r0, ROOTS[5], [])
    assert merkle.verify_consistency(3, 3, ROOTS[3], ROOTS[3], [])
    assert not merkle.verify_consistency(3, 3, ROOTS[3], ROOTS[4], [])      # same size, roots differ
    assert not merkle.verify_consistency(0, 0, r0, r0, [r0])                # non-empty proof
    assert not merkle.verify_consistency(0, 1, r0, r1, [r0])
    assert not merkle.verify_consistency(1, 1, r1, r1, [r0])
    assert not merkle.verify_consistency(0, 1, SOME_HASH, r1, [])           # not the empty root
    assert not merkle.verify_consistency(1, 0, r1, r0, [])                  # time travel
    assert not merkle.verify_consistency(2, 1, r2, r1, [])
    assert not merkle.verify_consistency(1, 2, r1, r2, [])                  # empty proof


@pytest.mark.parametrize("args", [
    (-1, 2, ROOTS[1], ROOTS[2], [NODES[0][1]]),
    (1, -2, ROOTS[1], ROOTS[2], [NODES[0][1]]),
    ("1", 2, ROOTS[1], ROOTS[2], [NODES[0][1]]),
    (1, 2.0, ROOTS[1], ROOTS[2], [NODES[0][1]]),
    (True, 2, ROOTS[1], ROOTS[2], [NODES[0][1]]),
    (1, 2, None, ROOTS[2], [NODES[0][1]]),
    (1, 2, ROOTS[1], "x", [NODES[0][1]]),
    (1, 2, ROOTS[1], ROOTS[2], None),
    (1, 2, ROOTS[1], ROOTS[2], 3),
    (1, 2, ROOTS[1], ROOTS[2], NODES[0][1]),
    (1, 2, ROOTS[1], ROOTS[2], [NODES[0][1].hex()]),
    (1, 2, ROOTS[1], ROOTS[2], [None]),
])
def test_verify_consistency_never_raises(args):
    assert merkle.verify_consistency(*args) is False


def test_consistency_proof_argument_errors():
    with pytest.raises(ValueError, match="out of range"):
        merkle.consistency_proof(LEAVES, 9)
    with pytest.raises(ValueError, match="out of range"):
        merkle.consistency_proof(LEAVES, -1)
    with pytest.raises(ValueError, match="int"):
        merkle.consistency_proof(LEAVES, None)


# ---------------------------------------------------------------------- properties

leaf_lists = st.lists(st.binary(max_size=24), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(leaf_lists, st.data())
def test_inclusion_property(leaves, data):
    n = len(leaves)
    i = data.draw(st.integers(0, n - 1))
    r = merkle.root(leaves)
    assert r == ref_mth(leaves)
    proof = merkle.inclusion_proof(leaves, i)
    assert proof == ref_path(i, leaves)
    assert merkle.verify_inclusion(leaves[i], i, n, proof, r)
    # a changed leaf changes the root and the proof no longer holds for it
    other = leaves[i] + b"\x01"
    assert not merkle.verify_inclusion(other, i, n, proof, r)
    if proof:
        k = data.draw(st.integers(0, len(proof) - 1))
        bad = list(proof)
        bad[k] = bytes([bad[k][0] ^ 0x80]) + bad[k][1:]
        assert not merkle.verify_inclusion(leaves[i], i, n, bad, r)
        assert not merkle.verify_inclusion(leaves[i], i, n, proof[:-1], r)
    assert not merkle.verify_inclusion(leaves[i], i, n, proof + [SOME_HASH], r)
    j = data.draw(st.integers(0, 2 * n + 1))
    if j != i and not (j < n and leaves[j] == leaves[i] and merkle.inclusion_proof(leaves, j) == proof):
        assert not merkle.verify_inclusion(leaves[i], j, n, proof, r)


@settings(max_examples=150, deadline=None)
@given(leaf_lists, st.data())
def test_consistency_property(leaves, data):
    n = len(leaves)
    m = data.draw(st.integers(0, n))
    proof = merkle.consistency_proof(leaves, m)
    old, new = merkle.root(leaves[:m]), merkle.root(leaves)
    if 0 < m < n:
        assert proof == ref_proof(m, leaves)
    assert merkle.verify_consistency(m, n, old, new, proof)
    if proof:
        k = data.draw(st.integers(0, len(proof) - 1))
        bad = list(proof)
        bad[k] = bytes([bad[k][0] ^ 0x01]) + bad[k][1:]
        assert not merkle.verify_consistency(m, n, old, new, bad)
        assert not merkle.verify_consistency(m, n, old, new, proof[:-1])
        assert not merkle.verify_consistency(m, n, old, new, proof + [SOME_HASH])
        assert not merkle.verify_consistency(m, n, new, old, proof)
        # rewriting history: change one of the first m leaves
        c = data.draw(st.integers(0, m - 1))
        changed = list(leaves)
        changed[c] = changed[c] + b"\xff"
        assert not merkle.verify_consistency(m, n, old, merkle.root(changed),
                                             merkle.consistency_proof(changed, m))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.lists(st.binary(min_size=0, max_size=40), max_size=8),
       st.binary(max_size=40), st.binary(max_size=40))
def test_verify_never_raises_on_garbage(a, b, proof, r1, r2):
    assert merkle.verify_consistency(a, b, r1, r2, proof) in (True, False)
    assert merkle.verify_inclusion(r1, a, b, proof, r2) in (True, False)


def test_compact_range_appends_bytes_and_bytes_like_leaves_alike():
    """``append`` has an inlined path for ``bytes`` (one leaf per folded event) and the general
    one for the other bytes-like leaves: both give the batch root, at every size."""
    leaves = [b"leaf %d" % i for i in range(70)]
    fast, general = merkle.CompactRange(), merkle.CompactRange()
    for i, leaf in enumerate(leaves):
        fast.append(leaf)
        general.append(bytearray(leaf) if i % 2 else memoryview(leaf))
        assert fast.root() == general.root() == merkle.root(leaves[:i + 1])
    with pytest.raises(ValueError):
        fast.append("not bytes")  # type: ignore[arg-type]
