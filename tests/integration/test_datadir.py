"""A worker's data directory against a real broker and a real worker process (issue 10 item 7).

Faust raised ``ConsistencyError`` at recovery when its table's persisted changelog offset was
beyond the changelog's high watermark (another app id's or another cluster's data dir), and the
worker crashed at every restart. The worker keeps no Faust table any more (the router's map is
``streams.worker.jobmap``, read from Kafka at every assignment), so that crash cannot happen; the
data dir still records which app id owns it (``streams.worker.datadir``), and a worker of another
app id is refused in one line. The marker and cache logic itself is unit-tested in
tests/unit/test_datadir.py.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.worker.datadir import MARKER_NAME, prepare_data_dir
from streams.worker.settings import WorkerSettings
from streams.operators.publish import publish_file
from streams.worker.process import WorkerProcess, wait_quiescent

SCENARIO = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios" / "14_pbt_cohort.jsonl"
ID_FIELDS = ("job_id", "checkpoint_id", "source_checkpoint_id", "base_checkpoint_id",
             "restored_checkpoint_id", "final_checkpoint_id", "cohort_id")
PARTITIONS = 4

@dataclass
class Setup:
    bootstrap: str
    prefix: str
    topics: TopicNames
    app_id: str
    data_dir: Path

    def settings(self, app_id: str | None = None) -> WorkerSettings:
        return WorkerSettings(bootstrap=self.bootstrap, topics=self.topics, app_id=app_id or self.app_id,
                              partitions=PARTITIONS, data_dir=self.data_dir)

    @property
    def changelog(self) -> str:
        return f"{self.app_id}-job-cohort-changelog"

    def worker(self, app_id: str | None = None) -> WorkerProcess:
        return WorkerProcess(self.bootstrap, self.prefix, app_id or self.app_id, self.data_dir, PARTITIONS,
                             extra_args=["--commit-interval", "0.2", "--loglevel", "info"])

    def start(self, workers: list, app_id: str | None = None) -> WorkerProcess:
        """A started worker; ``w.run_log()`` is what this run wrote (worker.log is appended to)."""
        w = self.worker(app_id)
        log = self.data_dir / "worker.log"
        start = log.stat().st_size if log.exists() else 0
        w.start()
        workers.append(w)
        w.run_log = lambda: log.read_bytes()[start:].decode(errors="replace")
        return w


@pytest.fixture
def setup(kafka_bootstrap, tmp_path):
    prefix = f"dd{uuid.uuid4().hex[:8]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(kafka_bootstrap, standard_topics(topics, PARTITIONS))
    return Setup(kafka_bootstrap, prefix, topics, f"tt-{prefix.rstrip('.')}", tmp_path / "worker")


@pytest.fixture
def workers():
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.kill()


def renamed_scenario(path: Path, tag: str) -> Path:
    """The PBT cohort scenario with every id prefixed by ``tag`` (fresh jobs and cohort)."""
    lines = []
    for line in SCENARIO.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            for key in ID_FIELDS:
                if d.get(key) is not None:
                    d[key] = f"{tag}-{d[key]}"
            lines.append(json.dumps(d))
    path.write_text("\n".join(lines) + "\n")
    return path


def run_worker_once(s: Setup, workers: list, tmp_path: Path, tag: str, prepare: bool) -> dict:
    """Start a worker, route a cohort through it, stop it cleanly; the store's offsets."""
    if prepare:
        prepare_data_dir(s.settings())
    w = s.start(workers)
    w.wait_ready()
    publish_file(str(renamed_scenario(tmp_path / f"{tag}.jsonl", tag)), s.bootstrap, s.topics)
    wait_quiescent(s.bootstrap, s.app_id, s.topics, timeout=120)
    w.stop()
    return json.loads((s.data_dir / MARKER_NAME).read_text())


def admin(s: Setup) -> AdminClient:
    return AdminClient({"bootstrap.servers": s.bootstrap})


def topic_id(s: Setup, topic: str) -> str:
    a = admin(s)  # keep the client alive until its future is done
    return str(a.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result().topic_id)


def cluster_id(s: Setup) -> str:
    a = admin(s)
    return a.describe_cluster(request_timeout=15).result().cluster_id


def recreate_topic(s: Setup, topic: str) -> None:
    """Delete ``topic`` and create it again, empty (compacted, same partitions, as Faust does)."""
    a = admin(s)
    parts = len(a.list_topics(topic, timeout=15).topics[topic].partitions)
    for fut in a.delete_topics([topic], operation_timeout=30).values():
        fut.result()
    deadline = time.monotonic() + 60
    while True:
        try:
            a.create_topics([NewTopic(topic, parts, 1, config={"cleanup.policy": "compact"})],
                            operation_timeout=30)[topic].result()
            break
        except KafkaException as exc:  # still being deleted
            if time.monotonic() > deadline:
                raise
            assert "TOPIC_ALREADY_EXISTS" in str(exc) or "marked for deletion" in str(exc), exc
            time.sleep(0.5)
    while True:
        md = a.list_topics(topic, timeout=15).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == parts and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        assert time.monotonic() < deadline, f"{topic} not ready"
        time.sleep(0.2)


def wait_exit(w: WorkerProcess, timeout: float = 90.0) -> int | None:
    """The worker's exit code, or None when it is still up after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if w.proc.poll() is not None:
            return w.proc.returncode
        time.sleep(0.3)
    return None


def stays_up(w: WorkerProcess, seconds: float = 8.0, timeout: float = 90.0) -> None:
    """Ready, and still alive ``seconds`` later (Faust's recovery runs after /health answers)."""
    try:
        w.wait_ready(timeout)
    except (RuntimeError, TimeoutError) as exc:
        raise AssertionError(str(exc)) from exc
    assert wait_exit(w, seconds) is None, f"worker exited with {w.proc.returncode}:\n{w.log_tail()}"
    assert "ConsistencyError" not in w.run_log()


# -- prepare_data_dir called before the start (what the wired worker does) -------------------


def test_worker_refuses_a_data_dir_of_another_app_id(setup, workers, tmp_path):
    s = setup
    before = run_worker_once(s, workers, tmp_path, "a", prepare=False)
    other = f"{s.app_id}-other"
    w = s.start(workers, app_id=other)
    code = wait_exit(w, 60)
    log = w.run_log()
    assert code == 2, f"exit {code}:\n{w.log_tail()}"
    # one error message (rich may wrap it at the console width when stderr is not a terminal)
    assert log.count("error:") == 1, log
    error = " ".join(log[log.index("error:"):].split())
    assert f"belongs to app id {s.app_id!r}" in error and repr(other) in error
    assert "--data-dir" in error
    assert "ConsistencyError" not in log
    assert json.loads((s.data_dir / MARKER_NAME).read_text())["app_id"] == before["app_id"] == s.app_id  # untouched
