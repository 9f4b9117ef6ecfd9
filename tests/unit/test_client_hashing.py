"""Content hashes of checkpoints (streams.client.hashing): files and directories, streamed."""

from __future__ import annotations

import hashlib
import os

import pytest

from streams.client import hashing
from streams.client.hashing import CHUNK, hash_directory, hash_file, hash_path


def test_file_hash_is_plain_sha256(tmp_path):
    data = os.urandom(3 * CHUNK + 12345)  # several chunks and a partial one
    p = tmp_path / "ckpt.bin"
    p.write_bytes(data)
    assert hash_file(p) == hashlib.sha256(data).hexdigest()
    assert hash_path(p) == hashlib.sha256(data).hexdigest()


def test_empty_file(tmp_path):
    p = tmp_path / "empty"
    p.write_bytes(b"")
    assert hash_path(p) == hashlib.sha256(b"").hexdigest()


def test_file_is_read_in_chunks_never_whole(tmp_path, monkeypatch):
    p = tmp_path / "big"
    p.write_bytes(os.urandom(5 * CHUNK))
    sizes = []
    real_open = open

    class Spy:
        def __init__(self, fh):
            self.fh = fh

        def readinto(self, buf):
            sizes.append(len(buf))
            return self.fh.readinto(buf)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.fh.close()

    monkeypatch.setattr(hashing, "open", lambda *a, **k: Spy(real_open(*a, **k)), raising=False)
    hash_file(p)
    assert sizes and all(s == CHUNK for s in sizes)
    assert len(sizes) == 6  # five full chunks and the empty read at the end


def expected_dir_hash(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for rel in sorted(files, key=lambda r: r.encode()):
        data = files[rel]
        h.update(rel.encode() + b"\x00" + str(len(data)).encode() + b"\x00" + data)
    return h.hexdigest()


def make_tree(root, files):
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def test_directory_scheme(tmp_path):
    files = {"model.safetensors": os.urandom(CHUNK + 7), "config.json": b"{}",
             "sub/optim.pt": os.urandom(1000), "sub/z/last": b"x", "B-upper": b"", "a b/ü.txt": b"uni"}
    make_tree(tmp_path / "ck", files)
    (tmp_path / "ck" / "empty-dir").mkdir()
    assert hash_directory(tmp_path / "ck") == expected_dir_hash(files)
    assert hash_path(tmp_path / "ck") == expected_dir_hash(files)


def test_directory_hash_is_deterministic_and_independent_of_creation_order(tmp_path):
    files = {f"shard-{i:03d}.bin": os.urandom(100 + i) for i in range(30)}
    make_tree(tmp_path / "one", files)
    make_tree(tmp_path / "two", dict(reversed(list(files.items()))))
    assert hash_path(tmp_path / "one") == hash_path(tmp_path / "two") == hash_path(tmp_path / "one")


def test_directory_hash_sees_renames_moves_and_content(tmp_path):
    base = {"a": b"12", "b": b"3"}
    variants = [base, {"a": b"1", "b": b"23"},     # same concatenation, different split
                {"a": b"12", "c": b"3"},           # renamed
                {"a": b"12", "d/b": b"3"},         # moved
                {"a": b"12", "b": b"4"}]           # content
    hashes = set()
    for i, files in enumerate(variants):
        make_tree(tmp_path / str(i), files)
        hashes.add(hash_path(tmp_path / str(i)))
    assert len(hashes) == len(variants)


def test_symlinks(tmp_path):
    make_tree(tmp_path / "ck", {"w.bin": b"weights"})
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x").write_bytes(b"not hashed")
    os.symlink(tmp_path / "ck" / "w.bin", tmp_path / "ck" / "alias.bin")
    os.symlink(tmp_path / "outside", tmp_path / "ck" / "linked-dir")
    assert hash_path(tmp_path / "ck") == expected_dir_hash({"w.bin": b"weights", "alias.bin": b"weights"})


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError):
        hash_path(tmp_path / "nope")
