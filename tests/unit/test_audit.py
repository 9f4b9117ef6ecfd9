"""The audit without Kafka: logs built by the same router and referee the worker runs
(streams.testing.simulate), then checked, then tampered with.

The same checks run against a real pipeline in tests/integration/test_audit.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import streams.audit.run as A
from streams.files.archive import LogRecord, write_archive
from streams.codec import Codec
from streams.audit.run import audit, recomputed_digest
from streams.audit.log import load, load_archive
from streams.testing.cohort import chain_events
from streams.testing.simulate import simulate_pipeline

from .vectors import scenarios_dir, vector_names

CODEC = Codec()
SCENARIOS = scenarios_dir()
VECTORS = vector_names()


def chained_log(tmp_path: Path, name: str = "14_pbt_cohort", **kw):
    """A vector with hash chains, through the simulated pipeline."""
    src = tmp_path / f"{name}.jsonl"
    lines = [json.loads(x) for x in (Path(SCENARIOS) / f"{name}.jsonl").read_text().splitlines() if x.strip()]
    src.write_text("".join(json.dumps(d) + "\n" for d in chain_events(lines)))
    return simulate_pipeline(str(src), **kw)


def failures(log, **kw) -> dict[str, list]:
    report = audit(log, **kw)
    return {c.name: c.failures for c in report.checks if c.failures}


@pytest.mark.parametrize("name", VECTORS)
def test_every_vector_through_the_simulated_pipeline_audits(name):
    report = audit(simulate_pipeline(str(Path(SCENARIOS) / f"{name}.jsonl")))
    by = {c.name: c for c in report.checks}
    for check in ("input", "commands", "manifests", "commitments"):
        assert by[check].passed, [f.line() for f in by[check].failures]
    if name in ("07_ledger_gap_unregistered", "13_duplicates"):
        # the log itself has a gap / a conflicting duplicate: the record is not intact
        assert not by["chains"].passed
    else:
        assert report.passed
    expected = json.loads((Path(SCENARIOS) / f"{name}.expected.json").read_text())
    key = lambda p: (p["job_id"], p["action"], p["target_checkpoint_id"])  # noqa: E731
    assert [key(p) for p in report.final_state["plans"]] == [key(p) for p in expected["plans"]]


def test_the_log_gaps_are_named():
    f = failures(simulate_pipeline(str(Path(SCENARIOS) / "07_ledger_gap_unregistered.jsonl")))
    assert [(x.job_id, x.seq, x.where, x.expected, x.found) for x in f["chains"]] == [
        ("A", 13, "events[0]@13", 12, 13), ("X", 3, "events[0]@30", 0, 3)]
    f = failures(simulate_pipeline(str(Path(SCENARIOS) / "13_duplicates.jsonl")))
    assert [(x.job_id, x.seq, x.field, x.found) for x in f["chains"]] == [("B", 3, "loss", 99.0)]


def test_chained_log_passes_and_replays_identically(tmp_path):
    log = chained_log(tmp_path)
    a, b = audit(log), audit(log)
    assert a.passed and a.check("chains").counts.get("unhashed events") is None
    assert recomputed_digest(a) == recomputed_digest(b)
    published = {r.value for r in log.topic("manifests")}
    assert {v for _k, _n, v in a.recomputed["manifests"]} == published


def test_edited_event_fails_chain_and_input_there(tmp_path):
    log = chained_log(tmp_path)
    i, rec = next((i, r) for i, r in enumerate(log.topic("events"))
                  if CODEC.decode_event(r.value)["type"] == "CheckpointWritten")
    d = CODEC.decode_event(rec.value)
    d["content_hash"] = "0" * 64
    log.records["events"][i] = replace(rec, value=CODEC.encode_event(d))
    f = failures(log)
    assert set(f) == {"chains", "input"}
    assert [(x.job_id, x.seq, x.where) for x in f["chains"]] == [(d["job_id"], d["seq"], f"events[0]@{rec.offset}")]
    assert [(x.field, x.found) for x in f["input"]] == [("content_hash", "0" * 64)]


def test_a_restart_from_scratch_audits_and_its_flag_is_in_the_chain(tmp_path):
    """16_from_scratch with hash chains: audits clean (commands re-derived with the restart from
    scratch); flipping Y's from_scratch (the RESTART_FROM_SCRATCH becomes a null restore that
    re-consumes X-300) breaks Y's chain there, and the processor's input no longer matches."""
    log = chained_log(tmp_path, "16_from_scratch")
    report = audit(log)
    assert report.passed, [f.line() for c in report.checks for f in c.failures]
    assert [(p["job_id"], p["action"]) for p in report.final_state["plans"]] == [("Z", "RESTART_FROM_SCRATCH")]
    i, rec = next((i, r) for i, r in enumerate(log.topic("events"))
                  if CODEC.decode_event(r.value).get("from_scratch"))
    d = CODEC.decode_event(rec.value)
    assert (d["job_id"], d["type"]) == ("Y", "RolledBack")
    log.records["events"][i] = replace(rec, value=CODEC.encode_event({**d, "from_scratch": False}))
    f = failures(log)
    assert [(x.job_id, x.seq, x.where) for x in f["chains"]] == [("Y", d["seq"], f"events[0]@{rec.offset}")]
    assert [(x.field, x.found) for x in f["input"]] == [("from_scratch", False)]


def test_dropped_control_record_is_missing_and_named(tmp_path):
    log = chained_log(tmp_path)
    final = {p["command_id"] for p in audit(log).final_state["plans"]}
    k = next(i for i, r in enumerate(log.topic("control")) if CODEC.decode_record(r.value)[1]["command_id"] in final)
    gone = log.records["control"].pop(k)
    _n, v = CODEC.decode_record(gone.value)
    f = failures(log)
    assert list(f) == ["commands"]
    (miss,) = f["commands"]
    assert miss.job_id == v["job_id"] and v["command_id"][:12] in miss.what and "missing" in miss.what
    assert miss.where.startswith("input[")  # the input record after which the log implies it


def test_extra_control_record_is_named(tmp_path):
    log = chained_log(tmp_path)
    rec = log.topic("control")[0]
    name, v = CODEC.decode_record(rec.value)
    v = dict(v, command_id="f" * 64, job_id="j31-009")
    log.add(LogRecord("control", 0, 10_000, rec.timestamp, "j31-009", CODEC.encode_record(name, v)))
    f = failures(log)
    assert [(x.job_id, x.where) for x in f["commands"]] == [("j31-009", "control[0]@10000")]
    assert "extra" in f["commands"][0].what


def test_altered_manifest_and_commitment(tmp_path):
    log = chained_log(tmp_path)
    i = 5
    name, v = CODEC.decode_record(log.topic("manifests")[i].value)
    v["verdict"] = "EXTERNAL" if v["verdict"] != "EXTERNAL" else "INTERNAL"
    log.records["manifests"][i] = replace(log.topic("manifests")[i], value=CODEC.encode_record(name, v))
    j = 4
    name, c = CODEC.decode_record(log.topic("commitments")[j].value)
    c["snapshot"][0]["last_step"] = (c["snapshot"][0]["last_step"] or 0) + 1
    log.records["commitments"][j] = replace(log.topic("commitments")[j], value=CODEC.encode_record(name, c))
    f = failures(log)
    assert [(x.where, x.field) for x in f["manifests"]] == [(f"manifests[0]@{i}", "verdict")]
    assert [(x.where, x.field) for x in f["commitments"]] == [(f"commitments[0]@{j}", "snapshot.0.last_step")]


def test_reordered_input_fails_the_input_check(tmp_path):
    log = chained_log(tmp_path, batch=1)
    inp = log.records["input"]
    cohort_of = [CODEC.decode_record(r.value)[1] for r in inp]
    job = lambda b: CODEC.decode_event(b["events"][0]["value"])["job_id"]  # noqa: E731
    i = next(k for k in range(len(inp) - 1) if job(cohort_of[k]) == job(cohort_of[k + 1]))
    inp[i], inp[i + 1] = replace(inp[i], value=inp[i + 1].value), replace(inp[i + 1], value=inp[i].value)
    f = failures(log)
    assert f["input"] and {x.job_id for x in f["input"]} == {job(cohort_of[i])}
    assert "out of order" in f["input"][0].what


def test_archive_records_moved_in_the_file(tmp_path):
    log = chained_log(tmp_path)
    records = [r for t in ("events", "input", "control", "manifests", "commitments") for r in log.topic(t)]
    k = 10
    records[k], records[k + 1] = records[k + 1], records[k]
    path = tmp_path / "moved.avro"
    write_archive(str(path), records, {"topics": {t: t for t in ("events", "input", "control", "manifests",
                                                                  "commitments")}})
    f = failures(load_archive(str(path)))
    assert [x.where for x in f["chains"]] == [records[k + 1].where]


def test_clock_driven_halts_are_replayed_where_they_were_issued():
    log = simulate_pipeline(str(Path(SCENARIOS) / "06_guard_untraceable.jsonl"), grace_ms=2000, batch=2)
    halts = [CODEC.decode_record(r.value)[1] for r in log.topic("control")]
    assert any(h.get("reason") == "UNTRACEABLE_SOURCE" for h in halts)
    report = audit(log)
    assert report.passed, [f.line() for c in report.checks for f in c.failures]
    # a halt the log does not justify is extra
    rec = next(r for r in log.topic("control") if CODEC.decode_record(r.value)[1].get("reason") == "UNTRACEABLE_SOURCE")
    name, v = CODEC.decode_record(rec.value)
    v = dict(v, job_id="A", command_id="e" * 64, detail="seq 3 consumed 'nothing', which no CheckpointWritten recorded")
    log.add(LogRecord("control", 0, 999, rec.timestamp, "A", CODEC.encode_record(name, v)))
    f = failures(log)
    assert [(x.job_id, "extra" in x.what) for x in f["commands"]] == [("A", True)]


def _cohort_per_vector(names) -> list[dict]:
    """The events of the named vectors in one list, each vector's ids prefixed ``v<i>-`` so that
    it is a cohort of its own."""
    lines = []
    for i, n in enumerate(names):
        for x in (Path(SCENARIOS) / f"{n}.jsonl").read_text().splitlines():
            if x.strip():
                d = json.loads(x)
                for k in ("job_id", "cohort_id", "checkpoint_id", "source_checkpoint_id", "base_checkpoint_id",
                          "restored_checkpoint_id", "final_checkpoint_id"):
                    if d.get(k) is not None:
                        d[k] = f"v{i}-{d[k]}"
                lines.append(d)
    return lines


def test_split_by_cohort_gives_the_same_report(tmp_path, monkeypatch):
    # every clean vector in one log, its ids prefixed so each is a cohort of its own
    lines = _cohort_per_vector(v for v in VECTORS if not v.startswith(("07", "13")))
    src = tmp_path / "all.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in chain_events(lines)))
    merged = simulate_pipeline(str(src))
    assert len(A.split_by_cohort(merged, 3)) == 3
    one = audit(merged, workers=1)
    monkeypatch.setattr(A, "PARALLEL_MIN_EVENTS", 0)
    two = audit(merged, workers=3)
    assert one.passed and two.meta["processes"] == 3
    assert [c.as_dict() for c in two.checks] == [c.as_dict() for c in one.checks]
    assert two.final_state == one.final_state and recomputed_digest(two) == recomputed_digest(one)


def test_events_only_log_skips_what_needs_the_processor():
    report = audit(load(str(Path(SCENARIOS) / "01_seed_example.jsonl")))
    assert report.passed
    assert [c.name for c in report.checks if c.skipped] == ["input", "commands", "manifests", "commitments",
                                                                      "snapshots"]


def test_unreadable_sources_are_named(tmp_path):
    from streams.files.archive import ArchiveError
    from streams.files.jsonl import JsonlError

    binary = tmp_path / "x.bin"
    binary.write_bytes(b"\x8b\x00\xffnot text")
    with pytest.raises(JsonlError, match=r"x.bin:1: not UTF-8 text"):
        load(str(binary))
    fake = tmp_path / "fake.avro"
    fake.write_bytes(b"Obj\x01garbage")
    with pytest.raises(ArchiveError, match="not an Avro object container"):
        load(str(fake))


def test_an_archive_of_another_version_decodes_with_its_embedded_schemas(tmp_path):
    """A record written with a writer schema this version does not ship (here: a commitment
    without the v3 input position) decodes through the schemas the archive embeds."""
    from io import BytesIO

    from fastavro import schemaless_writer

    from streams.codec.schemas import SchemaInfo, default_schema_set
    from streams.audit.export import embedded_schemas

    log = chained_log(tmp_path)
    raw = dict(default_schema_set().reader("LineageCommitment").raw)
    raw["fields"] = [f for f in raw["fields"] if f["name"] not in ("input_partition", "input_offset")]
    raw["doc"] = "an older writer"
    old = SchemaInfo.build(raw)
    for i, rec in enumerate(log.topic("commitments")):
        _n, v = CODEC.decode_record(rec.value)
        buf = BytesIO()
        schemaless_writer(buf, old.parsed, {k: v[k] for k in v if k not in ("input_partition", "input_offset", "type")})
        log.records["commitments"][i] = replace(rec, value=b"\xc3\x01" + old.fingerprint + buf.getvalue())
    records = [r for t in ("events", "input", "control", "manifests", "commitments") for r in log.topic(t)]
    path = tmp_path / "older.avro"
    schemas = {**embedded_schemas(), old.fingerprint.hex(): {"name": old.fullname, "version": 0, "schema": old.schema_str}}
    write_archive(str(path), records, {"schemas": schemas, "topics": {t: t for t in ("events", "input", "control",
                                                                                     "manifests", "commitments")}})
    assert audit(load_archive(str(path))).passed
    # without the embedded schema those records are undecodable, and said to be
    write_archive(str(path), records, {"schemas": embedded_schemas(), "topics": {"commitments": "c"}})
    assert not audit(load_archive(str(path))).check("commitments").passed


def test_a_command_published_after_its_successor_fails(tmp_path):
    log = chained_log(tmp_path)
    control = log.topic("control")
    decoded = [CODEC.decode_record(r.value)[1] for r in control]
    k = next(i for i, v in enumerate(decoded) if v.get("supersedes")
             and any(w["command_id"] == v["supersedes"] for w in decoded[:i]))
    j = next(i for i, w in enumerate(decoded[:k]) if w["command_id"] == decoded[k]["supersedes"])
    # the superseded command comes out only after its successor (as a late re-decision would)
    moved = log.records["control"].pop(j)
    log.add(LogRecord("control", 0, 10_000, moved.timestamp, moved.key, moved.value))
    f = failures(log)
    assert [(x.field, x.where) for x in f["commands"]] == [("order", "control[0]@10000")]


def test_identical_redeliveries_after_later_seqs_audit_clean(tmp_path):
    """A job client resending its journal after a kill writes copies of events it had already
    sent, after later seqs: the fold drops them (SPEC §8) and the audit passes (issue 10)."""
    lines = [json.loads(x) for x in (Path(SCENARIOS) / "01_seed_example.jsonl").read_text().splitlines() if x.strip()]
    chained = list(chain_events(lines))
    a_events = [d for d in chained if d["job_id"] == "A"]
    cut = chained.index(a_events[8])
    resent = [d for d in a_events[3:8]]  # A's seqs 3..7 again, after its seq 8
    src = tmp_path / "redelivered.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in chained[:cut + 1] + resent + chained[cut + 1:]))
    report = audit(simulate_pipeline(str(src)))
    assert report.passed, [f.line() for c in report.checks for f in c.failures]


# ------------------------------------------------------------------ what the commitments check claims


def sign_control_records(log, key) -> None:
    """Sign the log's control records in place, as a worker with ``key`` would have."""
    from streams.codec import Codec
    from streams.signing import ControlSigner

    codec, signer = Codec(), ControlSigner(key)
    for rec in log.topic("control"):
        name, value = codec.decode_record(rec.value)
        rec.value = codec.encode_record(name, signer(name, value))


