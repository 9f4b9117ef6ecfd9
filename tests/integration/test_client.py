"""The training-job client (streams.client) against a real broker and real workers.

- a rollback command of a live worker reaches a live job and is applied once, also when the same
  command is produced again; a superseding command wins (live, and for a job that catches up);
- a halt pauses the job (``wait_while_halted`` blocks) until ``traintrace release``;
- the load-time gate refuses a tainted checkpoint and catches a wrong-content load;
- a job process killed with SIGKILL and started again continues its chain: no CHAIN_BROKEN, no
  LEDGER_GAP, nothing in the DLQ;
- with its broker stopped for a while, every event emitted meanwhile is delivered after it comes
  back, each seq exactly once, and commands reach the job again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from streams.devtools.broker import LocalBroker, pick_free_port
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.kafka.reader import read_to_end
from streams.client import ControlCommand, GateRefused, JobClient, hash_path
from streams.codec import Codec
from streams.core.chain import GENESIS, verify_link
from streams.core.events import parse_event
from streams.operator_commands.plans import effective_plans
from streams.operator_commands.release import release_job
from streams.devtools.worker_process import WorkerProcess, free_port, wait_quiescent
from tests.integration.waits import WAIT, until

CODEC = Codec()


@pytest.fixture
def pipeline(kafka_bootstrap, tmp_path):
    """``make(worker=True)``: fresh topics under a new prefix, optionally one live worker."""
    started: list[WorkerProcess] = []

    def make(worker: bool = True, partitions: int = 2):
        prefix = f"cl{uuid.uuid4().hex[:8]}."
        topics = TopicNames.from_env(prefix)
        ensure_topics(kafka_bootstrap, standard_topics(topics, partitions))
        app_id = f"tt-{prefix.rstrip('.')}"
        w = None
        if worker:
            w = WorkerProcess(kafka_bootstrap, prefix, app_id, tmp_path / f"worker-{prefix}", partitions,
                              extra_args=["--commit-interval", "0.2", "--grace-seconds", "3",
                                          "--loglevel", "warn"]).start()
            started.append(w)
            w.wait_ready()
        return topics, app_id, w

    yield make
    for w in started:
        w.kill()


@pytest.fixture
def clients(kafka_bootstrap, tmp_path):
    """``make(job, topics, **kw)``: a JobClient journaling in ``tmp_path/job``; all closed at the end."""
    made: list[JobClient] = []

    def make(job: str, topics: TopicNames, cohort: str = "c1", **kw) -> JobClient:
        kw.setdefault("bootstrap", kafka_bootstrap)
        c = JobClient(job, cohort, "base-model", journal_dir=tmp_path / "jobs" / job, topics=topics, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close(timeout=10)


def write_ckpt(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def diverging_job(c: JobClient, ckdir: Path) -> dict[str, Path]:
    """The worked example's A: A-480 clean, NaN at 500, A-500 and A-520 tainted."""
    paths = {}
    c.start()
    for step in range(400, 500, 20):
        c.progress(step, 0, 1.0)
    paths["A-480"] = write_ckpt(ckdir / "A-480.bin", b"A weights at 480" * 1000)
    c.checkpoint_written("A-480", paths["A-480"], 480, 0)
    c.progress(500, 0, float("nan"))
    paths["A-500"] = write_ckpt(ckdir / "A-500.bin", b"A weights at 500" * 1000)
    c.checkpoint_written("A-500", paths["A-500"], 500, 0)
    paths["A-520"] = write_ckpt(ckdir / "A-520.bin", b"A weights at 520" * 1000)
    c.checkpoint_written("A-520", paths["A-520"], 520, 0)
    assert c.flush(30) == 0
    return paths


def produce_control(bootstrap: str, topics: TopicNames, *records: tuple[str, dict]) -> None:
    p = KafkaSettings(bootstrap).producer()
    for name, rec in records:
        p.produce(topics.control, key=rec["job_id"].encode(), value=CODEC.encode_record(name, rec))
    assert p.flush(30) == 0


def rollback_record(job: str, cid: str, inc: int = 0, target: str | None = "X-1", step: int | None = 1,
                    supersedes: str | None = None, action: str = "ROLLBACK") -> dict:
    return {"command_id": cid, "job_id": job, "cohort_id": "c1", "incarnation": inc, "action": action,
            "target_checkpoint_id": target, "target_step": step, "incident_ids": ["i"],
            "supersedes": supersedes, "issued_ts": int(time.time() * 1000), "commitment_root": None}


