"""Our tlog-witness client against a real, independent witness: torchwood's litewitness v0.6.1
on loopback (tests/litewitness.py). The processor's checkpoints of a growing log are cosigned
with consistency proofs from our RFC 6962 code; a stale size is answered 409 and caught up; a
second history signed by the processor's own key (a split view) is refused; every cosignature
verifies with our verifier and with the Go one (transparency-dev/formats)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.core.merkle import consistency_proof, root
from streams.signing.notes import Checkpoint, NoteKey, NoteSigner, open_checkpoint, sign_checkpoint
from streams.witness import Witness, WitnessError, WitnessRefused, cosign, submit
from tests import go_verifier, litewitness

pytestmark = pytest.mark.skipif(litewitness.missing() is not None, reason=str(litewitness.missing()))

PREFIX = "traintrace.example/test"
ORIGIN = f"{PREFIX}/cohort-w"
LOG = NoteSigner(PREFIX, Ed25519PrivateKey.from_private_bytes(bytes([7]) * 32))
LEAVES = [f"event {i}".encode() for i in range(40)]


def _checkpoint(size: int, leaves=LEAVES) -> str:
    return sign_checkpoint(Checkpoint(ORIGIN, size, root(leaves[:size])), LOG)


def _proof(old: int, new: int) -> list[bytes]:
    return consistency_proof(LEAVES[:new], old)


@pytest.fixture(scope="module")
def witness():
    try:
        bindir = litewitness.build()
    except RuntimeError as exc:
        if any(s in str(exc) for s in ("dial tcp", "no such host", "proxy.golang.org", "i/o timeout")):
            pytest.skip(f"the Go module proxy is not reachable: {str(exc).splitlines()[-1]}")
        raise
    with litewitness.LiteWitness(bindir, "witness.example/lw1") as w:
        w.add_log(ORIGIN, str(LOG.key))
        yield w


def test_a_growing_log_is_cosigned_with_consistency_proofs(witness, tmp_path):
    w = Witness(witness.url, NoteKey.parse(witness.vkey))
    known = 0
    notes = []
    for size in (3, 10, 10, 27):
        note, known = cosign(w, _checkpoint(size), known, _proof)
        assert known == size
        _cp, opened = open_checkpoint(str(note), LOG.key, [w.key], origin=ORIGIN)
        assert opened.cosigners() == (w.key,) and opened.timestamp(w.key) > 1_700_000_000
        notes.append(str(note))
    # the Go verifier (x/mod + transparency-dev/formats) counts the witness's cosignature
    try:
        binary = go_verifier.build()
    except RuntimeError as exc:
        pytest.skip(str(exc).splitlines()[-1])
    f = tmp_path / "cosigned"
    f.write_text(notes[-1])
    rc, out = go_verifier.run(binary, "-log-key", str(LOG.key), "-origin", ORIGIN, "-witness", witness.vkey,
                              "-quorum", "1", str(f))
    assert rc == 0 and out.endswith("1 cosignature(s)"), out


def test_a_stale_size_gets_409_and_the_client_catches_up(witness):
    w = Witness(witness.url, NoteKey.parse(witness.vkey))
    cosign(w, _checkpoint(30), 0, _proof)  # brings the witness to 30 whatever ran before
    with pytest.raises(WitnessRefused) as exc:
        submit(w, _checkpoint(33), 0, [])
    assert exc.value.status == 409 and exc.value.body.strip() == "30"
    note, known = cosign(w, _checkpoint(33), 0, _proof)  # told 30, proves 30 -> 33
    assert known == 33 and len(note.signatures) == 2


def test_a_second_history_signed_by_the_processor_is_refused(witness):
    w = Witness(witness.url, NoteKey.parse(witness.vkey))
    _note, known = cosign(w, _checkpoint(35), 0, _proof)
    other = [b"forged"] + LEAVES[1:]
    split = sign_checkpoint(Checkpoint(ORIGIN, 38, root(other[:38])), LOG)
    with pytest.raises(WitnessRefused) as exc:  # no consistency proof from 35 to this 38 exists
        submit(w, split, known, consistency_proof(LEAVES[:38], known))
    assert exc.value.status == 422
    same_size = sign_checkpoint(Checkpoint(ORIGIN, 35, root(other[:35])), LOG)
    with pytest.raises(WitnessRefused) as exc:
        submit(w, same_size, known, [])
    assert exc.value.status in (409, 422)
    # and one signed by another key is no checkpoint of this log to the witness
    stranger = NoteSigner(PREFIX, Ed25519PrivateKey.from_private_bytes(bytes([8]) * 32))
    with pytest.raises(WitnessRefused) as exc:
        submit(w, sign_checkpoint(Checkpoint(ORIGIN, 36, root(LEAVES[:36])), stranger), known, _proof(known, 36))
    assert exc.value.status == 403


def test_a_witness_that_answers_nothing_is_one_error():
    w = Witness("http://127.0.0.1:9", NoteKey.parse("witness.example/x+e75f6532+BAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
                                                     .replace("witness.example/x", "witness.example/w1")))
    with pytest.raises(WitnessError, match="witness http://127.0.0.1:9"):
        submit(w, _checkpoint(3), 0, [], timeout=2)


# ---------------------------------------------------------------- traintrace witness-client


def _archive(tmp_path, name: str, lines: list[str], signer):
    from streams.files.archive import write_archive
    from streams.testing.simulate import simulate_pipeline

    src = tmp_path / f"{name}.jsonl"
    src.write_text("".join(lines))
    log = simulate_pipeline(str(src), signer, commit_every=2)
    path = tmp_path / f"{name}.avro"
    write_archive(str(path), [r for t in log.records.values() for r in t], {"topics": {}})
    return path


def test_the_witness_client_cosigns_each_cohorts_newest_checkpoint_and_names_a_split_view(witness, tmp_path):
    import json

    from click.testing import CliRunner

    from streams.cli.main import cli
    from streams.signing import CommitmentSigner
    from tests.unit.vectors import scenarios_dir

    prefix = "traintrace.example/wc"
    signer = CommitmentSigner(Ed25519PrivateKey.from_private_bytes(bytes([9]) * 32)).with_log_origin(prefix)
    lines = [x + "\n" for x in (scenarios_dir() / "01_seed_example.jsonl").read_text().splitlines() if x.strip()]
    short = _archive(tmp_path, "short", lines[: len(lines) // 2], signer)
    full = _archive(tmp_path, "full", lines, signer)
    witness.add_log(f"{prefix}/c1", str(signer.note_signer.key))
    state, out = tmp_path / "state.json", tmp_path / "notes"
    spec = f"{witness.vkey}@{witness.url}"

    def run(archive):
        r = CliRunner().invoke(cli, ["witness-client", str(archive), "--witness", spec, "--state", str(state),
                                     "--out", str(out), "--json"], catch_exceptions=False)
        return r.exit_code, json.loads(r.output) if r.output.startswith("{") else r.output

    rc, doc = run(short)
    assert rc == 0, doc
    first = doc["outcomes"][0]
    assert first["ok"] and first["detail"] == "cosigned (from size 0)", doc
    rc, doc = run(full)  # the log grew: cosigned with the consistency proof from the last size
    assert rc == 0 and doc["outcomes"][0]["detail"] == f"cosigned (from size {first['size']})", doc
    note = (out / "c1.note").read_text()
    w = NoteKey.parse(witness.vkey)
    cp, opened = open_checkpoint(note, signer.note_signer.key, [w], origin=f"{prefix}/c1")
    assert opened.cosigners() == (w,) and cp.size == doc["outcomes"][0]["size"]
    # a second history of c1 signed by the same processor key: the witness refuses, named
    other = [x.replace('"job_id": "B"', '"job_id": "X"') for x in lines]
    forked = _archive(tmp_path, "forked", other, signer)
    rc, doc = run(forked)
    assert rc == 1 and not doc["outcomes"][0]["ok"], doc
    assert doc["outcomes"][0]["detail"].startswith(("refused: HTTP 422", "refused: HTTP 409", "the witness cosigned size")), doc