def _signed_log(tmp_path: Path):
    from streams.signing import CommitmentSigner, generate_key, key_id

    key = generate_key()
    log = chained_log(tmp_path, signer=CommitmentSigner(key))
    sign_control_records(log, key)
    return log, {key_id(key): key.public_key()}


def test_unsigned_commitments_without_trusted_keys_say_nothing_was_verified(tmp_path):
    """A worker without a signing key, an audit without --trusted-keys: the commitments
    recompute, and the verdict says the signatures were NOT checked — none signed — and never
    that they were verified (issue 11)."""
    chk = audit(chained_log(tmp_path)).check("commitments")
    n = chk.checked
    assert chk.passed and n > 10
    assert chk.summary == (f"PASS — {n} commitments recompute; signatures NOT checked (no --trusted-keys): "
                           f"0 signed, {n} unsigned")
    assert "verified" not in chk.summary and "is signed" not in A.TITLES["commitments"]
    d = chk.as_dict()
    assert d["summary"] == chk.summary and d["recompute"] == n
    assert d["signatures"] == {"trusted_keys": False, "signed": 0, "unsigned": n, "verified": 0, "rejected": 0,
                               "not_checked": 0, "rejected_by_reason": {},
                               "checkpoints_verified": 0, "checkpoints_rejected": 0}
    assert any("without a signature" in x for x in chk.notes)
    # the other checks have a verdict line too; only the commitments check has signatures
    other = audit(chained_log(tmp_path)).check("chains").as_dict()
    assert other["summary"].startswith("PASS — ") and "signatures" not in other