def job_events(bootstrap: str, topics: TopicNames) -> dict[str, list[tuple[int, bytes]]]:
    out: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
    for m in read_to_end(bootstrap, topics.events):
        d = CODEC.decode_event(m.value)
        out[d["job_id"]].append((d["seq"], m.value))
    return out


def without_seal_records(events: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """A job's (seq, value) on the topic without its seal records: a seal record re-sends the
    head event, the same content with its ``signature`` set (streams.client.sealing), right
    after it; checked here to be exactly that."""
    out: list[tuple[int, bytes]] = []
    for seq, value in events:
        if out and seq == out[-1][0]:
            again, first = CODEC.decode_event(value), CODEC.decode_event(out[-1][1])
            assert again["signature"] and {**again, "signature": None} == {**first, "signature": None}
            continue
        out.append((seq, value))
    return out


def assert_chain_verifies(values: list[bytes]) -> None:
    prev = None
    for i, v in enumerate(values):
        ev = parse_event(CODEC.decode_event(v))
        assert ev.seq == i
        assert verify_link(ev, GENESIS if i == 0 else prev) is None
        prev = ev.hash


# -----------------------------------------------------------------------------------------------


def test_a_rollback_reaches_a_live_job_once_even_when_redelivered(pipeline, clients, kafka_bootstrap, tmp_path):
    topics, app_id, worker = pipeline()
    applied: list[ControlCommand] = []
    a = clients("A", topics, on_rollback=applied.append,
                worker_url=f"http://127.0.0.1:{worker.web_port}")
    diverging_job(a, tmp_path / "ck")

    # the worker's command reaches the job; the callback runs in this (the polling) thread
    until(lambda: a.poll(0.5) and applied, what="the RollbackCommand")
    [cmd] = applied
    assert (cmd.action, cmd.incarnation, cmd.target_checkpoint_id, cmd.target_step) == ("ROLLBACK", 0, "A-480", 480)
    assert a.incarnation == 1 and a.applied_commands == [cmd.command_id]
    assert a.flush(30) == 0

    # the worker saw the acknowledgement: A's plan is cleared (a PlanCleared reaches the job), nothing halted
    wait_quiescent(kafka_bootstrap, app_id, topics)
    assert effective_plans(kafka_bootstrap, topics, CODEC) == {"plans": [], "halts": []}
    [job] = [j for j in worker.get("/jobs")["jobs"] if j["job_id"] == "A"]
    assert (job["incarnation"], job["halted"], job["last_seq"]) == (1, None, a.seq)
    seen: list[ControlCommand] = []
    until(lambda: seen.extend(a.poll(0.5)) or any(c.outcome == "cleared" for c in seen), what="PlanCleared")

    # the same command twice more on lineage.control: never applied again
    produce_control(kafka_bootstrap, topics, ("RollbackCommand", dict(cmd.record)),
                    ("RollbackCommand", dict(cmd.record)))
    seen.clear()
    until(lambda: seen.extend(a.poll(0.5)) or sum(c.command_id == cmd.command_id for c in seen) >= 2,
          what="the redelivered commands")
    assert {c.outcome for c in seen if c.command_id == cmd.command_id} == {"duplicate"}
    assert len(applied) == 1 and a.incarnation == 1
    assert worker.get("/plans")["plans"] == []


def test_a_superseding_command_wins(pipeline, clients, kafka_bootstrap):
    topics, _app, _w = pipeline(worker=False)
    restored: dict[str, list[str]] = defaultdict(list)

    def restorer(job):
        return lambda cmd: restored[job].append(cmd.command_id)

    # live: both commands arrive while the job runs
    live = clients("L", topics, on_rollback=restorer("L"))
    live.start()
    assert live.wait_control_ready(30)
    produce_control(kafka_bootstrap, topics,
                    ("RollbackCommand", rollback_record("L", "l1", target="L-10", step=10)),
                    ("RollbackCommand", rollback_record("L", "l2", target="L-5", step=5, supersedes="l1")))
    until(lambda: live.stats()["control_records"] >= 2, what="both commands fetched")
    res = live.poll()
    assert [(c.command_id, c.outcome) for c in res] == [("l1", "superseded"), ("l2", "rollback")]
    assert restored["L"] == ["l2"] and live.incarnation == 1

    # a job that starts after the commands were published reads the topic from the beginning and
    # sees both at once: only the effective one is applied
    produce_control(kafka_bootstrap, topics,
                    ("RollbackCommand", rollback_record("K", "k1", target="K-10", step=10)),
                    ("RollbackCommand", rollback_record("K", "k2", action="RESTART_FROM_BASE", target=None,
                                                        step=None, supersedes="k1")))
    late = clients("K", topics, on_rollback=restorer("K"))
    late.start()
    assert late.wait_control_ready(30)
    res = late.poll(5)
    assert [(c.command_id, c.outcome) for c in res] == [("k1", "superseded"), ("k2", "rollback")]
    assert restored["K"] == ["k2"]
    assert late.flush(30) == 0 and live.flush(30) == 0
    events = job_events(kafka_bootstrap, topics)
    for job, cid in (("L", "l2"), ("K", "k2")):
        last = parse_event(CODEC.decode_event(events[job][-1][1]))
        assert (type(last).__name__, last.command_id, last.incarnation) == ("RolledBack", cid, 1)
    last_k = parse_event(CODEC.decode_event(events["K"][-1][1]))
    assert (last_k.restored_checkpoint_id, last_k.resumed_step) == (None, 0)

    # a restarted client does not re-apply: positions and applied ids are in the journal
    late.close(10)
    again = clients("K", topics, on_rollback=restorer("K"))
    assert again.wait_control_ready(30)
    assert [c.outcome for c in again.poll(1)] in ([], ["duplicate"])
    assert restored["K"] == ["k2"] and again.incarnation == 1


def test_a_halt_pauses_the_job_until_released(pipeline, clients, kafka_bootstrap):
    topics, app_id, _worker = pipeline()
    calls: list[tuple[str, str]] = []
    h = clients("H", topics, on_halt=lambda c: calls.append(("halt", c.reason)),
                on_release=lambda c: calls.append(("release", c.reason)))
    h.start()
    h.progress(10, 0, 1.0)
    h.consumed("nobody-wrote-this", 10, "MERGE")  # gate off: unrecorded source, halted after the grace
    h.progress(11, 0, 1.0)
    until(lambda: h.poll(0.5) and h.halted, what="the HaltCommand")
    assert calls == [("halt", "UNTRACEABLE_SOURCE")]

    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(h.wait_while_halted()), daemon=True)
    waiter.start()
    time.sleep(2.0)
    assert waiter.is_alive() and not result, "wait_while_halted returned while the job is halted"
    release_job(kafka_bootstrap, topics, "H", operator="test")
    waiter.join(WAIT)
    assert result == [True] and not h.halted
    assert calls == [("halt", "UNTRACEABLE_SOURCE"), ("release", "RELEASE")]
    h.progress(12, 0, 1.0)  # training goes on; events were folded all along
    assert h.flush(30) == 0
    wait_quiescent(kafka_bootstrap, app_id, topics)
    assert effective_plans(kafka_bootstrap, topics, CODEC)["halts"] == []


