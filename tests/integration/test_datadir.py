"""A worker's data directory against a real broker and a real worker process (issue 10 item 7).

Faust raised ``ConsistencyError`` at recovery when its table's persisted changelog offset was
beyond the changelog's high watermark (another app id's or another cluster's data dir), and the
worker crashed at every restart. The worker keeps no Faust table any more (the router's map is
``streams.worker.jobmap``, read from Kafka at every assignment), so that crash cannot happen; the
data dir still records which app id owns it (``streams.worker.datadir``), and a worker of another
app id is refused in one line. The marker logic itself is unit-tested in
tests/unit/test_datadir.py.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.worker.datadir import MARKER_NAME
from streams.operator_commands.publish import publish_file
from streams.devtools.worker_process import WorkerProcess, wait_quiescent
from tests.unit.vectors import scenarios_dir

SCENARIO = scenarios_dir() / "14_pbt_cohort.jsonl"
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


def run_worker_once(s: Setup, workers: list, tmp_path: Path, tag: str) -> dict:
    """Start a worker, route a cohort through it, stop it cleanly; its data dir's marker."""
    w = s.start(workers)
    w.wait_ready()
    publish_file(str(renamed_scenario(tmp_path / f"{tag}.jsonl", tag)), s.bootstrap, s.topics)
    wait_quiescent(s.bootstrap, s.app_id, s.topics, timeout=120)
    w.stop()
    return json.loads((s.data_dir / MARKER_NAME).read_text())


def wait_exit(w: WorkerProcess, timeout: float = 90.0) -> int | None:
    """The worker's exit code, or None when it is still up after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if w.proc.poll() is not None:
            return w.proc.returncode
        time.sleep(0.3)
    return None


# -- the data dir is checked before the Faust app starts (traintrace worker) ------------------


def test_worker_refuses_a_data_dir_of_another_app_id(setup, workers, tmp_path):
    s = setup
    before = run_worker_once(s, workers, tmp_path, "a")
    assert before["kafka"]["cluster_id"]  # the marker names the cluster
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
