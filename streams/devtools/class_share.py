"""Class-data sharing for the local brokers' JVMs (the JDK's AppCDS): a broker starts with about
half the CPU and in about half the time when the classes it loads come mapped from an archive
instead of being read, parsed and verified from its ~100 jars (measured on two cores: 3.1-3.9 s of
CPU to ready → 1.7-2.2 s, ready in 1.9 s instead of 5.5; the storage tool 0.8 → 0.5 s).

The archive is made once per machine for each Kafka version, ``java`` build and JVM mode, by a
**training run** in the background: the first broker started without one starts
``python -m streams.devtools.class_share`` (detached, ``nice``), which runs a throw-away broker in
a temporary directory with ``-XX:ArchiveClassesAtExit``, sends it a few records, stops it, and
moves the archive into place (``<cache>/kafka/<version>/cds/``) only when the JVM wrote it whole.
Brokers started meanwhile run without it; every later one (and the storage tool) maps it. The JVM
checks an archive against its own build and class path and runs without it (a warning in
``broker.log``) when they differ; deleting the ``cds`` directory is always safe.

No broker waits on the training and none dumps at its own stop (a dump takes 4-12 s at exit, which
a stopping node of a test must not spend).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the first four bytes of an archive the JVM finished writing: ``CDS_DYNAMIC_ARCHIVE_MAGIC``,
#: little-endian. HotSpot writes the header last, so a dump cut short has none.
DYNAMIC_MAGIC = bytes.fromhex("a8ab0bf0")
#: a training claimed this long ago is presumed dead (one takes under a minute)
CLAIM_STALE_S = 600.0
#: after a failed training, the next is tried this much later (a JVM without CDS, no free port)
RETRY_AFTER_FAILURE_S = 86_400.0
#: the training run's module (``python -m``)
MODULE = "streams.devtools.class_share"


def archive_path(libs: Path, java_identity: str, mode: str) -> Path:
    """Where the archive of the jars in ``libs`` for the ``java`` whose ``-version`` text (and
    path) is ``java_identity`` and JVM ``mode`` lives: beside ``libs``, in ``cds/``."""
    jars = sorted(p.name for p in libs.glob("*.jar"))
    key = hashlib.sha256("\n".join([java_identity, mode, *jars]).encode()).hexdigest()[:16]
    return libs.parent / "cds" / f"broker-{mode}-{key}.jsa"


def is_whole(path: Path) -> bool:
    """Whether ``path`` is an archive the JVM finished writing (its header, written last, is there)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == DYNAMIC_MAGIC and os.fstat(fh.fileno()).st_size > 1 << 20
    except OSError:
        return False


def use_flags(archive: Path) -> tuple[str, ...]:
    """The JVM flags that map ``archive`` when it is there and whole, else none."""
    return (f"-XX:SharedArchiveFile={archive}",) if is_whole(archive) else ()


