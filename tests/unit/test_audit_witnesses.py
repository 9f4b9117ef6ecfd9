"""The audit's ``witnesses`` check (issue 28): with ``--witness`` keys and ``--witnesses-required N``
every cohort needs a checkpoint, a prefix of the log the audit recomputed, that N witnesses
validly cosigned; a checkpoint of another history signed by the processor's own key (a split
view), one longer than the log, a missing or a bad cosignature are each named. The witnesses here
are in-process cosignature keys; ``test_witness_litewitness.py`` runs a real one."""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.audit.run import audit
from streams.audit.witnessing import WitnessPolicy, WitnessPolicyError, open_with_keyring
from streams.cli.main import cli
from streams.codec import Codec
from streams.files.archive import write_archive
from streams.signing import Checkpoint, CommitmentSigner, ControlSigner, NoteKey, key_id, save_public_key, sign_checkpoint
from streams.signing.notes import COSIGNATURE_V1, NoteError, NoteSigner, parse_note
from streams.testing.simulate import simulate_pipeline

from .vectors import scenarios_dir

SEED = str(scenarios_dir() / "14_pbt_cohort.jsonl")
ORIGIN = "traintrace.example/witnessed"
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(3, 35)))
TRUSTED = {key_id(KEY): KEY.public_key()}
W = [NoteSigner(f"witness.example/w{i}", Ed25519PrivateKey.from_private_bytes(bytes([60 + i]) * 32), COSIGNATURE_V1)
     for i in range(3)]
CODEC = Codec()


@pytest.fixture(scope="module")
def log():
    return simulate_pipeline(SEED, CommitmentSigner(KEY).with_log_origin(ORIGIN), commit_every=2,
                             control_signer=ControlSigner(KEY))


def _newest(log) -> dict[str, tuple[int, dict]]:
    """cohort -> (index in the commitments topic, record) of its newest commitment."""
    out = {}
    for i, rec in enumerate(log.topic("commitments")):
        v = CODEC.decode_record(rec.value)[1]
        if v.get("checkpoint"):
            out[v["cohort_id"]] = (i, v)
    return out


def _cosign(note: str, witnesses) -> str:
    n = parse_note(note)
    return str(n.with_signatures("".join(w.sign(n.text.encode(), timestamp=1_800_000_000) for w in witnesses)))


def _witnessed(log, witnesses):
    """The log with each cohort's newest commitment re-published with the witnesses' cosignatures
    (what ``witness-client --publish`` does)."""
    out = copy.deepcopy(log)
    recs = out.topic("commitments")
    for i, v in _newest(log).values():
        recs[i].value = CODEC.encode_record("LineageCommitment", {**v, "checkpoint": _cosign(v["checkpoint"], witnesses)})
    return out


def _policy(n: int, saved=()):
    return WitnessPolicy(tuple(w.key for w in W[:2]), n, tuple(saved))


def _lines(check) -> str:
    return "\n".join(f.line() for f in check.failures + check.warnings)


def test_a_quorum_of_cosignatures_passes_and_a_missing_one_is_named(log):
    report = audit(_witnessed(log, W[:2]), trusted_keys=TRUSTED, witnesses=_policy(2))
    wit = report.check("witnesses")
    assert report.passed and wit.passed, _lines(wit)
    assert wit.counts["cohorts witnessed"] == len(_newest(log)) and wit.counts["cosignatures"] == 2 * len(_newest(log))
    assert "quorum 2 of 2" in wit.notes[-1]

    report = audit(_witnessed(log, W[:1]), trusted_keys=TRUSTED, witnesses=_policy(2))
    wit = report.check("witnesses")
    assert not report.passed and not wit.passed
    assert "the 2 witness cosignature(s) required" in _lines(wit) and "missing: witness.example/w1" in _lines(wit)
    assert report.check("commitments").passed  # the commitments themselves are fine
    # no cosignature at all: named too; a quorum of one of these passes
    assert "missing: witness.example/w0, witness.example/w1" in _lines(audit(log, trusted_keys=TRUSTED,
                                                                             witnesses=_policy(1)).check("witnesses"))
    assert audit(_witnessed(log, W[:1]), trusted_keys=TRUSTED, witnesses=_policy(1)).passed


def test_a_cosignature_by_someone_else_does_not_count_and_a_bad_one_fails(log):
    report = audit(_witnessed(log, [W[2]]), trusted_keys=TRUSTED, witnesses=_policy(1))
    assert "has 0;" in _lines(report.check("witnesses"))
    # a witness's name and key ID with a signature that does not verify
    bad = _witnessed(log, W[:1])
    for i, v in _newest(bad).values():
        n = parse_note(v["checkpoint"])
        sig = n.signatures[-1]
        forged = type(sig)(sig.name, sig.key_hash, sig.signature[:-1] + bytes([sig.signature[-1] ^ 1]))
        v["checkpoint"] = str(type(n)(n.text, (*n.signatures[:-1], forged)))
        bad.topic("commitments")[i].value = CODEC.encode_record("LineageCommitment", v)
    text = _lines(audit(bad, trusted_keys=TRUSTED, witnesses=_policy(1)).check("witnesses"))
    assert "signature of witness.example/w0" in text and "does not verify" in text, text


