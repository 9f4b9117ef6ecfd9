"""The audit on the output of a real pipeline (issue 6's "done when").

One module-scoped run: hash-chained events of the shared vectors (each in its own cohort) and
of generated cohorts, published to 4 partitions, folded by 2 real worker processes. Then:

- `traintrace export` of the topics, and `traintrace audit` of the archive and of the topics,
  pass every check, with commands, manifests and commitments actually compared;
- replaying the archive twice and the topics once gives byte-identical manifests and
  commitments;
- editing, dropping, reordering or inserting one event of the archive, or altering one command
  or one manifest, fails the audit at exactly that place.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from streams.files.archive import LogRecord, read_archive, write_archive
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics
from streams.cli.main import cli
from streams.codec import Codec
from streams.audit.run import audit, recomputed_digest
from streams.audit.log import Until, load_archive, load_topics
from streams.audit.export import export
from streams.operator_commands.publish import publish_file
from streams.testing.cohort import chain_events, generate_cohorts
from streams.devtools.worker_process import WorkerProcess, wait_quiescent
from tests.unit.vectors import scenarios_dir

CODEC = Codec()
SCENARIOS = scenarios_dir()
ID_FIELDS = ("job_id", "checkpoint_id", "source_checkpoint_id", "base_checkpoint_id",
             "restored_checkpoint_id", "final_checkpoint_id", "cohort_id")
BROKEN_BY_DESIGN = ("07_ledger_gap_unregistered", "13_duplicates")  # gaps, conflicting duplicates


def clean_log(path: Path) -> None:
    lines = []
    for i, p in enumerate(sorted(SCENARIOS.glob("*.jsonl"))):
        if p.stem in BROKEN_BY_DESIGN:
            continue
        for line in p.read_text().splitlines():
            if line.strip():
                d = json.loads(line)
                for key in ID_FIELDS:
                    if d.get(key) is not None:
                        d[key] = f"v{i:02d}-{d[key]}"
                lines.append(d)
    lines.extend(generate_cohorts(jobs=60, cohort_size=10, steps=300, seed=6, divergence_rate=0.15,
                                  exploit_every=40, exploit_prob=0.6, alias_prob=0.05))
    with path.open("w") as fh:
        for d in chain_events(lines):
            fh.write(json.dumps(d) + "\n")


@pytest.fixture(scope="module")
def run(kafka_bootstrap, tmp_path_factory):
    """The pipeline's topics after a clean run, and an archive of them."""
    tmp = tmp_path_factory.mktemp("audit")
    prefix = f"au{uuid.uuid4().hex[:8]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(kafka_bootstrap, standard_topics(topics, 4))
    app_id = f"tt-{prefix.rstrip('.')}"
    keys, other = tmp / "keys", tmp / "other-keys"
    for d in (keys, other):
        r = CliRunner().invoke(cli, ["keygen", "--out", str(d)])
        assert r.exit_code == 0, r.output
    workers = [WorkerProcess(kafka_bootstrap, prefix, app_id, tmp / f"worker{i}", 4,
                             extra_args=["--commit-interval", "0.2", "--grace-seconds", "3",
                                         "--commitment-interval", "1",
                                         "--signing-key", str(keys / "processor.key")]).start()
               for i in range(2)]
    try:
        for w in workers:
            w.wait_ready()
        log = tmp / "events.jsonl"
        clean_log(log)
        publish_file(str(log), kafka_bootstrap, topics, CODEC)
        wait_quiescent(kafka_bootstrap, app_id, topics)
        time.sleep(4)  # unresolved-source grace period and one more commitment round
        wait_quiescent(kafka_bootstrap, app_id, topics)
    finally:
        for w in workers:
            w.stop()
    archive = tmp / "log.avro"
    export(kafka_bootstrap, topics, str(archive))
    return {"topics": topics, "archive": archive, "tmp": tmp, "bootstrap": kafka_bootstrap,
            "keys": keys, "other_keys": other}