def test_signed_commitments_without_trusted_keys_are_not_checked(tmp_path):
    log, _keys = _signed_log(tmp_path)
    chk = audit(log).check("commitments")
    n = chk.checked
    assert chk.passed
    assert chk.summary == (f"PASS — {n} commitments recompute; signatures NOT checked (no --trusted-keys): "
                           f"{n} signed, 0 unsigned")
    sig = chk.as_dict()["signatures"]
    assert (sig["trusted_keys"], sig["signed"], sig["not_checked"], sig["verified"]) == (False, n, n, 0)
    assert any("signatures NOT checked" in x for x in chk.notes)


def test_signed_commitments_with_trusted_keys_are_verified(tmp_path):
    log, keys = _signed_log(tmp_path)
    chk = audit(log, trusted_keys=keys).check("commitments")
    n = chk.checked
    assert chk.passed and chk.summary == f"PASS — {n} commitments recompute, {n} signatures verified"
    sig = chk.as_dict()["signatures"]
    assert (sig["trusted_keys"], sig["signed"], sig["verified"], sig["not_checked"], sig["rejected"]) == \
        (True, n, n, 0, 0)
    assert not chk.notes
    # one signature stripped: counted as unsigned and rejected, the others still verified
    j = 3
    name, c = CODEC.decode_record(log.topic("commitments")[j].value)
    log.records["commitments"][j] = replace(log.topic("commitments")[j],
                                            value=CODEC.encode_record(name, {**c, "signature": None}))
    chk = audit(log, trusted_keys=keys).check("commitments")
    assert not chk.passed
    assert chk.summary == (f"FAIL — {n} commitments recompute; signatures: {n - 1} verified, 1 rejected "
                           f"(UNSIGNED 1) of {n}")
    sig = chk.as_dict()["signatures"]
    assert (sig["signed"], sig["unsigned"], sig["verified"], sig["rejected"]) == (n - 1, 1, n - 1, 1)
    # and an unknown key verifies nothing
    chk = audit(log, trusted_keys={}).check("commitments")
    assert chk.as_dict()["signatures"]["verified"] == 0 and "0 verified" in chk.summary