def test_a_second_history_signed_by_the_processor_is_named_a_split_view(log):
    cohort, (_i, v) = next(iter(_newest(log).items()))
    origin = f"{ORIGIN}/{cohort}"
    other = sign_checkpoint(Checkpoint(origin, v["log_size"], bytes(32)), NoteSigner(ORIGIN, KEY))
    mine = _cosign(v["checkpoint"], W[:2])
    report = audit(_witnessed(log, W[:2]), trusted_keys=TRUSTED,
                   witnesses=_policy(2, [("auditor-b.note", other), ("auditor-a.note", mine)]))
    wit = report.check("witnesses")
    assert not report.passed
    text = _lines(wit)
    assert f"split view of {origin}: 2 checkpoints of size {v['log_size']} with different roots" in text, text
    assert f"each signed by processor key {key_id(KEY)}" in text
    assert "at auditor-b.note: split view" in text and "not this log's history" in text
    # a longer history than the log: named; a warning only for a log cut with --until
    longer = sign_checkpoint(Checkpoint(origin, v["log_size"] + 1000, bytes(32)), NoteSigner(ORIGIN, KEY))
    wit = audit(log, trusted_keys=TRUSTED, witnesses=_policy(0, [("x.note", longer)])).check("witnesses")
    assert not wit.passed and "signed a longer history" in _lines(wit)
    wit = audit(log, trusted_keys=TRUSTED, cut=True, witnesses=_policy(0, [("x.note", longer)])).check("witnesses")
    assert wit.passed and wit.warned == 1


def test_saved_checkpoints_of_this_log_pass_and_strangers_are_refused(log):
    cohort, (_i, v) = next(iter(_newest(log).items()))
    wit = audit(log, trusted_keys=TRUSTED, witnesses=_policy(2, [("saved.note", _cosign(v["checkpoint"], W[:2]))]))
    assert wit.passed, _lines(wit.check("witnesses"))
    stranger = sign_checkpoint(Checkpoint(f"{ORIGIN}/{cohort}", 1, bytes(32)),
                               NoteSigner(ORIGIN, Ed25519PrivateKey.from_private_bytes(bytes(32))))
    other_log = sign_checkpoint(Checkpoint(f"{ORIGIN}/no-such-cohort", 1, bytes(32)), NoteSigner(ORIGIN, KEY))
    text = _lines(audit(log, trusted_keys=TRUSTED, witnesses=_policy(0, [("a.note", stranger), ("b.note", other_log)]))
                  .check("witnesses"))
    assert "at a.note: saved checkpoint not opened: not signed by a trusted processor key" in text, text
    assert "'traintrace.example/witnessed/no-such-cohort' is of no cohort of this log" in text
    with pytest.raises(NoteError):
        open_with_keyring(stranger, TRUSTED)


def test_the_policy_refuses_what_it_cannot_use():
    assert WitnessPolicy.parse([f"{W[0].key}@http://127.0.0.1:1"]).witnesses == (W[0].key,)
    with pytest.raises(WitnessPolicyError, match="not a cosignature/v1 key"):
        WitnessPolicy.parse([str(NoteKey.of("log.example", KEY))])
    with pytest.raises(WitnessPolicyError, match="a quorum of 2: 1 witness"):
        WitnessPolicy.parse([str(W[0].key)], 2)
    with pytest.raises(WitnessPolicyError, match="verifier key"):
        WitnessPolicy.parse(["nonsense"])
    assert not WitnessPolicy().active


def _cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_the_cli_audits_with_a_quorum_and_names_what_is_wrong_in_one_line(log, tmp_path):
    archive = tmp_path / "log.avro"
    witnessed = _witnessed(log, W[:2])
    write_archive(str(archive), [r for t in witnessed.records.values() for r in t], {"topics": {}})
    keys = tmp_path / "keys"
    keys.mkdir()
    save_public_key(KEY.public_key(), keys / "processor.pub")
    base = ["audit", str(archive), "--trusted-keys", str(keys)]
    r = _cli(*base, "--witness", str(W[0].key), "--witness", f"{W[1].key}@http://w1.example", "--witnesses-required", "2")
    assert r.exit_code == 0 and "AUDIT PASSED" in r.output and "witnesses" in r.output, r.output
    r = _cli(*base, "--witness", str(W[0].key), "--witness", str(W[2].key), "--witnesses-required", "2")
    assert r.exit_code == 1 and "missing: witness.example/w2" in r.output.replace("\n", ""), r.output
    notes = tmp_path / "notes"
    notes.mkdir()
    cohort, (_i, v) = next(iter(_newest(log).items()))
    (notes / f"{cohort}.note").write_text(sign_checkpoint(Checkpoint(f"{ORIGIN}/{cohort}", v["log_size"], bytes(32)),
                                                          NoteSigner(ORIGIN, KEY)))
    r = _cli(*base, "--checkpoint", str(notes), "--json")
    assert r.exit_code == 1
    import json

    wit = next(c for c in json.loads(r.output)["checks"] if c["name"] == "witnesses")
    assert wit["verdict"] == "FAIL" and any("split view" in f["what"] for f in wit["failures"])
    for args, says in (((str(archive), "--witness", str(W[0].key)), "need --trusted-keys"),
                       ((*base[1:], "--witness", str(W[0].key), "--witnesses-required", "2"), "--witnesses-required 2"),
                       ((*base[1:], "--witness", "bad"), "--witness: verifier key")):
        r = CliRunner().invoke(cli, ["audit", *args])
        assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output, (says, r.output)
        assert len([x for x in r.output.splitlines() if x.strip()]) == 1, r.output