def test_clean_run_passes_every_check(run):
    report = audit(load_archive(str(run["archive"])))
    failures = [f.line() for c in report.checks for f in c.failures]
    assert report.passed, failures[:20]
    by = {c.name: c for c in report.checks}
    assert all(not c.skipped for c in report.checks)
    assert by["commands"].checked > 20 and by["manifests"].checked > 10 and by["commitments"].checked >= 10
    assert by["input"].checked == by["chains"].checked


def test_signatures_checked_against_the_keyring(run):
    from streams.signing import load_keyring

    good = audit(load_archive(str(run["archive"])), trusted_keys=load_keyring(str(run["keys"])))
    assert good.passed and good.check("commitments").checked >= 10
    bad = audit(load_archive(str(run["archive"])), trusted_keys=load_keyring(str(run["other_keys"])))
    fails = bad.check("commitments").failures
    assert fails and all("UNKNOWN_KEY" in f.what for f in fails)
    # the workers sign their control records with the same key (schemas v5): each is named too
    cmds = bad.check("commands").failures
    assert cmds and all(f.field == "signature" and "UNKNOWN_KEY" in f.what for f in cmds)
    assert good.check("commands").counts.get("command signatures verified", 0) == good.check("commands").checked
    # and the fold snapshots they wrote (schemas v7), signed with it as well
    snaps = bad.check("snapshots").failures
    assert snaps and all(f.field == "signature" and "UNKNOWN_KEY" in f.what for f in snaps)
    assert good.check("snapshots").tally.get("recompute", 0) > 0
    assert [c.name for c in bad.checks if not c.passed] == ["commands", "commitments", "snapshots"]


