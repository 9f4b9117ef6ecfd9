"""The brokers' class-data archive (``streams.devtools.class_share``): where it lives, when it counts
as whole, who may train it, and that a failed training is recorded and not retried at once. The
real JVM's training and use are in ``tests/integration/test_broker.py``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from streams.devtools import class_share as cs


def _libs(tmp_path: Path, *jars: str) -> Path:
    libs = tmp_path / "4.1.1" / "libs"
    libs.mkdir(parents=True)
    for jar in jars:
        (libs / jar).write_bytes(b"")
    return libs


def _archive(path: Path, head: bytes = cs.DYNAMIC_MAGIC, size: int = 2 << 20) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(head + b"\0" * (size - len(head)))
    return path


def test_one_archive_per_jars_java_build_and_mode_beside_the_jars(tmp_path):
    libs = _libs(tmp_path, "kafka.jar", "clients.jar")
    a = cs.archive_path(libs, "/usr/bin/java\nopenjdk 17.0.15", "lean")
    assert a.parent == libs.parent / "cds" and a.name.startswith("broker-lean-") and a.suffix == ".jsa"
    assert a == cs.archive_path(libs, "/usr/bin/java\nopenjdk 17.0.15", "lean")
    assert a != cs.archive_path(libs, "/usr/bin/java\nopenjdk 17.0.16", "lean")  # another build
    assert a != cs.archive_path(libs, "/usr/bin/java\nopenjdk 17.0.15", "server")
    (libs / "extra.jar").write_bytes(b"")
    assert a != cs.archive_path(libs, "/usr/bin/java\nopenjdk 17.0.15", "lean")  # other jars


def test_only_a_whole_archive_is_mapped(tmp_path):
    good = _archive(tmp_path / "good.jsa")
    assert cs.is_whole(good) and cs.use_flags(good) == (f"-XX:SharedArchiveFile={good}",)
    cut_short = _archive(tmp_path / "cut.jsa", head=b"\0\0\0\0")  # HotSpot writes the header last
    small = _archive(tmp_path / "small.jsa", size=4096)
    for bad in (cut_short, small, tmp_path / "missing.jsa"):
        assert not cs.is_whole(bad) and cs.use_flags(bad) == ()


def test_one_training_at_a_time_and_a_stale_claim_is_taken_over(tmp_path):
    archive = tmp_path / "cds" / "broker-lean-x.jsa"
    assert cs._claim(archive)
    assert not cs._claim(archive)  # one runs
    claim = archive.with_suffix(".training")
    old = time.time() - cs.CLAIM_STALE_S - 1
    os.utime(claim, (old, old))
    assert cs._claim(archive)  # its trainer died long ago


def test_a_failed_training_is_not_retried_for_a_day(tmp_path):
    archive = tmp_path / "cds" / "broker-lean-x.jsa"
    _archive(archive.with_suffix(".failed"), size=10)
    assert not cs._claim(archive)
    old = time.time() - cs.RETRY_AFTER_FAILURE_S - 1
    os.utime(archive.with_suffix(".failed"), (old, old))
    assert cs._claim(archive)


def test_no_training_when_the_archive_is_there(tmp_path):
    archive = _archive(tmp_path / "cds" / "broker-lean-x.jsa")
    assert not cs.start_training(archive, sys.executable, tmp_path, "lean", "4.1.1")
    assert not archive.with_suffix(".training").exists()


def test_a_training_that_fails_records_why_and_leaves_no_claim_or_dump(tmp_path):
    """The real trainer process, with a ``java`` that is not one: it fails, says why in its log and
    in ``.failed``, and frees its claim; nothing is left to map."""
    libs = _libs(tmp_path, "kafka.jar")
    archive = cs.archive_path(libs, "not a java", "lean")
    (archive.parent).mkdir(parents=True)
    stale_dump = archive.with_name(f"{archive.stem}.123.tmp")
    stale_dump.write_bytes(b"partial")
    assert cs.start_training(archive, str(tmp_path / "no-java"), libs, "lean", "4.1.1")
    assert not cs.start_training(archive, str(tmp_path / "no-java"), libs, "lean", "4.1.1")  # claimed
    deadline = time.monotonic() + 60
    while archive.with_suffix(".training").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not archive.with_suffix(".training").exists()
    assert "training failed" in archive.with_suffix(".log").read_text()
    assert archive.with_suffix(".failed").read_text().strip()
    assert not archive.exists() and not stale_dump.exists()
    assert not cs.start_training(archive, str(tmp_path / "no-java"), libs, "lean", "4.1.1")  # not for a day
