"""Commitments carry their cohort's fold log as a signed C2SP checkpoint (schemas v10, issue 28):
the signer writes it, ``check_checkpoint`` reads it back against the record, the audit verifies
every one and names a forged one, and the Go verifier (x/mod, transparency-dev) opens them."""

from __future__ import annotations

import copy

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.audit.run import audit
from streams.codec import Codec
from streams.signing import (
    Checkpoint,
    CommitmentSigner,
    NoteKey,
    NoteSigner,
    check_checkpoint,
    checkpoint_problem,
    key_id,
    sign_checkpoint,
)
from streams.signing.notes import NoteError
from streams.testing.simulate import simulate_pipeline
from tests import go_verifier

from .vectors import scenarios_dir

SEED = str(scenarios_dir() / "14_pbt_cohort.jsonl")
ORIGIN = "traintrace.example/test"
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
CODEC = Codec()


@pytest.fixture(scope="module")
def log():
    return simulate_pipeline(SEED, CommitmentSigner(KEY).with_log_origin(ORIGIN), commit_every=2)


def _commitments(log) -> list[dict]:
    return [CODEC.decode_record(r.value)[1] for r in log.topic("commitments")]


def test_every_signed_commitment_carries_its_fold_log_as_a_checkpoint(log):
    coms = _commitments(log)
    assert coms and all(c["checkpoint"] for c in coms if c["log_root"] is not None)
    note_key = NoteKey.of(ORIGIN, KEY)
    for c in coms:
        cp, opened = check_checkpoint(c, note_key, ORIGIN)
        assert (cp.origin, cp.size, cp.root.hex()) == (f"{ORIGIN}/{c['cohort_id']}", c["log_size"], c["log_root"])
        assert opened.verified == (note_key,)
        assert checkpoint_problem(c, {key_id(KEY): KEY.public_key()}) is None


def test_a_checkpoint_that_says_another_log_is_named():
    record = {"cohort_id": "c1", "log_root": "ab" * 32, "log_size": 5, "key_id": key_id(KEY)}
    signer = NoteSigner(ORIGIN, KEY)
    trusted = {key_id(KEY): KEY.public_key()}
    for cp, what in ((Checkpoint(f"{ORIGIN}/c1", 6, bytes.fromhex("ab" * 32)), "size 6"),
                     (Checkpoint(f"{ORIGIN}/c1", 5, bytes(32)), "root 00000000"),
                     (Checkpoint(f"{ORIGIN}/c2", 5, bytes.fromhex("ab" * 32)), "origin")):
        bad = {**record, "checkpoint": sign_checkpoint(cp, signer)}
        assert what in (checkpoint_problem(bad, trusted) or ""), what
        with pytest.raises(NoteError):
            check_checkpoint(bad, signer.key, ORIGIN)
    other = Ed25519PrivateKey.from_private_bytes(bytes(32))
    forged = {**record, "checkpoint": sign_checkpoint(Checkpoint(f"{ORIGIN}/c1", 5, bytes.fromhex("ab" * 32)),
                                                      NoteSigner(ORIGIN, other))}
    assert "not signed by key" in checkpoint_problem(forged, trusted)


def test_the_audit_verifies_every_checkpoint_and_names_a_forged_one(log):
    trusted = {key_id(KEY): KEY.public_key()}
    report = audit(log, trusted_keys=trusted)  # (control goes unsigned here: only commitments matter)
    assert report.check("commitments").passed, report.check("commitments").failures
    sig = report.check("commitments").as_dict()["signatures"]
    assert sig["checkpoints_verified"] == sig["verified"] == len(_commitments(log)) and not sig["checkpoints_rejected"]
    assert "checkpoint notes verified" in report.check("commitments").summary
    # a second history's checkpoint signed by the processor's own key (a split view): the
    # commitment's signature still verifies, its checkpoint does not say its fold log
    forged = copy.deepcopy(log)
    rec = forged.topic("commitments")[3]
    v = CODEC.decode_record(rec.value)[1]
    v["checkpoint"] = sign_checkpoint(Checkpoint(f"{ORIGIN}/{v['cohort_id']}", v["log_size"], bytes(32)),
                                      NoteSigner(ORIGIN, KEY))
    rec.value = CODEC.encode_record("LineageCommitment", v)
    report = audit(forged, trusted_keys=trusted)
    failures = report.check("commitments").failures
    assert failures and "checkpoint rejected" in str(failures[0]), failures


@pytest.mark.skipif(go_verifier.go() is None, reason="no Go toolchain here")
def test_the_go_verifier_opens_the_processors_checkpoints(log, tmp_path):
    try:
        binary = go_verifier.build()
    except RuntimeError as exc:
        pytest.skip(str(exc).splitlines()[-1])
    vkey = str(NoteKey.of(ORIGIN, KEY))
    for i, c in enumerate(_commitments(log)[:6]):
        f = tmp_path / f"cp{i}"
        f.write_text(c["checkpoint"])
        rc, out = go_verifier.run(binary, "-log-key", vkey, "-origin", f"{ORIGIN}/{c['cohort_id']}", str(f))
        assert rc == 0 and out.startswith(f"OK checkpoint {ORIGIN}/{c['cohort_id']} size {c['log_size']}"), out


def test_log_origin_none_signs_without_checkpoint_notes(tmp_path, monkeypatch):
    """``--log-origin none``: commitments signed as before, no checkpoint note (what the cost
    benchmark compares against)."""
    from streams.signing import save_private_key
    from streams.worker.faust_app import _signers
    from streams.worker.settings import WorkerSettings

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k:1")
    key = save_private_key(KEY, tmp_path / "processor.key")
    record = {"cohort_id": "c1", "root": "ab" * 32, "tree_size": 1, "log_root": "cd" * 32, "log_size": 3,
              "ts": 1, "snapshot": []}
    for origin, note in (("None", False), ("traintrace.example/x/", True)):
        signer, _control = _signers(WorkerSettings("k:1", signing_key=key, log_origin=origin))
        signed = signer(record)
        assert signed["signature"] and bool(signed.get("checkpoint")) is note, origin
    assert WorkerSettings("k:1", log_origin="none").log_origin == "none"