def _claim(archive: Path) -> bool:
    """Take the right to train ``archive`` (one training per archive at a time, none for a day
    after a failure)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    claim, failed = archive.with_suffix(".training"), archive.with_suffix(".failed")
    now = time.time()
    with contextlib.suppress(OSError):
        if now - failed.stat().st_mtime < RETRY_AFTER_FAILURE_S:
            return False
    with contextlib.suppress(OSError):
        if now - claim.stat().st_mtime > CLAIM_STALE_S:
            claim.unlink()
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:
        return False
    os.close(fd)
    return True


def _nice() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(OSError):
        os.nice(10)


def start_training(archive: Path, java: str, libs: Path, mode: str, version: str) -> bool:
    """Start the training run of ``archive`` in the background unless one runs or failed lately;
    True when one was started. Never raises: without an archive a broker only starts slower."""
    try:
        if is_whole(archive) or not _claim(archive):
            return False
        log = archive.with_suffix(".log")
        with open(log, "wb") as out:
            subprocess.Popen(
                [sys.executable, "-m", MODULE, "--archive", str(archive), "--java", java, "--libs", str(libs),
                 "--mode", mode, "--version", version],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                close_fds=True, preexec_fn=_nice if sys.platform == "linux" else None,
            )
        return True
    except Exception:  # noqa: BLE001 - an optimisation only
        with contextlib.suppress(OSError):
            archive.with_suffix(".training").unlink()
        return False


def train(archive: Path, java: str, libs: Path, mode: str, version: str, timeout: float = 180.0) -> None:
    """Run a broker with ``-XX:ArchiveClassesAtExit`` in a temporary directory, send it records
    (so the produce, fetch and group paths' classes load too), stop it, and move the archive it
    wrote to ``archive`` when whole. Raises on any failure (the caller records it)."""
    # a cycle otherwise: the broker module uses this one
    from streams.devtools.broker import LocalBroker, find_java, jars_cached, kafka_cache_dir

    # the training broker finds its java and jars as every broker does: they must be the archive's
    cache_dir = libs.parents[2]  # <cache root>/kafka/<version>/libs
    if kafka_cache_dir(version, cache_dir) / "libs" != libs or not jars_cached(version, cache_dir):
        raise RuntimeError(f"{libs} is not the cached jars of Kafka {version}")
    if os.path.realpath(find_java()) != os.path.realpath(java):
        raise RuntimeError(f"{java} is not the java the brokers run on ({find_java()})")
    dump = archive.with_name(f"{archive.stem}.{os.getpid()}.tmp")

    class _Trainer(LocalBroker):
        def _class_share_flags(self, java: str, libs: Path) -> tuple[str, ...]:
            return (f"-XX:ArchiveClassesAtExit={dump}",)

    with tempfile.TemporaryDirectory(prefix="traintrace-cds-") as tmp:
        broker = _Trainer(Path(tmp) / "broker", version=version, jvm=mode, die_with_parent=True,
                          cache_dir=cache_dir)
        try:
            _exercise(broker.start(timeout=timeout))
        finally:
            broker.stop(timeout=timeout)
        if not is_whole(dump):
            raise RuntimeError(f"the training broker exited without a whole archive at {dump}")
    os.replace(dump, archive)


def _exercise(bootstrap: str) -> None:
    """A topic, a few records in and out, a consumer group's commit."""
    from streams.kafka.settings import KafkaSettings
    from streams.kafka.topics import ensure_topics

    kafka = KafkaSettings(bootstrap=bootstrap)
    ensure_topics(kafka, [("cds.train", 1, None)])
    producer = kafka.producer()
    for i in range(100):
        producer.produce("cds.train", key=str(i).encode(), value=b"x" * 100)
    producer.flush(60)
    consumer = kafka.consumer("cds.train", **{"auto.offset.reset": "earliest"})
    consumer.subscribe(["cds.train"])
    got, deadline = 0, time.monotonic() + 60
    while got < 100 and time.monotonic() < deadline:
        got += len(consumer.consume(100, timeout=1.0))
    consumer.commit(asynchronous=False)
    consumer.close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="make a broker's class-data archive")
    p.add_argument("--archive", required=True, type=Path)
    p.add_argument("--java", required=True)
    p.add_argument("--libs", required=True, type=Path)
    p.add_argument("--mode", required=True)
    p.add_argument("--version", required=True)
    a = p.parse_args(argv)
    claim, failed = a.archive.with_suffix(".training"), a.archive.with_suffix(".failed")
    try:
        started = time.monotonic()
        train(a.archive, a.java, a.libs, a.mode, a.version)
        print(f"wrote {a.archive} in {time.monotonic() - started:.1f} s")
        return 0
    except BaseException as exc:  # noqa: BLE001 - recorded; the next try is in a day
        print(f"training failed: {type(exc).__name__}: {exc}")
        with contextlib.suppress(OSError):
            failed.write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
        return 1
    finally:
        with contextlib.suppress(OSError):
            claim.unlink()
        for stale in a.archive.parent.glob(f"{a.archive.stem}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()


if __name__ == "__main__":
    raise SystemExit(main())
