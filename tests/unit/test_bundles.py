"""Offline proof bundles (issue 28): ``traintrace prove --event J:S --bundle`` writes one file an
auditor checks without Kafka or traintrace — the event, its leaf and inclusion proof, the
commitment and its signed C2SP checkpoint with witness cosignatures. ``verify-proof`` checks all
of it (a witness quorum with ``--witness`` / ``--witnesses-required``); the Go verifier
(tests/go/tlogverify) checks the Merkle and signature parts. An altered bundle fails both."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.cli.main import cli
from streams.files.archive import write_archive
from streams.signing import CommitmentSigner, NoteKey, save_public_key
from streams.signing.notes import COSIGNATURE_V1, NoteSigner, parse_note
from streams.testing.simulate import simulate_pipeline
from tests import go_verifier

from .vectors import scenarios_dir

SEED = str(scenarios_dir() / "14_pbt_cohort.jsonl")
ORIGIN = "traintrace.example/bundles"
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(2, 34)))
WITNESSES = [NoteSigner(f"witness.example/w{i}", Ed25519PrivateKey.from_private_bytes(bytes([40 + i]) * 32),
                        COSIGNATURE_V1) for i in range(3)]


def _cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bundles")
    log = simulate_pipeline(SEED, CommitmentSigner(KEY).with_log_origin(ORIGIN), commit_every=2)
    archive = tmp / "log.avro"
    write_archive(str(archive), [r for t in log.records.values() for r in t], {"topics": {}})
    keys = tmp / "keys"
    keys.mkdir()
    save_public_key(KEY.public_key(), keys / "processor.pub")
    first = json.loads(next(x for x in open(SEED) if x.strip()))
    out = tmp / "bundle.json"
    r = _cli("prove", str(archive), "--event", f"{first['job_id']}:{first['seq']}", "--bundle", "-o", str(out))
    assert r.exit_code == 0, r.output
    return tmp, keys, out


def _cosigned(bundle: dict, witnesses) -> dict:
    """The bundle with the witnesses' cosignatures on its checkpoint (as a witness client
    stores them with the commitment)."""
    note = parse_note(bundle["checkpoint"])
    lines = "".join(w.sign(note.text.encode(), timestamp=1_800_000_000) for w in witnesses)
    cosigned = str(note.with_signatures(lines))
    return {**bundle, "checkpoint": cosigned, "commitment": {**bundle["commitment"], "checkpoint": cosigned}}


def _verify(path, keys, *extra: str):
    return _cli("verify-proof", str(path), "--trusted-keys", str(keys), *extra)


def test_a_bundle_is_the_proof_with_the_checkpoint_under_the_standard_names(setup):
    _tmp, keys, out = setup
    b = json.loads(out.read_text())
    assert b["bundle"] == "traintrace-bundle/1" and b["type"] == "event-inclusion"
    assert (b["leaf"], b["leaf_index"], b["inclusion_proof"]) == (b["leaf_hex"], b["index"], b["proof"])
    assert b["checkpoint"].startswith(f"{ORIGIN}/") and b["checkpoint"] == b["commitment"]["checkpoint"]
    r = _verify(out, keys)
    assert r.exit_code == 0 and "signed by the commitment's key" in r.output, r.output


def test_a_witness_quorum_is_required_and_a_missing_cosignature_named(setup):
    tmp, keys, out = setup
    b = _cosigned(json.loads(out.read_text()), WITNESSES[:2])
    p = tmp / "cosigned.json"
    p.write_text(json.dumps(b))
    wargs = [a for w in WITNESSES for a in ("--witness", str(w.key))]
    r = _verify(p, keys, *wargs, "--witnesses-required", "2")
    assert r.exit_code == 0 and "cosigned by 2 witness(es)" in r.output, r.output
    r = _verify(p, keys, *wargs, "--witnesses-required", "3")
    assert r.exit_code == 1 and "2 valid witness cosignature(s) of the 3 required" in r.output \
        and "witness.example/w2" in r.output, r.output
    # a cosignature of another root by a known witness: the bundle is refused, naming the witness
    forged = WITNESSES[0].sign(b"x\n1\n" + b"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n", timestamp=1_800_000_000)
    note = str(parse_note(json.loads(out.read_text())["checkpoint"]).with_signatures(forged))
    p.write_text(json.dumps({**b, "checkpoint": note, "commitment": {**b["commitment"], "checkpoint": note}}))
    r = _verify(p, keys, *wargs, "--witnesses-required", "1")
    assert r.exit_code == 1 and "witness.example/w0" in r.output, r.output


ALTERATIONS = {
    "another leaf": lambda b: {**b, "leaf": b["leaf"][:-2] + ("00" if b["leaf"][-2:] != "00" else "01")},
    "another index": lambda b: {**b, "leaf_index": b["leaf_index"] + 1},
    "a proof hash": lambda b: {**b, "inclusion_proof": ["00" * 32] + b["inclusion_proof"][1:]},
    "the checkpoint's root": lambda b: {**b, "checkpoint": b["checkpoint"].replace(
        b["checkpoint"].split("\n")[2], "A" * 43 + "=")},
}


@pytest.mark.parametrize("what", sorted(ALTERATIONS))
def test_an_altered_bundle_fails_verify_proof(setup, what):
    tmp, keys, out = setup
    p = tmp / f"altered-{what.replace(' ', '-')}.json"
    p.write_text(json.dumps(ALTERATIONS[what](json.loads(out.read_text()))))
    r = _verify(p, keys)
    assert r.exit_code == 1 and "INVALID" in r.output, (what, r.output)


@pytest.mark.skipif(go_verifier.go() is None, reason="no Go toolchain here")
def test_the_go_verifier_checks_the_bundle_and_refuses_altered_ones(setup):
    tmp, _keys, out = setup
    try:
        binary = go_verifier.build()
    except RuntimeError as exc:
        pytest.skip(str(exc).splitlines()[-1])
    b = _cosigned(json.loads(out.read_text()), WITNESSES[:1])
    p = tmp / "go-bundle.json"
    p.write_text(json.dumps(b))
    origin = b["checkpoint"].split("\n")[0]
    args = ["-log-key", str(NoteKey.of(ORIGIN, KEY)), "-origin", origin, "-witness", str(WITNESSES[0].key),
            "-quorum", "1", "-bundle"]
    rc, text = go_verifier.run(binary, *args, str(p))
    assert rc == 0 and text.endswith(f"leaf {b['leaf_index']} included"), text
    for what, alter in ALTERATIONS.items():
        p.write_text(json.dumps(alter(b)))
        rc, text = go_verifier.run(binary, *args, str(p))
        assert rc == 1 and text.startswith("FAIL"), (what, text)


def test_the_example_bundle_in_the_docs_verifies():
    """docs/examples/bundle-c1-C-3.json, the real bundle docs/keys-and-proofs.md points to."""
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "examples"
    r = _cli("verify-proof", str(docs / "bundle-c1-C-3.json"), "--trusted-keys", str(docs / "processor-example.pub"))
    assert r.exit_code == 0 and r.output.startswith("VALID") and "checkpoint traintrace.example/prod/c1 at 180" in r.output, r.output
