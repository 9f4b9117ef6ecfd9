"""Merkle Tree Hash, inclusion and consistency proofs: RFC 6962 §2.1 with SHA-256.

Definitions (RFC 6962 §2.1, unchanged in RFC 9162 §2.1.1):

- ``MTH({})`` = SHA-256 of the empty string;
- ``MTH({d0})`` = SHA-256(0x00 || d0)  (the *leaf hash*);
- ``MTH(D[n])`` = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n])) for n > 1, where k is the largest
  power of two smaller than n.

Leaves are always passed as their raw inputs (the bytes that get the 0x00 prefix), never as leaf
hashes; proofs are lists of 32-byte node hashes, bottom-up, exactly as RFC 6962 §2.1.1 (PATH) and
§2.1.2 (PROOF/SUBPROOF) define them, so they interoperate with Certificate Transparency tooling.

The root is computed level by level (pair neighbours, carry a lone last node up unchanged), which
is the same tree as the recursive definition: n leaf hashes and n - 1 node hashes, O(n).

:class:`CompactRange` is an append-only log's state in O(log n) space: the roots of the perfect
subtrees its leaves form (one per set bit of its size), from which the root of the whole tree
is computed at any time, so a log can grow one leaf at a time without keeping its leaves.

Argument errors (a negative or out-of-range index or size, a leaf that is not bytes) raise
:class:`ValueError`. The two ``verify_*`` functions never raise: anything that does not prove
what is claimed — a wrong hash, size, index, a proof too short or too long, an element that is
not 32 bytes, even an argument of the wrong type — returns ``False``.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"
_sha256 = hashlib.sha256

__all__ = [
    "CompactRange",
    "EMPTY_ROOT",
    "HASH_SIZE",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root",
    "root_from_inclusion_proof",
    "verify_consistency",
    "verify_inclusion",
]


def leaf_hash(data: bytes) -> bytes:
    """SHA-256(0x00 || data): the hash of a one-leaf tree."""
    return hashlib.sha256(_LEAF_PREFIX + _as_bytes(data, "leaf")).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): an interior node."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) of the raw ``leaves``."""
    return _range_root(_leaf_hashes(leaves), 0, len(leaves))


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(index, D[n]) of RFC 6962 §2.1.1: the sibling hashes from the leaf up to the root."""
    n = len(leaves)
    _check_int(index, "index")
    if not 0 <= index < n:
        raise ValueError(f"index {index} is out of range for a tree of {n} leaves")
    # every level of the tree, lone last nodes carried up; then the path is the siblings
    level = _leaf_hashes(leaves)
    path: list[bytes] = []
    i = index
    while len(level) > 1:
        sibling = i ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        level = _next_level(level)
        i >>= 1
    return path


def consistency_proof(leaves: Sequence[bytes], old_size: int) -> list[bytes]:
    """PROOF(old_size, D[n]) of RFC 6962 §2.1.2 (SUBPROOF with b = true).

    The proof for ``old_size == n`` is empty (SUBPROOF(m, D[m], true) = {}), and so is the one
    for ``old_size == 0`` (the empty tree is a prefix of every tree; nothing to prove).
    """
    n = len(leaves)
    _check_int(old_size, "old_size")
    if not 0 <= old_size <= n:
        raise ValueError(f"old_size {old_size} is out of range for a tree of {n} leaves")
    if old_size in (0, n):
        return []
    hashes = _leaf_hashes(leaves)
    proof: list[bytes] = []
    # iterative SUBPROOF(m, D[lo:hi], b); the recursion only ever descends into one side
    m, lo, hi, b = old_size, 0, n, True
    while True:
        size = hi - lo
        if m == size:
            if not b:
                proof.append(_range_root(hashes, lo, hi))
            break
        k = _split(size)
        if m <= k:
            proof.append(_range_root(hashes, lo + k, hi))
            hi = lo + k
        else:
            proof.append(_range_root(hashes, lo, lo + k))
            lo, m, b = lo + k, m - k, False
    proof.reverse()  # SUBPROOF appends the sibling of each step *after* the deeper part
    return proof


def root_from_inclusion_proof(leaf_hash_: bytes, index: int, tree_size: int,
                              proof: Sequence[bytes]) -> bytes | None:
    """The root that ``proof`` leads to from a leaf *hash*, or None if it leads nowhere.

    RFC 9162 §2.1.3.2 steps 1-5, without the final comparison with a root.
    """
    try:
        if not (_is_int(index) and _is_int(tree_size)) or not 0 <= index < tree_size:
            return None
        if not _is_hash(leaf_hash_) or isinstance(proof, (bytes, bytearray, str)):
            return None
        fn, sn = index, tree_size - 1
        r = bytes(leaf_hash_)
        for p in proof:
            if sn == 0 or not _is_hash(p):
                return None
            p = bytes(p)
            if fn & 1 or fn == sn:
                r = node_hash(p, r)
                if not fn & 1:
                    while fn and not fn & 1:
                        fn >>= 1
                        sn >>= 1
            else:
                r = node_hash(r, p)
            fn >>= 1
            sn >>= 1
        return r if sn == 0 else None
    except TypeError:
        return None


def verify_inclusion(leaf: bytes, index: int, tree_size: int, proof: Sequence[bytes],
                     root: bytes) -> bool:
    """Whether raw ``leaf`` is leaf ``index`` of the tree of ``tree_size`` leaves with ``root``.

    RFC 9162 §2.1.3.2. Never raises.
    """
    if not isinstance(leaf, (bytes, bytearray)) or not _is_hash(root):
        return False
    computed = root_from_inclusion_proof(leaf_hash(leaf), index, tree_size, proof)
    return computed is not None and computed == bytes(root)


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes,
                       proof: Sequence[bytes]) -> bool:
    """Whether the tree of ``old_size`` leaves with ``old_root`` is a prefix of the tree of
    ``new_size`` leaves with ``new_root``. RFC 9162 §2.1.4.2; never raises.

    The cases outside that algorithm (which assumes 0 < old_size < new_size): ``old_size ==
    new_size`` holds iff the proof is empty and the roots are equal; ``old_size == 0`` holds iff
    the proof is empty and ``old_root`` is the empty tree's root; ``old_size > new_size`` fails.
    """
    try:
        if not (_is_int(old_size) and _is_int(new_size)) or not 0 <= old_size <= new_size:
            return False
        if not (_is_hash(old_root) and _is_hash(new_root)):
            return False
        if isinstance(proof, (bytes, bytearray, str)):
            return False
        path = list(proof)
        if not all(_is_hash(p) for p in path):
            return False
        path = [bytes(p) for p in path]
        old_root, new_root = bytes(old_root), bytes(new_root)
        if old_size == new_size:
            return not path and old_root == new_root
        if old_size == 0:
            return not path and old_root == EMPTY_ROOT
        # 1. an empty path proves nothing
        if not path:
            return False
        # 2. if old_size is a power of two, its root is the first node of the path
        if old_size & (old_size - 1) == 0:
            path.insert(0, old_root)
        # 3.
        fn, sn = old_size - 1, new_size - 1
        # 4.
        while fn & 1:
            fn >>= 1
            sn >>= 1
        # 5.
        fr = sr = path[0]
        # 6.
        for c in path[1:]:
            if sn == 0:
                return False
            if fn & 1 or fn == sn:
                fr = node_hash(c, fr)
                sr = node_hash(c, sr)
                if not fn & 1:
                    while fn and not fn & 1:
                        fn >>= 1
                        sn >>= 1
            else:
                sr = node_hash(sr, c)
            fn >>= 1
            sn >>= 1
        # 7.
        return fr == old_root and sr == new_root and sn == 0
    except TypeError:
        return False


class CompactRange:
    """The compact range ``[0, size)`` of an append-only RFC 6962 log.

    It keeps the roots of the perfect subtrees the leaves so far form, left to right: one per
    set bit of ``size``, largest first (a log of 6 leaves keeps MTH(D[0:4]) and MTH(D[4:6])).
    :meth:`append` costs one leaf hash plus one node hash per carry (amortised fewer than two,
    at most log2(size)); :meth:`root` folds the subtree roots from the right, at most
    log2(size) node hashes. It equals :func:`root` of all the leaves appended, since RFC 6962
    splits a tree of n leaves at the largest power of two smaller than n, which is exactly
    where the largest perfect subtree ends.
    """

    __slots__ = ("_size", "_nodes")

    def __init__(self) -> None:
        self._size = 0
        self._nodes: list[bytes] = []

    @property
    def size(self) -> int:
        """The number of leaves appended."""
        return self._size

    @property
    def nodes(self) -> tuple[bytes, ...]:
        """The perfect subtree roots, left to right (``bin(size).count("1")`` of them)."""
        return tuple(self._nodes)

    def append(self, leaf: bytes) -> None:
        """Append one raw leaf (hashed as SHA-256(0x00 || leaf))."""
        if type(leaf) is not bytes:
            self.append_hash(leaf_hash(leaf))
            return
        # append_hash inlined for the common case (a fold log appends one leaf per event)
        h = _sha256(_LEAF_PREFIX + leaf).digest()
        n = self._size
        nodes = self._nodes
        while n & 1:
            h = _sha256(_NODE_PREFIX + nodes.pop() + h).digest()
            n >>= 1
        nodes.append(h)
        self._size += 1

    def append_hash(self, leaf_hash_: bytes) -> None:
        """Append one leaf given by its leaf hash (32 bytes)."""
        if not _is_hash(leaf_hash_):
            raise ValueError("a leaf hash must be 32 bytes")
        h = bytes(leaf_hash_)
        n = self._size
        nodes = self._nodes
        while n & 1:  # merge with every complete subtree of the same height
            h = node_hash(nodes.pop(), h)
            n >>= 1
        nodes.append(h)
        self._size += 1

    def root(self) -> bytes:
        """MTH of every leaf appended so far (:data:`EMPTY_ROOT` for none)."""
        nodes = self._nodes
        if not nodes:
            return EMPTY_ROOT
        r = nodes[-1]
        for left in reversed(nodes[:-1]):
            r = node_hash(left, r)
        return r

    def copy(self) -> "CompactRange":
        other = CompactRange()
        other._size = self._size
        other._nodes = list(self._nodes)
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CompactRange):
            return NotImplemented
        return self._size == other._size and self._nodes == other._nodes

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"CompactRange(size={self._size}, root={self.root().hex()[:16]}…)"


# ---------------------------------------------------------------------- internals

def _as_bytes(data: object, what: str) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise ValueError(f"{what} must be bytes, not {type(data).__name__}")


def _leaf_hashes(leaves: Sequence[bytes]) -> list[bytes]:
    if isinstance(leaves, (bytes, bytearray, str)):
        raise ValueError("leaves must be a sequence of bytes, not a single bytes or str value")
    out = []
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, (bytes, bytearray, memoryview)):
            raise ValueError(f"leaf {i} must be bytes, not {type(leaf).__name__}")
        out.append(hashlib.sha256(_LEAF_PREFIX + bytes(leaf)).digest())
    return out


def _next_level(level: list[bytes]) -> list[bytes]:
    up = [node_hash(level[j], level[j + 1]) for j in range(0, len(level) - 1, 2)]
    if len(level) & 1:
        up.append(level[-1])
    return up


def _range_root(hashes: list[bytes], lo: int, hi: int) -> bytes:
    """MTH of the leaves whose hashes are ``hashes[lo:hi]``, in hi - lo - 1 node hashes."""
    if hi <= lo:
        return EMPTY_ROOT
    level = hashes[lo:hi]
    while len(level) > 1:
        level = _next_level(level)
    return level[0]


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_int(x: object, what: str) -> None:
    if not _is_int(x):
        raise ValueError(f"{what} must be an int, not {type(x).__name__}")


def _is_hash(x: object) -> bool:
    return isinstance(x, (bytes, bytearray)) and len(x) == HASH_SIZE
