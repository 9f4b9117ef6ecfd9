"""A real job client (``streams.client.JobClient``) in its own process, for the case of a job
killed before its producer flushed: the process is killed with SIGKILL while its events are in
flight, a new process on the same journal resends them, and the topic must hold the job's one
unbroken chain (as ``tests/integration/test_client.py`` checks on one node)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from streams.codec import Codec
from streams.core.chain import GENESIS, verify_link
from streams.core.events import parse_event
from streams.kafka.reader import read_to_end
from streams.kafka.topics import TopicNames

CODEC = Codec()

# argv: job, journal dir, bootstrap, topic prefix, first step, last step, finish (0/1)
# prints "resumed <seq>", "flushed <s> <left>" (the journal's resend on a restart), "step <step>
# <seq> <pending>" per step, "done <seq> <left>"
JOB_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from streams.kafka.topics import TopicNames
    from streams.client import JobClient
    job, jdir, bootstrap, prefix, first, last, finish = sys.argv[1:]
    c = JobClient(job, "fault-jobs", "base-model", journal_dir=jdir, bootstrap=bootstrap,
                  topics=TopicNames.from_env(prefix))
    c.start()
    print("resumed", c.seq, flush=True)
    if int(first) > 0:
        t = time.monotonic()
        left = c.flush(60)
        print("flushed", time.monotonic() - t, left, flush=True)
    for step in range(int(first), int(last)):
        c.progress(step, 0, 1.0 + (step % 7) / 10, grad_norm=0.5, lr=1e-4)
        if step % 10 == 0:
            p = os.path.join(jdir, f"{job}-{step}.bin")
            with open(p, "wb") as fh:
                fh.write(os.urandom(4096))
            c.checkpoint_written(f"{job}-{step}", p, step, 0)
        print("step", step, c.seq, c.pending(), flush=True)
        time.sleep(0.005)
    if finish == "1":
        c.finished("SUCCEEDED")
    left = c.close()
    print("done", c.seq, left, flush=True)
""")


def run_job(tmp: Path, args: list[str]) -> subprocess.Popen:
    script = tmp / "fault_job.py"
    if not script.exists():
        script.write_text(JOB_SCRIPT)
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def job_records(bootstrap: str, topics: TopicNames, job: str) -> list[tuple[bytes, dict]]:
    """The job's records on ``lineage.events`` in offset order (keyed by job: one partition)."""
    out = []
    for m in read_to_end(bootstrap, topics.events):
        if m.key == job.encode():
            out.append((m.value, CODEC.decode_event(m.value)))
    return out


def assert_one_chain(records: list[tuple[bytes, dict]]) -> int:
    """First copies hold every seq from 0 in order and their chain verifies; a later copy of a
    seq is the same event (a restart may seal it: then only its signature differs). Returns the
    number of copies."""
    first: dict[int, tuple[bytes, dict]] = {}
    order: list[int] = []
    copies = 0
    for value, d in records:
        seq = d["seq"]
        if seq in first:
            copies += 1
            if first[seq][0] != value:
                assert d["signature"] and {**d, "signature": None} == {**first[seq][1], "signature": None}, seq
            continue
        first[seq] = (value, d)
        order.append(seq)
    assert order == list(range(len(order))), f"seqs on the topic are not 0..n in order: {order[:20]}"
    prev = None
    for seq in order:
        ev = parse_event(first[seq][1])
        assert verify_link(ev, GENESIS if seq == 0 else prev) is None, f"chain broken at seq {seq}"
        prev = ev.hash
    return copies
