"""C2SP signed notes, checkpoints and cosignatures (streams/signing/notes.py) against the
vectors of the specifications and of their reference implementations: golang.org/x/mod's
``sumdb/note`` tests, the c2sp.org/signed-note example, and the signed checkpoints of
torchwood's litewitness test script (a sigsum log's, sizes 1, 3 and 5)."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.core.merkle import node_hash, verify_consistency
from streams.signing.notes import (
    COSIGNATURE_V1,
    ED25519,
    Checkpoint,
    NoteError,
    NoteKey,
    NoteSigner,
    open_checkpoint,
    open_note,
    parse_note,
    sign_checkpoint,
)

# golang.org/x/mod/sumdb/note/note_test.go
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
QUOTE = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
ENOCH_SIG = "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"

# c2sp.org/signed-note's example
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = ("This is an example message.\n\n— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAl"
             "TgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n")

# torchwood v0.6.1, cmd/litewitness/testdata/litewitness.txt: a sigsum log's checkpoints; leaves
# h_i = 0x2a || i || 30 zero bytes
SIGSUM_PUB = bytes.fromhex("ffdc2d4d98e4124d3feaf788c0c2f9abfd796083d1f0495437f302ec79cf100f")
SIGSUM_ORIGIN = "sigsum.org/v1/tree/" + hashlib.sha256(SIGSUM_PUB).hexdigest()
SIGSUM_CHECKPOINTS = {
    1: ("KgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "UgIom7fPZTqpxWWhyjWduBvTvGVqsokMbqTArsQilegKoFBJQjUFAmQ0+YeSPM3wfUQMFSzVnnNuWRTYrajXpNUbIQY="),
    3: ("RcCI1Nk56ZcSmIEfIn0SleqtV7uvrlXNccFx595Iwl0=",
        "UgIom2VbtIcdFbwFAy1n7s6IkAxIY6J/GQOTuZF2ORV39d75cbAj2aQYwyJre36kezNobZs4SUUdrcawfAB8WVrx6go="),
    5: ("QrtXrQZCCvpIgsSmOsah7HdICzMLLyDfxToMql9WTjY=",
        "UgIomw/EOJmWi0i1FQsOj+etB7F8IccFam/jgd6wzRns4QPVmyEZtdvl1U2KEmLOZ/ASRcWJi0tW90dJWAShei7sDww="),
}


def _sigsum_note(size: int) -> str:
    root, sig = SIGSUM_CHECKPOINTS[size]
    return f"{SIGSUM_ORIGIN}\n{size}\n{root}\n\n— {SIGSUM_ORIGIN} {sig}\n"


def test_x_mod_signer_key_gives_its_verifier_key_and_its_signature_byte_for_byte():
    signer = NoteSigner.parse(PETER_SKEY)
    assert str(signer.key) == PETER_VKEY
    assert signer.private_key_string() == PETER_SKEY
    assert signer.sign(QUOTE.encode()) == PETER_SIG
    assert str(NoteKey.parse(PETER_VKEY)) == PETER_VKEY


def test_a_note_with_two_signatures_opens_with_either_key_and_ignores_the_unknown_one():
    note = QUOTE + "\n" + PETER_SIG + ENOCH_SIG
    assert parse_note(note).text == QUOTE
    assert str(parse_note(note)) == note
    opened = open_note(note, [NoteKey.parse(ENOCH_VKEY)])
    assert [k.name for k in opened.verified] == ["EnochRoot"]
    both = open_note(note, [NoteKey.parse(PETER_VKEY), NoteKey.parse(ENOCH_VKEY)])
    assert [k.name for k in both.verified] == ["PeterNeumann", "EnochRoot"]


def test_the_specifications_example_verifies():
    assert open_note(SPEC_NOTE, [NoteKey.parse(SPEC_VKEY)]).note.text == "This is an example message.\n"


@pytest.mark.parametrize("vkey", [
    "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",  # x/mod: wrong length
    "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # x/mod: unknown algorithm
    "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # the key ID off by one
    "PeterNeumann+c74f20a3",
    "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10T",  # base64 cut
])
def test_bad_verifier_keys_are_refused(vkey):
    with pytest.raises(NoteError):
        NoteKey.parse(vkey)


def test_every_substring_of_the_verifier_key_is_refused():
    """x/mod's test: no proper prefix or suffix of a key string is a key."""
    for i in range(len(PETER_VKEY)):
        for cut in (PETER_VKEY[:i], PETER_VKEY[i + 1:]):
            with pytest.raises(NoteError):
                NoteKey.parse(cut)


def test_an_altered_note_fails_with_its_key_and_an_unsigned_one_is_refused():
    peter = NoteKey.parse(PETER_VKEY)
    with pytest.raises(NoteError, match="PeterNeumann.*does not verify"):
        open_note(QUOTE.replace("answer", "question") + "\n" + PETER_SIG, [peter])
    with pytest.raises(NoteError, match="no signature by a trusted key"):
        open_note(QUOTE + "\n" + ENOCH_SIG, [peter])
    for bad in (QUOTE, QUOTE + "\n", QUOTE + "\n" + PETER_SIG.rstrip("\n"), "a\x01b\n\n" + PETER_SIG,
                QUOTE + "\n- PeterNeumann AAAA\n"):
        with pytest.raises(NoteError):
            open_note(bad, [peter])


