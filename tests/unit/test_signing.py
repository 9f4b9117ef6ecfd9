"""Ed25519 signatures of LineageCommitments (streams.signing) and the referee's signer."""

from __future__ import annotations

import hashlib
import json
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.referee.referee import Referee
from streams.codec import Codec
from streams.core.commitment import build_commitment
from streams.core.decide import Lineage
from streams.core.events import parse_event
from streams import signing
from streams.signing import (
    BAD_SIGNATURE,
    DOMAIN,
    HEADS_MISMATCH,
    MALFORMED,
    OK,
    UNKNOWN_KEY,
    UNSIGNED,
    CommitmentSigner,
    SigningError,
    check_commitment,
    key_id,
    load_keyring,
    load_private_key,
    load_public_key,
    save_private_key,
    save_public_key,
    sign_commitment,
    signing_message,
    snapshot_digest,
    verify_commitment,
    write_keypair,
)

from .test_commitment import cohort_events, lineage_of
from .test_referee import routed_events, run
from .vectors import load_lines

TS = 1_760_000_999_000
# RFC 8032 §7.1 TEST 1: a fixed key, so expected bytes can be written down
RFC8032_SECRET = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")


@pytest.fixture(scope="module")
def key():
    return Ed25519PrivateKey.from_private_bytes(RFC8032_SECRET)


@pytest.fixture(scope="module")
def other_key():
    return Ed25519PrivateKey.from_private_bytes(bytes(range(32)))


@pytest.fixture(scope="module")
def record():
    return build_commitment("c1", lineage_of(cohort_events()), TS)


def trusted(*keys):
    return {key_id(k): k.public_key() for k in keys}


# ---------------------------------------------------------------------- keys

def test_key_id_is_the_first_16_hex_of_sha256_of_the_raw_public_key(key):
    assert signing.public_key_bytes(key) == RFC8032_PUBLIC
    assert key_id(key) == key_id(key.public_key()) == hashlib.sha256(RFC8032_PUBLIC).hexdigest()[:16]
    assert len(key_id(key)) == 16