def test_the_gate_refuses_a_tainted_checkpoint_and_a_wrong_content_load(pipeline, clients, kafka_bootstrap,
                                                                        tmp_path):
    topics, app_id, worker = pipeline()
    url = f"http://127.0.0.1:{worker.web_port}"
    a = clients("A", topics, on_rollback=lambda c: None)
    paths = diverging_job(a, tmp_path / "ck")
    b = clients("B", topics, worker_url=url)
    b.start()
    assert b.flush(30) == 0
    wait_quiescent(kafka_bootstrap, app_id, topics)
    until(lambda: worker.get("/checkpoints/A-520")["status"] == "tainted", what="A-520 tainted")

    loads: list[str] = []

    def loader(path):
        return lambda: loads.append(str(path)) or path

    seq = b.seq
    with pytest.raises(GateRefused, match="tainted") as exc:
        b.consumed("A-520", 520, "MERGE", load=loader(paths["A-520"]))
    assert exc.value.status == "tainted" and exc.value.checkpoint_id == "A-520"
    assert loads == [] and b.seq == seq               # refused before loading; nothing emitted

    # a clean checkpoint loads, and the content actually loaded is checked
    assert b.consumed("A-480", 400, "MERGE", load=loader(paths["A-480"])) == hash_path(paths["A-480"])
    assert b.seq == seq + 1
    stale = write_ckpt(tmp_path / "B-own-stale.bin", b"B's own old weights" * 100)
    with pytest.raises(GateRefused, match="does not match the recorded") as exc:
        b.consumed("A-480", 410, "MERGE", load=loader(stale))
    assert exc.value.status == "mismatch" and b.seq == seq + 1
    with pytest.raises(GateRefused, match="does not match"):
        b.consumed("A-480", 411, "MERGE", load=loader(paths["A-480"]), expected_hash="0" * 64)

    # unknown checkpoints and an unreachable worker are refused too
    b.gate_unknown_wait = 0  # ask once (by default a client asks again for 10 s)
    with pytest.raises(GateRefused, match="unknown"):
        b.consumed("A-999", 420, "MERGE")
    nowhere = clients("N", topics, worker_url=f"http://127.0.0.1:{free_port()}", gate_timeout=0.5)
    nowhere.start()
    with pytest.raises(GateRefused, match="unreachable"):
        nowhere.consumed("A-480", 1, "INIT")
    # evaluating a tainted checkpoint never taints: allowed
    b.consumed("A-520", 430, "EVAL_ONLY")
    # gate="warn": logged, then loaded and recorded
    w = clients("W", topics, worker_url=url, gate="warn")
    w.start()
    w.consumed("A-520", 1, "MERGE", load=loader(paths["A-520"]))
    assert w.seq == 1 and loads[-1] == str(paths["A-520"])
    # the base checkpoint of start() goes through the gate as well
    s = clients("S", topics, worker_url=url)
    with pytest.raises(GateRefused, match="tainted"):
        s.start(base_checkpoint_id="A-520")
    assert not s.started