def test_the_sigsum_logs_checkpoints_from_litewitness_open_and_are_consistent():
    log = NoteKey(SIGSUM_ORIGIN, ED25519, SIGSUM_PUB)
    assert f"{log.key_hash:08x}" == "5202289b"
    h = [bytes([0x2A, i]) + bytes(30) for i in range(5)]
    expected = {1: h[0], 3: node_hash(node_hash(h[0], h[1]), h[2]),
                5: node_hash(node_hash(node_hash(h[0], h[1]), node_hash(h[2], h[3])), h[4])}
    roots = {}
    for size in SIGSUM_CHECKPOINTS:
        cp, opened = open_checkpoint(_sigsum_note(size), log, origin=SIGSUM_ORIGIN)
        assert (cp.origin, cp.size, opened.verified) == (SIGSUM_ORIGIN, size, (log,))
        assert cp.root == expected[size]  # the script's leaves are hashes already
        roots[size] = cp.root
    # the script's consistency proof 3 -> 5, checked by our RFC 6962 verifier
    assert verify_consistency(3, 5, roots[3], roots[5], [h[2], h[3], node_hash(h[0], h[1]), h[4]])
    with pytest.raises(NoteError, match="origin"):
        open_checkpoint(_sigsum_note(1), log, origin="example.com/other")


def test_a_checkpoint_round_trips_and_malformed_ones_are_refused():
    cp = Checkpoint("traintrace.example/c1/cohort-a", 42, bytes(range(32)), ("ext one",))
    assert Checkpoint.parse(cp.text()) == cp
    root = base64.b64encode(bytes(32)).decode()
    for text in (f"o\n01\n{root}\n", f"o\n-1\n{root}\n", f"o\n1\n{root}", "o\n1\nAAAA\n", f"\n1\n{root}\n",
                 f"o\n1\n{root}\n\n", "o\n1\n"):
        with pytest.raises(NoteError):
            Checkpoint.parse(text)


def test_a_witness_cosignature_verifies_by_its_timestamp_and_a_forged_time_fails():
    # the cosignature of c2sp.org/tlog-cosignature made with a fixed seed (a vector of ours)
    witness = NoteSigner("witness.example/w1", Ed25519PrivateKey.from_private_bytes(bytes(range(32))), COSIGNATURE_V1)
    assert str(witness.key) == "witness.example/w1+e75f6532+BAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
    text = _sigsum_note(5).split("\n\n")[0] + "\n"
    line = witness.sign(text.encode(), timestamp=1700000000)
    assert line == ("— witness.example/w1 519lMgAAAABlU/EAZHsTWpEidkv61eI4y8Oh0NS4WvGltY93+mXewbWszOQvRIAuTborSqs2"
                    "hJmqQGBTVCbk4TxErHkkQH/FWWl9Dg==\n")
    log = NoteKey(SIGSUM_ORIGIN, ED25519, SIGSUM_PUB)
    note = parse_note(_sigsum_note(5)).with_signatures(line)
    _cp, opened = open_checkpoint(str(note), log, [witness.key])
    assert opened.cosigners() == (witness.key,)
    assert opened.timestamp(witness.key) == 1700000000
    raw = bytearray(base64.b64decode(line.split()[-1]))
    raw[11] ^= 1  # the timestamp's last byte
    forged = parse_note(_sigsum_note(5)).with_signatures(f"— witness.example/w1 {base64.b64encode(raw).decode()}\n")
    with pytest.raises(NoteError, match="witness.example/w1"):
        open_checkpoint(str(forged), log, [witness.key])
    # a cosignature key is not a note key: the same public key under type 0x01 has another ID
    assert NoteKey.of("witness.example/w1", witness.private_key).key_hash != witness.key.key_hash


def test_a_processor_checkpoint_signs_and_opens():
    signer = NoteSigner("traintrace.example/c1", Ed25519PrivateKey.generate())
    cp = Checkpoint("traintrace.example/c1/cohort-a", 3, hashlib.sha256(b"x").digest())
    note = sign_checkpoint(cp, signer)
    assert open_checkpoint(note, signer.key)[0] == cp
    other = NoteSigner("traintrace.example/c1", Ed25519PrivateKey.generate())
    with pytest.raises(NoteError):
        open_checkpoint(note, other.key)


def test_the_examples_in_the_docs_verify():
    """docs/keys-and-proofs.md's checkpoint and cosigned checkpoint are real: they open with the
    verifier keys printed next to them."""
    import re
    from pathlib import Path

    from streams.signing.notes import open_checkpoint

    doc = (Path(__file__).resolve().parents[2] / "docs" / "keys-and-proofs.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```text\n(.*?)```", doc, re.S)
    notes = [b for b in blocks if b.startswith("traintrace.example/prod/c1\n")]
    log_key = NoteKey.parse(next(b for b in blocks if b.startswith("traintrace.example/prod+")).strip())
    witness = NoteKey.parse(next(b for b in blocks if b.startswith("witness.example/w1+18041f2a")).strip())
    assert len(notes) == 2
    cp, opened = open_checkpoint(notes[0], log_key)
    assert (cp.origin, cp.size) == ("traintrace.example/prod/c1", 180)
    cp2, opened2 = open_checkpoint(notes[1], log_key, [witness])
    assert cp2 == cp and opened2.cosigners() == (witness,) and opened2.timestamp(witness) == 1796000000