def test_the_signature_tally_survives_the_split_by_cohort(tmp_path, monkeypatch):
    from streams.signing import CommitmentSigner, generate_key, key_id

    lines = _cohort_per_vector(("14_pbt_cohort", "01_seed_example"))  # two cohorts
    src = tmp_path / "two.jsonl"
    src.write_text("".join(json.dumps(d) + "\n" for d in chain_events(lines)))
    key = generate_key()
    log = simulate_pipeline(str(src), CommitmentSigner(key))
    keys = {key_id(key): key.public_key()}
    assert len(A.split_by_cohort(log, 2)) == 2
    for trusted in (None, keys):
        one = audit(log, trusted_keys=trusted, workers=1).check("commitments")
        monkeypatch.setattr(A, "PARALLEL_MIN_EVENTS", 0)
        two = audit(log, trusted_keys=trusted, workers=2)
        monkeypatch.setattr(A, "PARALLEL_MIN_EVENTS", 20_000)
        assert two.meta["processes"] == 2
        assert two.check("commitments").as_dict() == one.as_dict()
        assert one.as_dict()["signatures"]["signed"] == one.checked > 0


def test_cli_says_what_was_established_about_signatures(tmp_path):
    from click.testing import CliRunner

    from streams.cli.main import cli
    from streams.signing import save_public_key

    log, keys = _signed_log(tmp_path)
    topics = ("events", "input", "control", "manifests", "commitments", "dlq")
    path = tmp_path / "log.avro"
    write_archive(str(path), [r for t in topics for r in log.topic(t)], {"topics": {t: f"lineage.{t}" for t in topics}})
    (kid, pub), = keys.items()
    keydir = tmp_path / "keys"
    keydir.mkdir()
    save_public_key(pub, keydir / f"processor-{kid}.pub")
    runner = CliRunner()
    r = runner.invoke(cli, ["audit", str(path)], env={"COLUMNS": "200", "TRAINTRACE_TRUSTED_KEYS": ""})
    assert r.exit_code == 0, r.output
    n = audit(log).check("commitments").checked
    assert (f"commitments: PASS — {n} commitments recompute; signatures NOT checked (no --trusted-keys): "
            f"{n} signed, 0 unsigned") in r.output
    assert "AUDIT PASSED (commitment signatures NOT checked: no --trusted-keys)" in r.output
    assert "signatures verified" not in r.output and "no signature was verified" in r.output
    r = runner.invoke(cli, ["audit", str(path), "--json"], env={"TRAINTRACE_TRUSTED_KEYS": ""})
    c = next(x for x in json.loads(r.stdout)["checks"] if x["name"] == "commitments")
    assert c["signatures"]["not_checked"] == n and c["signatures"]["verified"] == 0 and "NOT checked" in c["summary"]
    r = runner.invoke(cli, ["audit", str(path), "--trusted-keys", str(keydir)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert f"commitments: PASS — {n} commitments recompute, {n} signatures verified" in r.output
    assert "NOT checked" not in r.output and "AUDIT PASSED" in r.output
