"""What the framework integration tests (issue 15) share: a live pipeline for one cohort, job
clients on it, and the end checks (the referee's plans, the audit of the whole log).

``lineage_cohort`` (a fixture factory, see conftest-style use in each test module)::

    def test_x(lineage_cohort):
        run = lineage_cohort()                 # topics, 1 real worker signing with a fresh key
        client = run.client("A")               # a real JobClient, worker_url set (the gate)
        ...
        run.settle()                           # the worker folded everything (grace included)
        assert run.rollbacks()["A"] == ("ROLLBACK", "A-8")
        run.assert_audits_clean()              # export + audit of every topic, keyring checked
"""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from streams.client import JobClient
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.devtools.worker_process import WorkerProcess, wait_quiescent


@dataclass
class CohortRun:
    bootstrap: str
    topics: TopicNames
    app_id: str
    worker: WorkerProcess
    keys: Path
    tmp: Path
    cohort: str = "c1"
    clients: list[JobClient] = field(default_factory=list)

    @property
    def worker_url(self) -> str:
        return f"http://127.0.0.1:{self.worker.web_port}"

    def client_kwargs(self, **kw: Any) -> dict[str, Any]:
        """What a JobClient of this run needs (bootstrap, topics, the gate, the keyring).

        The gate waits up to 30 s for a checkpoint the referee does not know yet: a clean one
        is answered the moment the worker folds it, and on a loaded CI machine a worker took
        longer than 5 s to fold a checkpoint its writer had just flushed (a refused MERGE)."""
        out = {"bootstrap": self.bootstrap, "topics": self.topics, "worker_url": self.worker_url,
               "trusted_keys": str(self.keys), "gate_unknown_wait": 30.0}
        out.update(kw)
        return out

    def client(self, job: str, base_model: str = "tiny", **kw: Any) -> JobClient:
        c = JobClient(job, self.cohort, base_model, journal_dir=self.tmp / "jobs" / job,
                      **self.client_kwargs(**kw))
        self.clients.append(c)
        return c

    def settle(self, grace_s: float = 0.0) -> None:
        wait_quiescent(self.bootstrap, self.app_id, self.topics)
        if grace_s:
            time.sleep(grace_s)
            wait_quiescent(self.bootstrap, self.app_id, self.topics)

    def plans(self) -> dict[str, Any]:
        """The plans and halts in force (``traintrace plans --json``)."""
        from streams.operator_commands.plans import effective_plans

        return effective_plans(self.bootstrap, self.topics)

    def commands(self) -> list[tuple[str, dict[str, Any]]]:
        """Every record of ``lineage.control`` as (record name, record), in order."""
        from streams.testing.invariants import control_records

        return [(name, rec) for name, rec, _raw in control_records(self.bootstrap, self.topics)]

    def rollbacks(self) -> dict[str, tuple[str, str | None]]:
        """The first RollbackCommand of each job: job -> (action, target checkpoint)."""
        out: dict[str, tuple[str, str | None]] = {}
        for name, rec in self.commands():
            if name == "RollbackCommand":
                out.setdefault(rec["job_id"], (rec["action"], rec.get("target_checkpoint_id")))
        return out

    def quarantines(self) -> dict[str, list[str]]:
        """The first QuarantineNotice of each job: job -> the checkpoint ids it quarantines."""
        out: dict[str, list[str]] = {}
        for name, rec in self.commands():
            if name == "QuarantineNotice":
                out.setdefault(rec["job_id"], list(rec["quarantined_checkpoint_ids"]))
        return out

    def wait_status(self, checkpoint_id: str, status: str, timeout: float = 60.0) -> None:
        """Wait until the worker's gate answers ``status`` for ``checkpoint_id``."""
        from streams.client import checkpoint_status

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = checkpoint_status(self.worker_url, checkpoint_id)
            if got["status"] == status:
                return
            time.sleep(0.3)
        raise AssertionError(f"{checkpoint_id} not {status} within {timeout}s: {got}")

    def events(self) -> list[dict[str, Any]]:
        """Every event of ``lineage.events`` as a dict, in partition then offset order."""
        from streams.audit.log import load_topics
        from streams.codec import Codec

        codec = Codec()
        log = load_topics(self.bootstrap, self.topics, topics=("events",))
        return [codec.decode_event(r.value) for r in log.records.get("events", []) if r.value]

    def assert_audits_clean(self, config: Any = None) -> Any:
        """Export every topic and audit the archive with the run's keyring: every check passes.
        ``config``: the worker's core settings when it was started with other than the defaults
        (``--window``, ``--taint-margin``: the audit recomputes the commands with them)."""
        import uuid as _uuid

        from streams.audit.run import audit
        from streams.audit.export import export
        from streams.audit.log import load_archive
        from streams.signing import load_keyring

        archive = self.tmp / f"log-{_uuid.uuid4().hex[:6]}.avro"
        export(self.bootstrap, self.topics, str(archive))
        report = audit(load_archive(str(archive)), config=config, trusted_keys=load_keyring(str(self.keys)))
        failures = [f.line() for c in report.checks for f in c.failures]
        assert report.passed, failures[:20]
        return report

    def close(self) -> None:
        for c in self.clients:
            try:
                c.close(timeout=10)
            except Exception:  # noqa: BLE001 - closing what a failed test left
                pass
        self.worker.kill()