def test_the_live_checkpoints_verify_here_and_with_the_go_libraries(run, tmp_path):
    """Issue 28: every commitment the real workers signed carries its fold log as a C2SP
    checkpoint (origin traintrace.local/<app id>/<cohort>), the audit verifies them all, and the
    Go verifier (x/mod note, transparency-dev formats and merkle) opens them and checks an
    offline bundle of an event made from the archive."""
    from streams.signing import NoteKey, load_keyring, load_private_key
    from tests import go_verifier

    good = audit(load_archive(str(run["archive"])), trusted_keys=load_keyring(str(run["keys"])))
    sig = good.check("commitments").as_dict()["signatures"]
    assert sig["checkpoints_verified"] == sig["verified"] > 0 and not sig["checkpoints_rejected"]
    coms = [CODEC.decode_record(r.value)[1] for r in load_archive(str(run["archive"])).topic("commitments")]
    notes = [c["checkpoint"] for c in coms if c.get("log_size")]
    assert notes and all(n.startswith("traintrace.local/tt-au") for n in notes)
    if go_verifier.go() is None:
        pytest.skip("no Go toolchain here")
    try:
        binary = go_verifier.build()
    except RuntimeError as exc:
        pytest.skip(str(exc).splitlines()[-1])
    prefix = notes[0].split("\n")[0].rsplit("/", 1)[0]
    vkey = str(NoteKey.of(prefix, load_private_key(run["keys"] / "processor.key")))
    for i, note in enumerate(notes[-5:]):
        f = tmp_path / f"cp{i}"
        f.write_text(note)
        rc, out = go_verifier.run(binary, "-log-key", vkey, "-origin", note.split("\n")[0], str(f))
        assert rc == 0, out
    bundle = tmp_path / "bundle.json"
    last = coms[-1]
    job = last["heads"][0]
    r = CliRunner().invoke(cli, ["prove", str(run["archive"]), "--event", f"{job['job_id']}:{job['seq']}",
                                 "--bundle", "-o", str(bundle)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["verify-proof", str(bundle), "--trusted-keys", str(run["keys"])])
    assert r.exit_code == 0 and "signed by the commitment's key" in r.output, r.output
    origin = json.loads(bundle.read_text())["checkpoint"].split("\n")[0]
    rc, out = go_verifier.run(binary, "-log-key", vkey, "-origin", origin, "-bundle", str(bundle))
    assert rc == 0 and "included" in out, out


def test_unsigned_commitment_rejected_with_a_keyring(run, tmp_path):
    from streams.signing import load_keyring

    def change(records):
        for i, r in enumerate(records):
            if r.topic == "commitments":
                name, v = CODEC.decode_record(r.value)
                v["signature"], v["key_id"] = None, None
                records[i] = replace(r, value=CODEC.encode_record(name, v))
                change.at = f"commitments[{r.partition}]@{r.offset}"
                return records

    report = audit(load_archive(rewrite(run, tmp_path, change)), trusted_keys=load_keyring(str(run["keys"])))
    assert [(f.where, "UNSIGNED" in f.what) for f in report.check("commitments").failures] == [(change.at, True)]


def test_prove_and_verify_on_the_real_log(run, tmp_path):
    runner = CliRunner()
    log = load_archive(str(run["archive"]))
    _n, com = CODEC.decode_record(log.topic("commitments")[-1].value)
    job = com["heads"][0]["job_id"]
    head = tmp_path / "head.json"
    r = runner.invoke(cli, ["prove", str(run["archive"]), "--head", job, "--out", str(head)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["verify-proof", str(head), "--trusted-keys", str(run["keys"])])
    assert r.exit_code == 0 and "VALID" in r.output, r.output
    r = runner.invoke(cli, ["verify-proof", str(head), "--trusted-keys", str(run["other_keys"])])
    assert r.exit_code == 1, r.output
    size = com["log_size"]
    cons = tmp_path / "cons.json"
    r = runner.invoke(cli, ["prove", str(run["archive"]), "--consistency", f"{size // 2}:{size}",
                            "--cohort", com["cohort_id"], "--out", str(cons)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["verify-proof", str(cons)])
    assert r.exit_code == 0 and "VALID" in r.output, r.output
    # and from the live topics: an event's inclusion in its cohort's fold log
    prefix = run["topics"].events[: -len("lineage.events")]
    ev = tmp_path / "event.json"
    r = runner.invoke(cli, ["prove", "kafka", "--event", f"{job}:{com['heads'][0]['seq']}", "--out", str(ev),
                            "--bootstrap", run["bootstrap"], "--topic-prefix", prefix])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["verify-proof", str(ev), "--trusted-keys", str(run["keys"])])
    assert r.exit_code == 0 and "VALID" in r.output, r.output


def test_cli_export_and_audit_from_topics_and_archive(run, tmp_path):
    env = {"TRAINTRACE_TOPIC_PREFIX": "", "KAFKA_BOOTSTRAP_SERVERS": run["bootstrap"]}
    prefix = run["topics"].events[: -len("lineage.events")]
    runner = CliRunner()
    out = tmp_path / "cli.avro"
    r = runner.invoke(cli, ["export", "--topic-prefix", prefix, "-o", str(out), "--json"], env=env)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["records"]["events"] > 1000
    r = runner.invoke(cli, ["audit", str(out), "--json", "--report", str(tmp_path / "a.json")], env=env)
    assert r.exit_code == 0, r.output[-3000:]
    assert json.loads(r.output)["verdict"] == "PASS"
    r = runner.invoke(cli, ["audit", "kafka", "--topic-prefix", prefix], env=env)
    assert r.exit_code == 0, r.output[-3000:]
    assert "AUDIT PASSED" in r.output


def test_replay_is_byte_identical(run):
    a = audit(load_archive(str(run["archive"])))
    b = audit(load_archive(str(run["archive"])))
    c = audit(load_topics(run["bootstrap"], run["topics"]))
    assert a.recomputed["manifests"] and a.recomputed["commitments"]
    assert recomputed_digest(a) == recomputed_digest(b) == recomputed_digest(c)
    # and equal, byte for byte, to what the processor published
    published = {(r.key, r.value) for r in load_archive(str(run["archive"])).topic("manifests")}
    assert {(k, v) for k, _n, v in a.recomputed["manifests"]} <= published


# ---------------------------------------------------------------------------- tampering


def rewrite(run, tmp_path, change) -> str:
    """A copy of the archive with ``change(records) -> records`` applied."""
    meta, rows = read_archive(str(run["archive"]))
    records = change(list(rows))
    out = tmp_path / "tampered.avro"
    write_archive(str(out), records, {k: v for k, v in meta.items() if k != "format"})
    return str(out)


def failures_of(path: str):
    report = audit(load_archive(path))
    assert not report.passed
    return {c.name: c.failures for c in report.checks if c.failures}


def pick_event(records, kind: str, nth: int = 3):
    """The nth events record of type ``kind`` that has a later event of the same job."""
    seen = 0
    for i, r in enumerate(records):
        if r.topic != "events":
            continue
        d = CODEC.decode_event(r.value)
        if d["type"] == kind and any(
                x.topic == "events" and x.key == r.key and x.offset > r.offset for x in records[i + 1:i + 400]):
            seen += 1
            if seen == nth:
                return i, d
    raise AssertionError(f"no {kind} to tamper with")


def test_edit_one_event(run, tmp_path):
    def change(records):
        i, d = pick_event(records, "CheckpointWritten")
        d["step"] += 1
        records[i] = replace(records[i], value=CODEC.encode_event(d))
        change.at = (d["job_id"], d["seq"], records[i].partition, records[i].offset)
        return records

    f = failures_of(rewrite(run, tmp_path, change))
    job, seq, p, o = change.at
    assert [(x.job_id, x.seq, x.where) for x in f["chains"]] == [(job, seq, f"events[{p}]@{o}")]
    assert "hash" in f["chains"][0].what
    assert [(x.job_id, x.seq, x.where, x.field) for x in f["input"]] == [(job, seq, f"events[{p}]@{o}", "step")]


def test_drop_one_event(run, tmp_path):
    def change(records):
        i, d = pick_event(records, "Progress")
        change.at = (d["job_id"], d["seq"], records[i].partition, records[i].offset)
        return records[:i] + records[i + 1:]

    f = failures_of(rewrite(run, tmp_path, change))
    job, seq, p, o = change.at
    gap = f["chains"][0]
    assert (gap.job_id, gap.field, gap.expected, gap.found) == (job, "seq", seq, seq + 1)
    assert [(x.where, x.job_id, x.seq) for x in f["input"]] == [(f"events[{p}]@{o}", job, seq)]


def test_reorder_two_events(run, tmp_path):
    def change(records):
        i, d = pick_event(records, "Progress", nth=5)
        j = next(k for k in range(i + 1, len(records)) if records[k].topic == "events" and records[k].key == records[i].key)
        a, b = records[i], records[j]
        records[i], records[j] = replace(a, value=b.value), replace(b, value=a.value)
        change.at = (d["job_id"], d["seq"], a.partition, a.offset)
        return records

    f = failures_of(rewrite(run, tmp_path, change))
    job, seq, p, o = change.at
    first = f["chains"][0]
    assert (first.job_id, first.where, first.field, first.expected, first.found) == (
        job, f"events[{p}]@{o}", "seq", seq, seq + 1)
    assert {x.job_id for x in f["input"]} == {job}


def test_insert_one_event(run, tmp_path):
    def change(records):
        i, d = pick_event(records, "Progress", nth=7)
        fake = dict(d, loss=float("nan"))
        at = records[i]
        # appended at the end of the job's partition: a second event claiming an existing seq
        last = max(r.offset for r in records if r.topic == "events" and r.partition == at.partition)
        records.append(LogRecord("events", at.partition, last + 1, at.timestamp, at.key, CODEC.encode_event(fake)))
        change.at = (d["job_id"], d["seq"], at.partition, last + 1)
        return records

    f = failures_of(rewrite(run, tmp_path, change))
    job, seq, p, o = change.at
    assert [(x.job_id, x.seq, x.where) for x in f["chains"]] == [(job, seq, f"events[{p}]@{o}")]
    assert "conflicting duplicate" in f["chains"][0].what
    assert [(x.job_id, x.seq, x.where) for x in f["input"]] == [(job, seq, f"events[{p}]@{o}")]


def test_alter_one_command(run, tmp_path):
    def change(records):
        for i, r in enumerate(records):
            if r.topic == "control":
                name, v = CODEC.decode_record(r.value)
                if name == "RollbackCommand" and v["target_step"] is not None:
                    v["target_step"] += 10
                    records[i] = replace(r, value=CODEC.encode_record(name, v))
                    change.at = (v["job_id"], f"control[{r.partition}]@{r.offset}", v["target_step"])
                    return records
        raise AssertionError("no rollback command")

    f = failures_of(rewrite(run, tmp_path, change))
    job, where, step = change.at
    assert list(f) == ["commands"]
    assert [(x.job_id, x.where, x.field, x.expected, x.found) for x in f["commands"]] == [
        (job, where, "target_step", step - 10, step)]


def test_alter_one_manifest(run, tmp_path):
    def change(records):
        for i, r in enumerate(records):
            if r.topic == "manifests" and r.value:
                name, v = CODEC.decode_record(r.value)
                if v["verdict"] == "INTERNAL" and v["tainted_checkpoints"]:
                    v["tainted_checkpoints"] = v["tainted_checkpoints"][1:]
                    records[i] = replace(r, value=CODEC.encode_record(name, v))
                    change.at = (v["root"]["job_id"], f"manifests[{r.partition}]@{r.offset}")
                    return records
        raise AssertionError("no manifest")

    f = failures_of(rewrite(run, tmp_path, change))
    job, where = change.at
    assert list(f) == ["manifests"]
    assert [(x.job_id, x.where, x.field) for x in f["manifests"]] == [(job, where, "tainted_checkpoints")]


def test_split_across_processes_gives_the_same_report(run, tmp_path, monkeypatch):
    import streams.audit.run as A

    log = load_archive(str(run["archive"]))
    one = audit(log, workers=1)
    monkeypatch.setattr(A, "PARALLEL_MIN_EVENTS", 0)
    assert A.split_by_cohort(log, 3) is not None
    three = audit(log, workers=3)
    assert three.meta.get("processes") == 3
    assert [c.as_dict() for c in three.checks] == [c.as_dict() for c in one.checks]
    assert three.check("chains").counts["jobs"] > 50
    assert three.final_state == one.final_state
    assert recomputed_digest(three) == recomputed_digest(one)

    # and a tampered log fails at the same place either way
    def change(records):
        for i, r in enumerate(records):
            if r.topic == "control":
                name, v = CODEC.decode_record(r.value)
                if name == "RollbackCommand":
                    v["target_checkpoint_id"] = "forged"
                    records[i] = replace(r, value=CODEC.encode_record(name, v))
                    return records

    bad = load_archive(rewrite(run, tmp_path, change))
    f1 = [f.as_dict() for f in audit(bad, workers=1).check("commands").failures]
    f3 = [f.as_dict() for f in audit(bad, workers=3).check("commands").failures]
    assert f1 == f3 and len(f1) == 1 and f1[0]["found"] == "forged"


def test_until_cuts_the_log_and_the_audit_still_passes(run, tmp_path):
    log = load_archive(str(run["archive"]))
    events = log.topic("events")
    mid = sorted(r.timestamp for r in events)[len(events) // 2]
    out = tmp_path / "cut.avro"
    export(run["bootstrap"], run["topics"], str(out), until=Until(ts_ms=mid))
    cut = load_archive(str(out))
    assert 0 < len(cut.topic("events")) < len(events)
    report = audit(cut)
    assert report.passed, [f.line() for c in report.checks for f in c.failures][:10]


def test_audit_as_of_on_the_archive(run):
    log = load_archive(str(run["archive"]))
    end = max(r.timestamp for r in log.topic("input"))
    r = CliRunner().invoke(cli, ["audit", str(run["archive"]), "--as-of", str(end + 60_000), "--json"])
    assert r.exit_code == 0, r.output[-2000:]
    answer = json.loads(r.output)
    issued = {c["command_id"] for c in answer["commands_issued"]}
    published = {CODEC.decode_record(x.value)[1]["command_id"] for x in log.topic("control")}
    assert issued == published
    first = min(r.timestamp for r in log.topic("input"))
    r = CliRunner().invoke(cli, ["audit", str(run["archive"]), "--as-of", str(first - 1), "--json"])
    assert json.loads(r.output)["jobs"] == []


def test_a_witness_cosigns_the_live_checkpoints_and_the_cosigned_commitments_audit_clean(run, tmp_path):
    """Issue 28, last in this file (it adds records to the run's commitments topic): `traintrace
    witness-client kafka --publish` has a real litewitness cosign every cohort's newest checkpoint
    and publishes the commitments again with the cosigned note; the topics still audit clean
    with the keyring, and `prove --bundle` of the new log carries the cosignature, which
    `verify-proof --witnesses-required 1` accepts and a second, absent witness's quorum refuses."""
    from streams.signing import NoteKey, load_keyring, load_private_key
    from tests import litewitness

    why = litewitness.missing()
    if why is not None:
        pytest.skip(why)
    try:
        bindir = litewitness.build()
    except RuntimeError as exc:
        pytest.skip(str(exc).splitlines()[-1])
    log = load_archive(str(run["archive"]))
    coms = [CODEC.decode_record(r.value)[1] for r in log.topic("commitments")]
    origins = sorted({c["checkpoint"].split("\n")[0] for c in coms if c.get("checkpoint")})
    prefix = origins[0].rsplit("/", 1)[0]
    vkey = str(NoteKey.of(prefix, load_private_key(run["keys"] / "processor.key")))
    prefix_flag = ["--topic-prefix", run["topics"].events[: -len("lineage.events")]]
    with litewitness.LiteWitness(bindir, "witness.example/live") as w:
        for origin in origins:
            w.add_log(origin, vkey)
        r = CliRunner().invoke(cli, ["witness-client", "kafka", "--bootstrap", run["bootstrap"], *prefix_flag,
                                     "--witness", f"{w.vkey}@{w.url}", "--state", str(tmp_path / "state.json"),
                                     "--publish", "--json"], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        doc = json.loads(r.output)
        assert doc["published"] == len(origins) and all(o["ok"] for o in doc["outcomes"]), doc
        topics = load_topics(run["bootstrap"], run["topics"])
        report = audit(topics, trusted_keys=load_keyring(str(run["keys"])))
        assert report.passed, [f.line() for c in report.checks for f in c.failures][:10]
        out = tmp_path / "export.avro"
        export(run["bootstrap"], run["topics"], str(out))
        last = CODEC.decode_record(load_archive(str(out)).topic("commitments")[-1].value)[1]
        job = last["heads"][0]
        bundle = tmp_path / "bundle.json"
        r = CliRunner().invoke(cli, ["prove", str(out), "--event", f"{job['job_id']}:{job['seq']}", "--bundle",
                                     "-o", str(bundle)])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(cli, ["verify-proof", str(bundle), "--trusted-keys", str(run["keys"]),
                                     "--witness", w.vkey, "--witnesses-required", "1"])
        assert r.exit_code == 0 and "cosigned by 1 witness(es): witness.example/live" in r.output, r.output
        absent = "witness.example/w1+e75f6532+BAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
        r = CliRunner().invoke(cli, ["verify-proof", str(bundle), "--trusted-keys", str(run["keys"]),
                                     "--witness", w.vkey, "--witness", absent, "--witnesses-required", "2"])
        assert r.exit_code == 1 and "missing: witness.example/w1" in r.output, r.output
        # the whole log with a quorum: `audit --witness --witnesses-required` passes, and names a
        # missing witness
        audit_args = ["audit", str(out), "--trusted-keys", str(run["keys"]), "--json", "--witness", w.vkey]
        r = CliRunner().invoke(cli, [*audit_args, "--witnesses-required", "1"])
        wit = next(c for c in json.loads(r.output)["checks"] if c["name"] == "witnesses")
        assert r.exit_code == 0 and wit["verdict"] == "PASS", wit
        assert wit["counts"]["cohorts witnessed"] == len(origins), wit
        r = CliRunner().invoke(cli, [*audit_args, "--witness", absent, "--witnesses-required", "2"])
        wit = next(c for c in json.loads(r.output)["checks"] if c["name"] == "witnesses")
        assert r.exit_code == 1 and all("missing: witness.example/w1" in f["what"] for f in wit["failures"]), wit
        # a second history signed by the processor's key: the witness refuses to cosign it, and
        # the audit given that checkpoint names the split view
        from streams.signing import Checkpoint, NoteSigner, sign_checkpoint
        from streams.witness import Witness, WitnessRefused, submit

        cp = Checkpoint.parse(last["checkpoint"].split("\n\n")[0] + "\n")
        forged = sign_checkpoint(Checkpoint(cp.origin, cp.size, bytes(32)),
                                 NoteSigner(prefix, load_private_key(run["keys"] / "processor.key")))
        with pytest.raises(WitnessRefused) as refused:
            submit(Witness.parse(f"{w.vkey}@{w.url}"), forged, cp.size, [])
        assert refused.value.status in (409, 422), refused.value
        (tmp_path / "forged.note").write_text(forged)
        r = CliRunner().invoke(cli, [*audit_args, "--witnesses-required", "1", "--checkpoint",
                                     str(tmp_path / "forged.note")])
        wit = next(c for c in json.loads(r.output)["checks"] if c["name"] == "witnesses")
        assert r.exit_code == 1 and any(f"split view of {cp.origin}" in f["what"] for f in wit["failures"]), wit


def test_an_export_of_a_live_log_is_one_cut(kafka_bootstrap, topic_factory, tmp_path):
    """What is written while an export runs is not in it, on any topic: the export takes every
    topic's end before it reads any, outputs first (``CUT_ORDER``). Read topic by topic to each
    one's end, a snapshot written while the events were read (covering input the export had
    already passed) was exported, and the audit then failed a clean live log ("covers input the
    log does not have")."""
    from types import SimpleNamespace

    from streams.kafka.settings import KafkaSettings

    names = SimpleNamespace(events=topic_factory(partitions=2), snapshots=topic_factory())
    producer = KafkaSettings(kafka_bootstrap).producer()
    for i in range(3):
        producer.produce(names.events, key=b"e", value=b"event-%d" % i, partition=i % 2)
        producer.produce(names.snapshots, key=b"s", value=b"snapshot-%d" % i)
    assert producer.flush(30) == 0
    late: list[str] = []

    def meanwhile(logical: str, n: int) -> None:  # while the events are read, both topics grow
        if logical == "events" and n == 1:
            for topic in (names.events, names.snapshots):
                producer.produce(topic, key=b"late", value=b"late", partition=0)
                late.append(topic)
            assert producer.flush(30) == 0

    summary = export(kafka_bootstrap, names, str(tmp_path / "cut.avro"), topics=("events", "snapshots"),
                     progress=meanwhile)
    assert late and summary.records == {"events": 3, "snapshots": 3}
    _, records = read_archive(str(tmp_path / "cut.avro"))
    assert b"late" not in {r.value for r in records}
    again = export(kafka_bootstrap, names, str(tmp_path / "after.avro"), topics=("events", "snapshots"))
    assert again.records == {"events": 4, "snapshots": 4}
