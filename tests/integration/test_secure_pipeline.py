"""The whole pipeline on the secure broker (SASL_SSL + SCRAM-SHA-512, ACLs enforced), each role
with its own credentials and nothing more:

- the *processor* creates the topics and runs two workers (``TRAINTRACE_KAFKA_CONFIG`` of its
  role, ``--signing-key`` of a processor key), which sign every control record and commitment;
- the *trainer* runs job clients with a trusted keyring (``processor/`` and ``operator/``): job A
  diverges and obeys the workers' signed ``RollbackCommand``; job H consumes an unrecorded
  checkpoint, is halted, and obeys the *operator*'s ``traintrace release --signing-key``;
  neither rejects anything;
- the *operator* reads ``traintrace plans`` (nothing in force) and ``traintrace watch`` (the
  alerts of both stories);
- the *auditor* runs ``traintrace export`` and ``traintrace audit --trusted-keys``: it passes,
  every command and commitment signature verified.

Cost: one secure broker start plus two workers, about 30 s for the module on the 2-core machine
(~10 s the broker's start, ~10 s the workers', ~15 s the story and its waits).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from streams.cli.main import cli
from streams.client import ControlCommand, JobClient
from streams.devtools.broker import LocalBroker
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.signing import write_keypair
from streams.devtools.worker_process import WorkerProcess, wait_quiescent
from tests.integration.waits import WAIT, until

from secure import role, role_env, secure_broker  # noqa: F401  (the module's secure broker)

APP_ID = "traintrace-secure"  # the processor's ACLs cover groups and topics prefixed "traintrace"


def as_role(broker: LocalBroker, name: str, *args: str):
    """``traintrace ARGS`` in this process with role ``name``'s credentials (default topic names)."""
    env = {**role_env(broker, name), "TRAINTRACE_TOPIC_PREFIX": ""}
    r = CliRunner().invoke(cli, list(args), env=env)
    assert r.exit_code == 0, f"traintrace {' '.join(args)} as {name}: exit {r.exit_code}\n{r.output[-3000:]}"
    return r.output


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A processor key, an operator key, and the trainers' keyring trusting each for its role."""
    d = tmp_path_factory.mktemp("keys")
    made = {r: write_keypair(d / r) for r in ("processor", "operator")}
    ring = d / "trusted"
    for r, kp in made.items():
        (ring / r).mkdir(parents=True)
        shutil.copy(kp.public_path, ring / r / f"{r}-{kp.key_id}.pub")
    return {"ring": ring, **made}


@pytest.fixture(scope="module")
def pipeline(secure_broker: LocalBroker, role, keys, tmp_path_factory: pytest.TempPathFactory):
    """The default topics, created by the processor, and two signing workers running as the processor."""
    topics = TopicNames()
    ensure_topics(role("processor"), standard_topics(topics, 2))
    base = tmp_path_factory.mktemp("workers")
    workers = [WorkerProcess(secure_broker.status()["bootstrap"], "", APP_ID, base / f"worker{i}", 2,
                             extra_args=["--commit-interval", "0.2", "--grace-seconds", "3",
                                         "--commitment-interval", "1", "--loglevel", "info",
                                         "--signing-key", str(keys["processor"].private_path)],
                             env=role_env(secure_broker, "processor"))
               for i in range(2)]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.wait_ready()
        yield topics, workers
    finally:
        for w in workers:
            w.kill()