SCRIPT = textwrap.dedent("""
    import os, sys, time
    from streams.kafka.topics import TopicNames
    from streams.client import JobClient
    job, jdir, bootstrap, prefix, first, last, finish = sys.argv[1:]
    c = JobClient(job, "ck", "base-model", journal_dir=jdir, bootstrap=bootstrap,
                  topics=TopicNames.from_env(prefix))
    c.start()
    print("resumed", c.seq, flush=True)
    for step in range(int(first), int(last)):
        c.progress(step, 0, 1.0 + (step % 7) / 10, grad_norm=0.5, lr=1e-4)
        if step % 10 == 0:
            p = os.path.join(jdir, f"{job}-{step}.bin")
            with open(p, "wb") as fh:
                fh.write(os.urandom(4096))
            c.checkpoint_written(f"{job}-{step}", p, step, 0)
        print("step", step, c.seq, flush=True)
    if finish == "1":
        c.finished("SUCCEEDED")
    left = c.close()
    print("done", c.seq, left, flush=True)
""")


def run_job(script: Path, args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_a_job_killed_and_restarted_continues_its_chain(pipeline, kafka_bootstrap, tmp_path):
    topics, app_id, worker = pipeline()
    prefix = topics.events[: -len("lineage.events")]
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    jdir = tmp_path / "jobs" / "R"
    nowhere = f"127.0.0.1:{free_port()}"
    resumed = []
    # run 0 cannot reach Kafka at all: its events exist only in its journal when it is killed;
    # runs 1 and 2 are killed mid-stream with events in flight. Each run's steps end where the
    # next run's begin: a loaded machine let run 0 go on from its 40th step to its 100th before
    # the kill landed, and run 1 then wrote R-100 again (a conflicting duplicate of the test's own)
    for kill_at, bootstrap, (first, last) in ((40, nowhere, (0, 100)), (150, kafka_bootstrap, (100, 1000)),
                                              (80, kafka_bootstrap, (1000, 5000))):
        proc = run_job(script, ["R", str(jdir), bootstrap, prefix, str(first), str(last), "0"])
        try:
            steps = 0
            for line in proc.stdout:
                if line.startswith("resumed"):
                    resumed.append(int(line.split()[1]))
                elif line.startswith("step"):
                    steps += 1
                    if steps >= kill_at:
                        break
            os.kill(proc.pid, signal.SIGKILL)   # mid-stream, events in flight
        finally:
            proc.kill()
            proc.wait(30)
    proc = run_job(script, ["R", str(jdir), kafka_bootstrap, prefix, "5000", "5050", "1"])
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait(30)
    assert proc.returncode == 0, out
    # (the client's once-per-process warning that control is unauthenticated goes to stderr)
    lines = [x for x in out.splitlines() if not x.startswith("traintrace client:")]
    resumed.append(int(lines[0].split()[1]))
    final_seq, left = map(int, lines[-1].split()[1:])
    assert left == 0
    assert resumed[0] == 0 and resumed[1] >= 40 and resumed[2] >= resumed[1] + 150, resumed
    assert resumed[3] >= resumed[2] + 80, resumed

    wait_quiescent(kafka_bootstrap, app_id, topics)
    # the worker folded one unbroken record: no CHAIN_BROKEN, no LEDGER_GAP, no duplicate conflict
    assert effective_plans(kafka_bootstrap, topics, CODEC)["halts"] == []
    [job] = [j for j in worker.get("/jobs")["jobs"] if j["job_id"] == "R"]
    assert (job["halted"], job["last_seq"], job["finished"]) == (None, final_seq, True)
    assert list(read_to_end(kafka_bootstrap, topics.dlq)) == []
    # on the topic: every seq, in order; a redelivered one identical to the first copy, but for
    # its seal (a restart seals the head the killed process left unsealed: the same event, signed)
    events = job_events(kafka_bootstrap, topics)["R"]
    first_copy: dict[int, bytes] = {}
    order = []
    for seq, value in events:
        if seq in first_copy:
            if first_copy[seq] != value:
                again, first = CODEC.decode_event(value), CODEC.decode_event(first_copy[seq])
                assert again["signature"] and {**again, "signature": None} == {**first, "signature": None}
            continue
        first_copy[seq] = value
        order.append(seq)
    assert order == list(range(final_seq + 1))
    assert_chain_verifies([first_copy[s] for s in order])


def test_events_emitted_while_the_broker_is_down_are_all_delivered(tmp_path):
    port = pick_free_port()
    broker = LocalBroker(tmp_path / "broker", port=port, die_with_parent=True)
    bootstrap = broker.start(timeout=120)
    client = None
    try:
        topics = TopicNames.from_env("outage.")
        ensure_topics(bootstrap, standard_topics(topics, 2))
        restored: list[str] = []
        client = JobClient("O", "c1", "base-model", journal_dir=tmp_path / "O", bootstrap=bootstrap,
                           topics=topics, on_rollback=lambda cmd: restored.append(cmd.command_id))
        client.start()
        for step in range(50):
            client.progress(step, 0, 1.0)
        assert client.flush(60) == 0

        broker.stop()
        # training goes on while Kafka is away; the client buffers
        ck = write_ckpt(tmp_path / "O-100.bin", os.urandom(100_000))
        for step in range(50, 350):
            client.progress(step, 0, 1.0)
            if step == 100:
                client.checkpoint_written("O-100", ck, step, 0)
            if step % 50 == 0:
                time.sleep(2.0)   # ~12 s of outage in all
        assert client.pending() >= 300
        assert client.flush(1) > 0

        broker = LocalBroker(tmp_path / "broker", port=port, die_with_parent=True)
        assert broker.start(timeout=120) == bootstrap
        assert client.flush(120) == 0
        # the control fetcher is back too: a command published now reaches the job
        produce_control(bootstrap, topics, ("RollbackCommand", rollback_record("O", "o1", target="O-100", step=100)))
        until(lambda: client.poll(0.5) and restored, what="the command after the outage")
        assert restored == ["o1"] and client.flush(60) == 0
        n = client.next_seq
        assert n == 353
        client.close(30)
        client = None

        events = without_seal_records(job_events(bootstrap, topics)["O"])
        assert [s for s, _ in events] == list(range(n))   # each seq exactly once, in order
        assert_chain_verifies([v for _, v in events])
    finally:
        if client is not None:
            client.close(0)
        broker.stop()


def test_a_job_started_before_any_worker_creates_no_topic_and_loses_nothing(clients, kafka_bootstrap):
    """A newcomer starts a training job before the worker: its producer does not have the broker
    auto-create ``lineage.events`` (that gave one partition and the broker's week of retention,
    which the worker then refused, and KAFKA-15591 can lose a new topic's first writes); the
    events wait in the journal and all go out, in order, once the worker's topics exist."""
    prefix = f"nw{uuid.uuid4().hex[:8]}."
    topics = TopicNames.from_env(prefix)
    c = clients("early", topics, follow_control=False)
    c.start()
    for step in range(5):
        c.progress(step, 0, 1.0)
    assert c.flush(3) > 0  # nowhere to go yet
    admin = KafkaSettings.of(kafka_bootstrap).admin()
    assert [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)] == []
    ensure_topics(kafka_bootstrap, standard_topics(topics, 2))  # the worker starts
    assert c.flush(60) == 0
    got = without_seal_records(job_events(kafka_bootstrap, topics)["early"])
    assert [seq for seq, _v in got] == list(range(6))  # JobStarted and five Progress
    assert_chain_verifies([v for _seq, v in got])
