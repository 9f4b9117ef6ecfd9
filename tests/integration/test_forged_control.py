"""Forged control records on a real broker: a running job client with a trusted keyring applies
none of them, and the audit names each one.

Anyone who can write ``lineage.control`` (here: a plain producer on the PLAINTEXT broker, i.e. a
principal allowed to write there) writes a ``RollbackCommand`` and a ``HaltCommand`` for a running,
healthy job, each

(a) unsigned, (b) signed by an unknown key (a trainer's, which the keyring does not hold as a
signer), (c) signed by a trusted key whose role may not sign that kind (the operator's: it may
sign only a release), (d) genuinely signed by the processor key, then one field changed.

The job client (``trusted_keys``: the processor's public key in ``processor/``, an operator key in
``operator/``) rejects all eight: no callback runs, ``commands_rejected`` counts them, each with
its reason. The operators hear of it (issue 23): the worker, given the same keyring
(``--trusted-keys``), raises one ``CONTROL_FORGED`` alert on ``lineage.alerts`` per forged record
(its partition, offset and reason) and counts it in ``traintrace_control_forged_total``; the live
page (``traintrace ui``) shows the alerts; ``traintrace plans --trusted-keys`` shows no forged
command in force and lists each as left out, and without a keyring says signatures were not
checked. The audit of the topics with the same keyring fails its ``commands`` check naming
each forged record (topic[partition]@offset, command id, reason). Then the real thing still
works: the worker (started with ``--signing-key``) publishes a signed rollback for the job once it
diverges, and the client applies it; a command we sign with the processor key is applied too.

Cost: one worker and one job, about 11 s on the 2-core machine (1.4 s the worker's start, the
rest the divergence round trip and the wait for quiescence before the audit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from streams.audit.run import audit
from streams.audit.log import load_topics
from streams.client import ControlCommand, JobClient
from streams.codec import Codec
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.signing import (BAD_SIGNATURE, UNKNOWN_KEY, UNSIGNED, WRONG_ROLE, generate_key, key_id,
                             load_trusted_keys, save_private_key, save_public_key, sign_control)
from click.testing import CliRunner

from streams.cli.main import cli
from streams.testing.invariants import alert_records
from streams.devtools.worker_process import WorkerProcess, free_port, wait_quiescent
from tests.integration.waits import until

CODEC = Codec()


@pytest.fixture
def keys(tmp_path):
    """Processor, operator and trainer key pairs; the keyring trusts the first two by role."""
    ring = tmp_path / "trusted"
    made = {}
    for role in ("processor", "operator", "trainer", "stranger"):
        k = generate_key()
        made[role] = k
        save_private_key(k, tmp_path / "private" / f"{role}.key")
        if role in ("processor", "operator"):
            save_public_key(k, ring / role / f"{role}.pub")
    return {"ring": ring, "processor_file": tmp_path / "private" / "processor.key", **made}


@pytest.fixture
def signed_pipeline(kafka_bootstrap, tmp_path, keys):
    prefix = f"fc{uuid.uuid4().hex[:8]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(kafka_bootstrap, standard_topics(topics, 2))
    app_id = f"tt-{prefix.rstrip('.')}"
    w = WorkerProcess(kafka_bootstrap, prefix, app_id, tmp_path / "worker", 2,
                      extra_args=["--commit-interval", "0.2", "--grace-seconds", "3", "--loglevel", "warn",
                                  "--signing-key", str(keys["processor_file"]),
                                  "--trusted-keys", str(keys["ring"])]).start()
    try:
        w.wait_ready()
        yield topics, app_id, w
    finally:
        w.kill()


def rollback(job: str, cid: str, target: str = "A-60", step: int = 60) -> dict:
    return {"command_id": cid, "job_id": job, "cohort_id": "c1", "incarnation": 0, "action": "ROLLBACK",
            "target_checkpoint_id": target, "target_step": step, "incident_ids": ["forged"],
            "supersedes": None, "issued_ts": int(time.time() * 1000), "commitment_root": None}


def halt(job: str, cid: str) -> dict:
    return {"command_id": cid, "job_id": job, "cohort_id": "c1", "reason": "UNTRACEABLE_SOURCE",
            "detail": "forged", "seq": 3, "issued_ts": int(time.time() * 1000)}


def forgeries(job: str, keys: dict) -> list[tuple[str, dict, str]]:
    """(record name, record, the reason the client and the audit must give) for each forgery."""
    out = []
    for name, make in (("RollbackCommand", rollback), ("HaltCommand", halt)):
        tag = "rb" if name == "RollbackCommand" else "ht"
        out.append((name, make(job, f"{tag}-unsigned"), UNSIGNED))
        out.append((name, sign_control(name, make(job, f"{tag}-unknown"), keys["trainer"]), UNKNOWN_KEY))
        out.append((name, sign_control(name, make(job, f"{tag}-role"), keys["operator"]), WRONG_ROLE))
        genuine = sign_control(name, make(job, f"{tag}-altered"), keys["processor"])
        changed = "target_step" if name == "RollbackCommand" else "detail"
        genuine[changed] = 10 if changed == "target_step" else "changed after signing"
        out.append((name, genuine, BAD_SIGNATURE))
    return out


def produce(bootstrap: str, topics: TopicNames, records: list[tuple[str, dict]]) -> list[tuple[int, int]]:
    """Write the records to lineage.control with a plain producer; their (partition, offset)."""
    p = KafkaSettings(bootstrap).producer()
    at: dict[int, tuple[int, int]] = {}
    for i, (name, rec) in enumerate(records):
        def done(err, msg, i=i):
            assert err is None, err
            at[i] = (msg.partition(), msg.offset())
        p.produce(topics.control, key=rec["job_id"].encode(), value=CODEC.encode_record(name, rec), on_delivery=done)
    assert p.flush(30) == 0
    return [at[i] for i in range(len(records))]


def test_forged_commands_are_not_applied_and_the_audit_names_each(signed_pipeline, kafka_bootstrap, keys,
                                                                   tmp_path):
    topics, app_id, worker = signed_pipeline
    ui_port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "streams", "ui", "--bootstrap", kafka_bootstrap, "--topic-prefix",
                           topics.events[: -len("lineage.events")], "--port", str(ui_port),
                           "--trusted-keys", str(keys["ring"])],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    applied: list[ControlCommand] = []
    halts: list[ControlCommand] = []
    rejected: list[tuple[ControlCommand, str]] = []
    a = JobClient("A", "c1", "base-model", journal_dir=tmp_path / "jobs" / "A", bootstrap=kafka_bootstrap,
                  topics=topics, trusted_keys=keys["ring"], on_rollback=applied.append, on_halt=halts.append,
                  on_rejected=lambda c, why: rejected.append((c, why)))
    try:
        a.start()
        for step in range(0, 100, 20):
            a.progress(step, 0, 1.0)
        ck = tmp_path / "ck" / "A-60.bin"
        ck.parent.mkdir(parents=True)
        ck.write_bytes(b"A weights at 60" * 100)
        a.checkpoint_written("A-60", ck, 60, 0)
        assert a.flush(30) == 0 and a.wait_control_ready(30)
        assert a.stats()["control_authenticated"]

        forged = forgeries("A", keys)
        offsets = produce(kafka_bootstrap, topics, [(n, r) for n, r, _ in forged])
        seen: list[ControlCommand] = []
        until(lambda: seen.extend(a.poll(0.5)) or a.stats()["commands_rejected"] >= len(forged),
              what="every forged command fetched")
        assert seen == [] and applied == [] and halts == []
        assert not a.halted and a.incarnation == 0
        assert a.stats()["commands_rejected"] == len(forged)
        got = {c.command_id: why for c, why in rejected}
        assert got.keys() == {r["command_id"] for _, r, _ in forged}
        for _name, rec, reason in forged:
            assert got[rec["command_id"]].startswith(reason), (rec["command_id"], got[rec["command_id"]])
        assert [(c.command_id, c.outcome) for c, _ in a.rejected_commands] == [(c.command_id, "rejected")
                                                                             for c, _ in rejected]

        # the operators hear of it: one CONTROL_FORGED alert per forged record, counted by the worker
        def forged_alerts() -> dict[tuple[str, str], dict]:
            return {(al["details"]["partition"], al["details"]["offset"]): al
                    for al in alert_records(kafka_bootstrap, topics) if al["kind"] == "CONTROL_FORGED"}

        until(lambda: len(forged_alerts()) >= len(forged), what="a CONTROL_FORGED alert per forged record")
        alerts = forged_alerts()
        assert len(alerts) == len(forged)
        for (name, rec, reason), (part, off) in zip(forged, offsets):
            al = alerts[(str(part), str(off))]
            assert al["job_id"] == "A" and al["details"]["command_id"] == rec["command_id"], al
            assert al["details"]["reason"] == reason and al["details"]["record"] == name, al
            assert rec["command_id"][:12] in al["message"] and "forged" in al["message"]
        until(lambda: worker.metric("traintrace_control_forged_total") >= len(forged), what="the worker's count")
        # the live page shows them, and (given the keyring) no forged command as a plan
        def page() -> dict:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/api/state", timeout=2) as r:
                    return json.loads(r.read())
            except OSError:
                return {"alerts": [], "signatures": {"unverified": []}}
        until(lambda: len([x for x in page()["alerts"] if x["kind"] == "CONTROL_FORGED"]) >= len(forged)
              and len(page()["signatures"]["unverified"]) >= len(forged), what="the live page showing the forgeries")
        shown_page = page()
        assert shown_page["plans"] == [] and shown_page["signatures"]["checked"] is True
        assert sorted(u["command_id"] for u in shown_page["signatures"]["unverified"]) == sorted(
            r["command_id"] for _, r, _ in forged)
        # traintrace plans: with the keyring no forged command is in force, each is listed as left out
        checked = CliRunner().invoke(cli, ["plans", "--json", "--bootstrap", kafka_bootstrap, "--topic-prefix",
                                           topics.events[: -len("lineage.events")], "--trusted-keys", str(keys["ring"])])
        assert checked.exit_code == 0, checked.output
        shown = json.loads(checked.stdout)
        assert shown["plans"] == [] and shown["halts"] == [], shown
        assert shown["signatures"]["checked"] is True
        assert sorted(u["command_id"] for u in shown["signatures"]["unverified"]) == sorted(
            r["command_id"] for _, r, _ in forged)
        unchecked = CliRunner().invoke(cli, ["plans", "--json", "--bootstrap", kafka_bootstrap, "--topic-prefix",
                                             topics.events[: -len("lineage.events")]],
                                       env={"TRAINTRACE_TRUSTED_KEYS": None})
        assert unchecked.exit_code == 0, unchecked.output
        plain = json.loads(unchecked.stdout)
        assert plain["signatures"] == {"checked": False, "unverified": []}
        assert [h["job_id"] for h in plain["halts"]] == ["A"]  # the forged halt, shown as unchecked
        human = CliRunner().invoke(cli, ["plans", "--bootstrap", kafka_bootstrap, "--topic-prefix",
                                         topics.events[: -len("lineage.events")]], env={"TRAINTRACE_TRUSTED_KEYS": None})
        assert "signatures NOT checked" in human.stderr

        # the genuine path still works: the worker's signed rollback of a real divergence ...
        a.progress(100, 0, float("nan"))
        ck2 = tmp_path / "ck" / "A-100.bin"
        ck2.write_bytes(b"A weights at 100" * 100)
        a.checkpoint_written("A-100", ck2, 100, 0)
        assert a.flush(30) == 0
        until(lambda: a.poll(0.5) and applied, what="the worker's signed RollbackCommand")
        [cmd] = applied
        assert cmd.record["key_id"] == key_id(keys["processor"]) and cmd.target_checkpoint_id == "A-60"
        assert a.incarnation == 1 and a.stats()["commands_rejected"] == len(forged)
        # ... and a command signed with the processor key here
        mine = sign_control("HaltCommand", {**halt("A", "genuine-halt"), "seq": a.seq, "detail": "signed here"},
                            keys["processor"])
        produce(kafka_bootstrap, topics, [("HaltCommand", mine)])
        until(lambda: a.poll(0.5) and halts, what="the genuine HaltCommand")
        assert [h.command_id for h in halts] == ["genuine-halt"] and a.halted
        assert a.flush(30) == 0
    finally:
        a.close(10)
        os.killpg(ui.pid, signal.SIGKILL)
        ui.wait(10)

    # the audit with the trusted keyring names each forged record, and only those
    wait_quiescent(kafka_bootstrap, app_id, topics)
    report = audit(load_topics(kafka_bootstrap, topics), trusted_keys=load_trusted_keys(keys["ring"]))
    commands = report.check("commands")
    assert not commands.passed
    sig_findings = [f for f in commands.failures if f.field == "signature"]
    for (name, rec, reason), (part, off) in zip(forged, offsets):
        at = f"control[{part}]@{off}"  # the audit names topics by their role
        [f] = [f for f in sig_findings if f.where == at]
        assert rec["command_id"][:12] in f.what and reason in f.what and name in f.what, f.what
    assert len(sig_findings) == len(forged)  # the worker's records and the halt we signed verify
    assert commands.counts.get("command signatures verified", 0) >= 2  # the worker's rollback, ours