def test_private_key_file_is_0600_and_round_trips(tmp_path, key):
    path = save_private_key(key, tmp_path / "k" / "processor.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert key_id(load_private_key(path)) == key_id(key)
    with pytest.raises(SigningError, match="exists"):
        save_private_key(key, path)
    save_private_key(key, path, overwrite=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_password_protected_private_key(tmp_path, key):
    path = save_private_key(key, tmp_path / "p.key", password=b"s3cret")
    assert b"ENCRYPTED" in path.read_bytes()
    assert key_id(load_private_key(path, b"s3cret")) == key_id(key)
    with pytest.raises(SigningError) as info:
        load_private_key(path)
    assert info.value.__cause__ is not None


def test_public_key_file_round_trips(tmp_path, key):
    path = save_public_key(key, tmp_path / "a.pub")
    assert path.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert key_id(load_public_key(path)) == key_id(key)


def test_unusable_key_files(tmp_path, key):
    priv = save_private_key(key, tmp_path / "processor.key")
    pub = save_public_key(key, tmp_path / "processor.pub")
    with pytest.raises(SigningError, match="private key"):
        load_public_key(priv)
    with pytest.raises(SigningError, match="not a readable PEM private key"):
        load_private_key(pub)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("hello")
    with pytest.raises(SigningError) as info:
        load_public_key(garbage)
    assert info.value.__cause__ is not None
    with pytest.raises(SigningError, match="cannot read"):
        load_private_key(tmp_path / "missing.key")
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ec_file = tmp_path / "ec.key"
    ec_file.write_bytes(ec_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    with pytest.raises(SigningError, match="not an Ed25519 private key"):
        load_private_key(ec_file)
    ec_pub = tmp_path / "ec.pub"
    ec_pub.write_bytes(ec_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(SigningError, match="not an Ed25519 public key"):
        load_public_key(ec_pub)


def test_write_keypair(tmp_path):
    pair = write_keypair(tmp_path / "keys")
    assert pair.private_path.name == "processor.key"
    assert pair.public_path.name == f"processor-{pair.key_id}.pub"
    assert stat.S_IMODE(pair.private_path.stat().st_mode) == 0o600
    assert key_id(load_private_key(pair.private_path)) == pair.key_id == key_id(load_public_key(pair.public_path))
    with pytest.raises(SigningError, match="exists"):
        write_keypair(tmp_path / "keys")
    again = write_keypair(tmp_path / "keys", overwrite=True)
    assert again.key_id != pair.key_id and pair.public_path.exists()  # the old .pub stays


# ---------------------------------------------------------------------- the message

def _parts(*parts) -> bytes:
    return b"".join(("" if p is None else str(p)).encode() + b"\x00" for p in parts)


def test_signing_message_is_the_documented_encoding(record):
    snap = json.dumps(record["snapshot"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(snap.encode()).hexdigest()
    assert snapshot_digest(record["snapshot"]) == digest
    assert signing_message(record) == _parts(
        "traintrace/LineageCommitment/v1", "c1", record["root"], record["tree_size"], record["log_root"],
        record["log_size"], TS, digest)
    assert DOMAIN == "traintrace/LineageCommitment/v1"
    # null log fields are empty parts (a v2 record), distinct from a log of size 0
    v2 = {**record, "log_root": None, "log_size": None}
    assert signing_message(v2) == _parts("traintrace/LineageCommitment/v1", "c1", record["root"],
                                         record["tree_size"], "", "", TS, digest)
    assert signing_message({k: v for k, v in v2.items() if k not in ("log_root", "log_size")}) == signing_message(v2)
    assert signing_message({**record, "log_size": 0}) != signing_message(v2)
    # signature, key_id and heads are not in it
    assert signing_message({**record, "signature": b"x", "key_id": "k", "heads": []}) == signing_message(record)


def test_snapshot_digest_of_a_known_snapshot():
    snap = [{"job_id": "jöb", "incarnation": 1, "last_step": None, "status": "RUNNING"}]
    text = '[{"incarnation":1,"job_id":"jöb","last_step":null,"status":"RUNNING"}]'
    assert snapshot_digest(snap) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert snapshot_digest([]) == hashlib.sha256(b"[]").hexdigest()


@pytest.mark.parametrize("change", [
    {"cohort_id": 1}, {"root": None}, {"tree_size": "4"}, {"tree_size": True}, {"ts": 1.5},
    {"log_size": "9"}, {"log_root": 5}, {"snapshot": None}, {"snapshot": [{"job_id": "A"}]},
    {"cohort_id": "c\x001"},
])
def test_signing_message_rejects_malformed_records(record, change):
    with pytest.raises(ValueError):
        signing_message({**record, **change})


# ---------------------------------------------------------------------- sign and verify

def test_sign_and_verify(record, key):
    signed = sign_commitment(record, key)
    assert record["signature"] is None and record["key_id"] is None  # not mutated
    assert len(signed["signature"]) == 64 and signed["key_id"] == key_id(key)
    assert {k: v for k, v in signed.items() if k not in ("signature", "key_id")} == \
        {k: v for k, v in record.items() if k not in ("signature", "key_id")}
    assert verify_commitment(signed, trusted(key)) == (True, OK)
    assert sign_commitment(record, key) == signed  # Ed25519 is deterministic
    # a hex signature (a JSON document's) verifies too
    assert verify_commitment({**signed, "signature": signed["signature"].hex()}, trusted(key)) == (True, OK)
    # raw public key bytes in the keyring
    assert verify_commitment(signed, {key_id(key): RFC8032_PUBLIC}) == (True, OK)


@pytest.mark.parametrize("field,value", [
    ("cohort_id", "c2"), ("root", "00" * 32), ("tree_size", 5), ("ts", TS + 1),
    ("log_root", "11" * 32), ("log_size", 1), ("log_size", None), ("log_root", None),
])
def test_tampering_with_one_field_breaks_the_signature(record, key, field, value):
    signed = sign_commitment(record, key)
    assert verify_commitment({**signed, field: value}, trusted(key)) == (False, BAD_SIGNATURE)


def test_tampering_with_the_snapshot_breaks_the_signature(record, key):
    signed = sign_commitment(record, key)
    snap = [dict(e) for e in signed["snapshot"]]
    snap[1]["status"] = "FINISHED"
    assert verify_commitment({**signed, "snapshot": snap}, trusted(key)) == (False, BAD_SIGNATURE)
    assert verify_commitment({**signed, "snapshot": snap[:-1]}, trusted(key)) == (False, BAD_SIGNATURE)


def test_tampering_with_the_heads_is_caught_through_the_root(record, key):
    signed = sign_commitment(record, key)
    heads = [dict(h) for h in signed["heads"]]
    heads[0]["seq"] += 1
    ok, reason = verify_commitment({**signed, "heads": heads}, trusted(key))
    assert (ok, reason) == (False, HEADS_MISMATCH)


def test_tampering_with_the_signature(record, key, other_key):
    signed = sign_commitment(record, key)
    flipped = bytes([signed["signature"][0] ^ 1]) + signed["signature"][1:]
    assert verify_commitment({**signed, "signature": flipped}, trusted(key)) == (False, BAD_SIGNATURE)
    assert verify_commitment({**signed, "signature": signed["signature"][:63]}, trusted(key)) == (False, BAD_SIGNATURE)
    # another trusted key's signature under this key id
    forged = {**sign_commitment(record, other_key), "key_id": key_id(key)}
    assert verify_commitment(forged, trusted(key, other_key)) == (False, BAD_SIGNATURE)


def test_unsigned_unknown_key_malformed(record, key, other_key):
    assert verify_commitment(record, trusted(key)) == (False, UNSIGNED)
    signed = sign_commitment(record, key)
    assert verify_commitment({**signed, "key_id": None}, trusted(key)) == (False, UNSIGNED)
    assert verify_commitment(signed, trusted(other_key)) == (False, UNKNOWN_KEY)
    assert verify_commitment(signed, {}) == (False, UNKNOWN_KEY)
    assert verify_commitment({**signed, "signature": "zz"}, trusted(key)) == (False, MALFORMED)
    assert verify_commitment({**signed, "ts": "soon"}, trusted(key)) == (False, MALFORMED)
    assert verify_commitment("not a record", trusted(key)) == (False, MALFORMED)
    chk = check_commitment(signed, trusted(other_key))
    assert chk.key_id == key_id(key) and key_id(key) in chk.detail and str(chk).startswith("UNKNOWN_KEY: ")


def test_a_signed_record_survives_avro(record, key):
    codec = Codec()
    signed = sign_commitment(record, key)
    name, back = codec.decode_record(codec.encode_record("LineageCommitment", signed))
    assert name == "LineageCommitment"
    assert back["signature"] == signed["signature"] and back["log_root"] == record["log_root"]
    assert verify_commitment(back, trusted(key)) == (True, OK)


# ---------------------------------------------------------------------- keyrings and rotation

def test_rotation_two_keys_in_the_keyring(tmp_path, record):
    ring = tmp_path / "keyring"
    old = write_keypair(tmp_path / "old")
    old_signed = sign_commitment(record, load_private_key(old.private_path))
    new = write_keypair(tmp_path / "new")
    later = build_commitment("c1", lineage_of(cohort_events()[:-1]), TS + 1)
    new_signed = sign_commitment(later, load_private_key(new.private_path))
    ring.mkdir()
    for p in (old.public_path, new.public_path):
        (ring / p.name).write_bytes(p.read_bytes())
    (ring / "README").write_text("not a key")  # ignored: only *.pub / *.pem
    keys = load_keyring(ring)
    assert set(keys) == {old.key_id, new.key_id}
    assert verify_commitment(old_signed, keys) == (True, OK)
    assert verify_commitment(new_signed, keys) == (True, OK)
    # an auditor who dropped the old key can no longer check the old commitments
    only_new = load_keyring([new.public_path])
    assert verify_commitment(old_signed, only_new) == (False, UNKNOWN_KEY)
    assert verify_commitment(new_signed, only_new) == (True, OK)
    # a directory and files together
    assert set(load_keyring([ring, new.public_path])) == set(keys)


def test_keyring_errors(tmp_path, key):
    with pytest.raises(SigningError, match="no public key"):
        load_keyring(tmp_path)
    with pytest.raises(SigningError, match="does not exist"):
        load_keyring(tmp_path / "nowhere")
    save_private_key(key, tmp_path / "leaked.pem")
    with pytest.raises(SigningError, match="private key"):
        load_keyring(tmp_path)


def test_keygen_directory_as_keyring_skips_the_private_key(tmp_path):
    pair = write_keypair(tmp_path)
    assert list(load_keyring(tmp_path)) == [pair.key_id]


# ---------------------------------------------------------------------- the referee signs

def test_the_referee_signs_every_commitment(key):
    signer = CommitmentSigner(key)
    assert signer.key_id == key_id(key)
    ref = Referee(signer=signer)
    lines = load_lines("01_seed_example")
    coms = []
    pairs = list(routed_events(lines))
    for i in range(0, len(pairs), 30):
        run(ref, pairs[i:i + 30], t0=1_000 + i)
        coms.extend(ref.commitments(1_000 + i + 30))
    assert len(coms) >= 3
    for em in coms:
        assert em.record == "LineageCommitment"
        assert em.value["key_id"] == key_id(key)
        assert verify_commitment(em.value, trusted(key)) == (True, OK)
        assert em.value["log_size"] and em.value["log_root"]
    # what was signed is what an unsigned referee commits to
    plain = Referee()
    plain_coms = []
    for i in range(0, len(pairs), 30):
        run(plain, pairs[i:i + 30], t0=1_000 + i)
        plain_coms.extend(plain.commitments(1_000 + i + 30))
    assert [{**em.value, "signature": None, "key_id": None} for em in coms] == [em.value for em in plain_coms]
    assert all(em.value["signature"] is None for em in plain_coms)


def test_a_replaying_referee_signs_the_same_bytes(key):
    lines = load_lines("01_seed_example")
    out = []
    for _ in range(2):
        ref = Referee(signer=CommitmentSigner(key))
        run(ref, routed_events(lines), publish=False)
        out.append([em.value for em in ref.commitments(5_000, force=True)])
    assert out[0] == out[1] and out[0][0]["signature"]


def test_signer_from_file(tmp_path, key):
    path = save_private_key(key, tmp_path / "processor.key")
    signer = CommitmentSigner.from_file(path)
    assert signer.key_id == key_id(key) and key_id(signer.public_key) == key_id(key)
    lin = Lineage()
    lin.apply(parse_event({"type": "JobStarted", "job_id": "A", "seq": 0, "incarnation": 0, "ts": 1,
                           "cohort_id": "c", "base_model": "m"}))
    assert verify_commitment(signer(build_commitment("c", lin, 2)), trusted(key)) == (True, OK)
    with pytest.raises(TypeError):
        CommitmentSigner(key.public_key())


# ---------------------------------------------------------------------- the worker's key

def test_worker_refuses_an_unusable_signing_key_before_starting(tmp_path):
    from click.testing import CliRunner

    from streams.cli.main import cli

    bad = tmp_path / "processor.key"
    bad.write_text("not a key")
    r = CliRunner().invoke(cli, ["worker", "--signing-key", str(bad), "--bootstrap", "127.0.0.1:1"])
    assert r.exit_code == 2 and "not a readable PEM private key" in r.output
    r = CliRunner(env={"TRAINTRACE_SIGNING_KEY": str(tmp_path / "missing.key")}).invoke(
        cli, ["worker", "--bootstrap", "127.0.0.1:1"])
    assert r.exit_code == 2 and "cannot read key file" in r.output


def test_worker_settings_make_the_referee_sign(tmp_path, key):
    pytest.importorskip("faust")
    from streams.worker.faust_app import _signers
    from streams.worker.settings import WorkerSettings

    assert _signers(WorkerSettings(bootstrap="x"))[0] is None
    path = save_private_key(key, tmp_path / "processor.key")
    signer = _signers(WorkerSettings(bootstrap="x", signing_key=path))[0]
    assert signer.key_id == key_id(key)