def _checkpoint(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _diverge(a: JobClient, ckdir: Path) -> None:
    """A-480 clean, NaN at 500, A-500 and A-520 tainted (test_client's worked example)."""
    a.start()
    for step in range(400, 500, 20):
        a.progress(step, 0, 1.0)
    a.checkpoint_written("A-480", _checkpoint(ckdir / "A-480.bin", b"A weights at 480" * 1000), 480, 0)
    a.progress(500, 0, float("nan"))
    a.checkpoint_written("A-500", _checkpoint(ckdir / "A-500.bin", b"A weights at 500" * 1000), 500, 0)
    a.checkpoint_written("A-520", _checkpoint(ckdir / "A-520.bin", b"A weights at 520" * 1000), 520, 0)
    assert a.flush(30) == 0


@pytest.fixture(scope="module")
def story(secure_broker: LocalBroker, role, keys, pipeline, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Jobs A (diverges, rolled back) and H (halted, released by the operator), as the trainer."""
    topics, workers = pipeline
    t0 = time.monotonic()
    d = tmp_path_factory.mktemp("jobs")
    out: dict = {"applied": [], "rejected": [], "calls": []}

    def client(job: str, **kw) -> JobClient:
        return JobClient(job, "c1", "base-model", journal_dir=d / job, bootstrap=role("trainer"), topics=topics,
                         trusted_keys=keys["ring"], on_rejected=lambda c, why: out["rejected"].append((c, why)),
                         **kw)

    a = client("A", on_rollback=out["applied"].append)
    h = client("H", on_halt=lambda c: out["calls"].append(("halt", c.reason, c.record.get("key_id"))),
               on_release=lambda c: out["calls"].append(("release", c.reason, c.record.get("key_id"))))
    try:
        assert a.stats()["control_authenticated"] and h.stats()["control_authenticated"]
        _diverge(a, d / "ck")
        until(lambda: a.poll(0.5) and out["applied"], what="the workers' signed RollbackCommand")
        out["incarnation_a"] = a.incarnation

        h.start()
        h.progress(10, 0, 1.0)
        h.consumed("nobody-wrote-this", 10, "MERGE")  # no gate: unrecorded source, halted after the grace
        h.progress(11, 0, 1.0)
        until(lambda: h.poll(0.5) and h.halted, what="the workers' signed HaltCommand")
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: result.append(h.wait_while_halted(WAIT)), daemon=True)
        waiter.start()
        out["release"] = json.loads(as_role(secure_broker, "operator", "release", "H", "--json", "--signing-key",
                                            str(keys["operator"].private_path)))
        waiter.join(WAIT + 5)
        out["released"] = result == [True] and not h.halted
        h.progress(12, 0, 1.0)  # training goes on
        assert a.flush(30) == 0 and h.flush(30) == 0
        out["stats"] = {"A": a.stats(), "H": h.stats()}
    finally:
        a.close(10)
        h.close(10)
    wait_quiescent(role("processor"), APP_ID, topics)
    out["seconds"] = time.monotonic() - t0
    return out


def test_jobs_obey_signed_rollbacks_and_a_signed_release(story: dict, keys) -> None:
    [cmd] = story["applied"]
    assert isinstance(cmd, ControlCommand)
    assert (cmd.action, cmd.target_checkpoint_id, cmd.target_step) == ("ROLLBACK", "A-480", 480)
    assert cmd.record["key_id"] == keys["processor"].key_id and story["incarnation_a"] == 1
    assert story["calls"] == [("halt", "UNTRACEABLE_SOURCE", keys["processor"].key_id),
                              ("release", "RELEASE", keys["operator"].key_id)]
    assert story["release"]["was_halted"] and story["released"]
    assert story["rejected"] == []
    assert all(s["commands_rejected"] == 0 for s in story["stats"].values())
    print(f"\nsecure pipeline story: {story['seconds']:.1f}s after the workers started")


def test_the_operator_reads_plans_and_watches_alerts(secure_broker: LocalBroker, story: dict) -> None:
    plans = json.loads(as_role(secure_broker, "operator", "plans", "--json"))
    assert plans["halts"] == [] and plans["plans"] == [], plans
    out = as_role(secure_broker, "operator", "watch", "--json", "--from-beginning", "--idle-timeout", "3")
    alerts = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    jobs = {a.get("job_id") for a in alerts}
    assert {"A", "H"} <= jobs, alerts


def test_the_auditor_exports_and_the_audit_passes(secure_broker: LocalBroker, story: dict, keys,
                                                  tmp_path: Path) -> None:
    archive = tmp_path / "log.avro"
    summary = json.loads(as_role(secure_broker, "auditor", "export", "-o", str(archive), "--json"))
    assert summary["records"]["events"] > 10 and summary["records"]["control"] >= 3, summary
    report = json.loads(as_role(secure_broker, "auditor", "audit", str(archive), "--json",
                                "--trusted-keys", str(keys["ring"])))
    assert report["verdict"] == "PASS", json.dumps(report, indent=1)[:4000]
    [commands] = [c for c in report["checks"] if c["name"] == "commands"]
    # the workers' rollback, plan-cleared and halt records and the operator's release, all verified
    assert commands["counts"].get("command signatures verified", 0) >= 3, commands["counts"]
    assert not any(k.startswith("command signatures rejected") for k in commands["counts"]), commands["counts"]
    [sig] = [c["signatures"] for c in report["checks"] if c.get("signatures")]
    assert sig["signed"] >= 1 and sig["verified"] == sig["signed"] and sig["unsigned"] == sig["rejected"] == 0, sig