def assert_checkpoints_hold_what_was_recorded(events: list[dict], finals: bool = True) -> None:
    """Every recorded checkpoint whose file or directory is still there holds what was recorded,
    and (``finals``) each job never rolled back finished with its last recorded checkpoint (not so
    for a Trainer that ends on its best one). (Ray Tune wrote an exploiter's
    final checkpoint into the trial's own directory from before the exploit, in 1 run of its
    ``pbt_function`` example in 18: it was taken for that one, and the trial finished with
    nothing recorded after the exploit.)"""
    from urllib.parse import unquote, urlparse

    from streams.client.hashing import hash_path

    last: dict[str, str] = {}
    checked = 0
    for e in events:
        if e["type"] != "CheckpointWritten":
            continue
        last[e["job_id"]] = e["checkpoint_id"]
        path = Path(unquote(urlparse(e["uri"]).path))
        if path.exists():
            assert hash_path(path) == e["content_hash"], (e["checkpoint_id"], "its files were written again")
            checked += 1
    assert checked or not last, "no recorded checkpoint is on disk any more: nothing was checked"
    if not finals:
        return
    rolled = {e["job_id"] for e in events if e["type"] == "RolledBack"}  # may finish on what it restored
    ended = {e["job_id"]: e["final_checkpoint_id"] for e in events if e["type"] == "JobFinished"
             and e["job_id"] not in rolled}
    assert ended == {j: last.get(j) for j in ended}, (ended, last)


@contextlib.contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold a lock shared by every pytest process of this machine (``scripts/test`` runs several):
    the Ray tests take it, so no two Ray clusters train on the same two cores at once."""
    with open(Path(tempfile.gettempdir()) / f"traintrace-tests-{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture
def lineage_cohort(kafka_bootstrap: str, tmp_path: Path):
    """``make(partitions=2, extra_args=()) -> CohortRun``: fresh topics, a signing key and one
    real worker process; every client and the worker closed at the end."""
    runs: list[CohortRun] = []

    def make(partitions: int = 2, extra_args=(), cohort: str = "c1") -> CohortRun:
        from streams.cli.main import cli

        prefix = f"fw{uuid.uuid4().hex[:8]}."
        topics = TopicNames.from_env(prefix)
        ensure_topics(kafka_bootstrap, standard_topics(topics, partitions))
        keys = tmp_path / f"keys-{len(runs)}"
        r = CliRunner().invoke(cli, ["keygen", "--out", str(keys)])
        assert r.exit_code == 0, r.output
        app_id = f"tt-{prefix.rstrip('.')}"
        w = WorkerProcess(kafka_bootstrap, prefix, app_id, tmp_path / f"worker-{len(runs)}", partitions,
                          extra_args=["--commit-interval", "0.2", "--grace-seconds", "4",
                                      "--commitment-interval", "1", "--snapshot-interval", "0.5",
                                      "--signing-key", str(keys / "processor.key"), *extra_args]).start()
        run = CohortRun(kafka_bootstrap, topics, app_id, w, keys, tmp_path, cohort)
        runs.append(run)
        w.wait_ready()
        return run

    yield make
    for run in runs:
        run.close()
