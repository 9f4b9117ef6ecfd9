"""Merkle proof documents over a traintrace log (streams.audit.proofs) and the CLI
(`traintrace prove`, `traintrace verify-proof`, `traintrace keygen`)."""

from __future__ import annotations

import copy
import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.files.archive import write_archive
from streams.cli.main import cli
from streams.codec import Codec
from streams.core import merkle
from streams.core.commitment import head_leaf
from streams.audit.log import AuditLog, load
from streams.audit.proofs import (
    CONSISTENCY,
    EVENT,
    HEAD,
    ProofError,
    commitment_from_json,
    prove_consistency,
    prove_event,
    prove_head,
    recompute_commitment,
    replay,
    verify_proof,
)
from streams.signing import CommitmentSigner, key_id, load_private_key, save_public_key, verify_commitment
from streams.testing.simulate import simulate_pipeline

from .vectors import scenarios_dir

SEED = str(scenarios_dir() / "01_seed_example.jsonl")
CODEC = Codec()


@pytest.fixture(scope="module")
def key():
    return Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))


@pytest.fixture(scope="module")
def trusted(key):
    return {key_id(key): key.public_key()}


def pipeline_log(path: str, signer=None, batch: int = 7, commit_every: int = 3) -> AuditLog:
    """What the live pipeline leaves on its topics for the events of ``path``, without Kafka
    (streams.testing.simulate): EventBatch records of at most ``batch`` events on ``input``, the
    referee folding each at its timestamp, commitments after every ``commit_every`` records."""
    return simulate_pipeline(path, signer, batch=batch, commit_every=commit_every)


@pytest.fixture(scope="module")
def signed_log(key):
    return pipeline_log(SEED, CommitmentSigner(key))


@pytest.fixture(scope="module")
def source(signed_log):
    return replay(signed_log)


@pytest.fixture(scope="module")
def plain_source():
    return replay(load(SEED))


# ---------------------------------------------------------------------- the replay

def test_the_replay_reproduces_every_published_commitment(source):
    coms = source.commitments["c1"]
    assert len(coms) >= 5
    sizes = [c["log_size"] for c in coms]
    assert sizes == sorted(sizes) and sizes[-1] == source.cohort("c1").size
    for com in coms:
        again = recompute_commitment(source, "c1", com["log_size"], com["ts"])
        # the input position is the referee's (the audit checks it); the rest is the fold's
        # (the signature, the key id and the checkpoint note are the signer's)
        assert {**again, "checkpoint": None} == {**com, "signature": None, "key_id": None, "input_partition": None,
                                                 "input_offset": None, "checkpoint": None}


def test_the_fold_log_is_every_accepted_event_in_fold_order(plain_source):
    c = plain_source.cohort("c1")
    lines = [json.loads(x) for x in Path(SEED).read_text().splitlines() if x.strip()]
    assert c.size == len(lines) == 180  # the seed example has neither duplicates nor refusals
    assert c.leaves == [head_leaf(d["job_id"], d["seq"], d.get("hash")) for d in lines]
    assert c.lineage.log.root() == merkle.root(c.leaves) == c.root()
    assert recompute_commitment(plain_source, "c1")["log_root"] == c.root().hex()


def test_recompute_in_the_middle_of_the_log(plain_source):
    c = plain_source.cohort("c1")
    com = recompute_commitment(plain_source, "c1", 50)
    assert com["log_size"] == 50 and com["log_root"] == merkle.root(c.leaves[:50]).hex()
    assert com["ts"] == c.entries[49].ts
    assert recompute_commitment(plain_source, "c1", 0)["heads"] == []
    with pytest.raises(ProofError, match="out of range"):
        recompute_commitment(plain_source, "c1", 181)
    with pytest.raises(ProofError, match="no cohort"):
        recompute_commitment(plain_source, "nope")


def test_duplicates_are_folded_but_not_logged():
    src = replay(load(str(scenarios_dir() / "13_duplicates.jsonl")))
    for c in src.cohorts.values():
        accepted = sum(1 for *_x, acc in c.folded if acc)
        assert accepted == c.size
    assert sum(len(c.folded) for c in src.cohorts.values()) > sum(c.size for c in src.cohorts.values())


# ---------------------------------------------------------------------- head proofs

def test_head_proof_against_the_latest_signed_commitment(source, trusted):
    doc = prove_head(source, "B")
    latest = source.latest_commitment("c1")
    assert doc["type"] == HEAD and doc["cohort"] == "c1" and doc["commitment_source"] == "published"
    assert doc["root"] == latest["root"] and doc["tree_size"] == latest["tree_size"] == 3
    assert doc["leaf"] == next(h for h in latest["heads"] if h["job_id"] == "B")
    assert commitment_from_json(doc["commitment"]) == latest
    doc = json.loads(json.dumps(doc))  # a document survives JSON
    v = verify_proof(doc)
    assert v.ok and v.reason.startswith("VALID head-inclusion") and "not checked" in v.reason
    v = verify_proof(doc, trusted)
    assert v.ok, v.reason
    assert v.commitments == [{"which": "commitment", "source": "published", "ts": latest["ts"],
                              "key_id": latest["key_id"], "signature": "OK"}]


def test_head_proof_recomputed_when_nothing_was_published(plain_source, trusted):
    doc = prove_head(plain_source, "A")
    assert doc["commitment_source"] == "recomputed" and doc["commitment"]["signature"] is None
    assert verify_proof(doc).ok
    v = verify_proof(doc, trusted)
    assert not v.ok and "UNSIGNED" in v.reason


def test_head_proof_errors(source):
    with pytest.raises(ProofError, match="no event"):
        prove_head(source, "Z")
    with pytest.raises(ProofError, match="no cohort"):
        prove_head(source, "A", cohort="c9")


# ---------------------------------------------------------------------- event proofs

def test_every_event_has_an_inclusion_proof(source):
    c = source.cohort("c1")
    for e in c.entries:
        doc = prove_event(source, e.job_id, e.seq, size=c.size)
        assert doc["index"] == e.index and doc["tree_size"] == c.size
        v = verify_proof(doc)
        assert v.ok, (e, v.reason)


def test_event_proof_defaults_to_the_latest_commitment(source, trusted):
    latest = source.latest_commitment("c1")
    doc = prove_event(source, "A", 3)
    assert doc["type"] == EVENT and doc["tree_size"] == latest["log_size"]
    assert doc["root"] == latest["log_root"] and doc["commitment_source"] == "published"
    assert doc["origin"]["partition"] == 0
    assert verify_proof(doc, trusted).ok


def test_event_proof_at_an_earlier_published_size(source, trusted):
    earlier = source.commitments["c1"][1]
    entry = source.cohort("c1").entries[earlier["log_size"] - 1]
    doc = prove_event(source, entry.job_id, entry.seq, size=earlier["log_size"])
    assert doc["commitment_source"] == "published" and doc["commitment"]["ts"] == earlier["ts"]
    assert verify_proof(doc, trusted).ok
    # the next event is not in that log
    nxt = source.cohort("c1").entries[earlier["log_size"]]
    with pytest.raises(ProofError, match="not in its fold log of size"):
        prove_event(source, nxt.job_id, nxt.seq, size=earlier["log_size"])


def test_event_proof_errors(source):
    with pytest.raises(ProofError, match="no accepted event"):
        prove_event(source, "A", 10_000)
    with pytest.raises(ProofError, match="out of range"):
        prove_event(source, "A", 1, size=10_000)


# ---------------------------------------------------------------------- consistency proofs

def test_consistency_between_every_pair_of_published_commitments(source, trusted):
    coms = source.commitments["c1"]
    for old in coms[::2]:
        for new in coms[::3]:
            if old["log_size"] > new["log_size"]:
                continue
            doc = prove_consistency(source, "c1", old["log_size"], new["log_size"])
            assert doc["type"] == CONSISTENCY
            assert doc["old_root"] == old["log_root"] and doc["new_root"] == new["log_root"]
            assert doc["commitment_sources"] == {"old": "published", "new": "published"}
            v = verify_proof(doc, trusted)
            assert v.ok, v.reason
            assert [c["which"] for c in v.commitments] == ["old", "new"]


def test_consistency_at_unpublished_sizes(plain_source):
    doc = prove_consistency(plain_source, "c1", 17, 99)
    assert doc["commitment_sources"] == {"old": "recomputed", "new": "recomputed"}
    assert verify_proof(doc).ok
    assert verify_proof(prove_consistency(plain_source, "c1", 0)).ok
    assert verify_proof(prove_consistency(plain_source, "c1", 180, 180)).ok
    with pytest.raises(ProofError):
        prove_consistency(plain_source, "c1", 99, 17)


# ---------------------------------------------------------------------- tampering

def _flip(hexstr: str) -> str:
    return ("0" if hexstr[0] != "0" else "1") + hexstr[1:]


@pytest.mark.parametrize("make", ["head", "event", "consistency"])
def test_a_tampered_proof_hash_is_invalid(source, make):
    doc = {"head": lambda: prove_head(source, "C"),
           "event": lambda: prove_event(source, "B", 7),
           "consistency": lambda: prove_consistency(source, "c1", 40, source.cohort("c1").size)}[make]()
    assert doc["proof"]
    assert verify_proof(doc).ok
    for i in range(len(doc["proof"])):
        bad = copy.deepcopy(doc)
        bad["proof"][i] = _flip(bad["proof"][i])
        v = verify_proof(bad)
        assert not v.ok and v.reason.startswith("INVALID: "), (make, i)
    for change in ({"proof": doc["proof"][:-1]}, {"proof": doc["proof"] + [doc["proof"][0]]},
                   {"proof": ["zz"]}, {"proof": None}, {"format": "other"}, {"type": "nonsense"},
                   {"cohort": "c2"}):
        assert not verify_proof({**doc, **change}).ok, (make, change)


def test_tampered_leaves_roots_and_commitments(source, trusted):
    doc = prove_event(source, "B", 7)
    assert not verify_proof({**doc, "event": {**doc["event"], "seq": 8}}).ok
    assert not verify_proof({**doc, "event": {**doc["event"], "hash": "ab" * 32}}).ok
    assert not verify_proof({**doc, "index": doc["index"] + 1}).ok
    assert not verify_proof({**doc, "tree_size": doc["tree_size"] + 1}).ok
    assert not verify_proof({**doc, "root": _flip(doc["root"])}).ok
    # a proof moved onto another commitment
    other = commitment_from_json(doc["commitment"])
    earlier = {**source.commitments["c1"][0]}
    moved = {**doc, "commitment": {**doc["commitment"], **{k: earlier[k] for k in ("log_root", "log_size")}}}
    v = verify_proof(moved)
    assert not v.ok and "log_root" in v.reason
    # the commitment's ts changed: the Merkle part still holds, the signature does not
    late = copy.deepcopy(doc)
    late["commitment"]["ts"] += 1
    assert verify_proof(late).ok
    v = verify_proof(late, trusted)
    assert not v.ok and "BAD_SIGNATURE" in v.reason
    # heads edited: the commitment is not self-consistent
    forged = copy.deepcopy(doc)
    forged["commitment"]["heads"][0]["seq"] += 1
    assert not verify_proof(forged).ok
    assert other["log_size"] == doc["tree_size"]


def test_unknown_key_and_nothing_to_sign(source):
    doc = prove_head(source, "A")
    stranger = Ed25519PrivateKey.from_private_bytes(bytes(32))
    v = verify_proof(doc, {key_id(stranger): stranger.public_key()})
    assert not v.ok and "UNKNOWN_KEY" in v.reason
    bare = {**doc, "commitment": None}
    assert verify_proof(bare).ok
    assert not verify_proof(bare, {key_id(stranger): stranger.public_key()}).ok


@pytest.mark.parametrize("junk", [None, [], "x", 1, {}, {"format": "traintrace-proof/1"},
                                  {"format": "traintrace-proof/1", "type": "head-inclusion", "cohort": "c"},
                                  {"format": "traintrace-proof/1", "type": "event-inclusion", "cohort": "c",
                                   "event": {"job_id": "A", "seq": "1", "hash": ""}}])
def test_malformed_documents_never_raise(junk):
    v = verify_proof(junk)
    assert v.ok is False and v.reason.startswith(("INVALID", "not a proof"))


# ---------------------------------------------------------------------- the CLI

@pytest.fixture(scope="module")
def archive(tmp_path_factory, signed_log):
    path = tmp_path_factory.mktemp("log") / "log.avro"
    recs = [r for topic in signed_log.records.values() for r in topic]
    write_archive(str(path), recs, {"topics": {}})
    return path


@pytest.fixture(scope="module")
def keyring(tmp_path_factory, key):
    d = tmp_path_factory.mktemp("keyring")
    save_public_key(key, d / f"processor-{key_id(key)}.pub")
    return d


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_cli_prove_verify_round_trip(tmp_path, archive, keyring):
    out = tmp_path / "head.json"
    r = invoke("prove", archive, "--head", "B", "-o", out)
    assert r.exit_code == 0, r.output
    assert "head-inclusion" in r.output and "published" in r.output
    doc = json.loads(out.read_text())
    assert doc["type"] == HEAD and doc["commitment"]["signature"]
    r = invoke("verify-proof", out)
    assert r.exit_code == 0 and r.output.startswith("VALID head-inclusion"), r.output
    r = invoke("verify-proof", out, "--trusted-keys", keyring, "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["valid"] is True and res["commitments"][0]["signature"] == "OK"
    # tamper one proof hash
    doc["proof"][0] = _flip(doc["proof"][0])
    out.write_text(json.dumps(doc))
    r = invoke("verify-proof", out)
    assert r.exit_code == 1 and r.output.startswith("INVALID: "), r.output
    r = invoke("verify-proof", out, "--json")
    assert r.exit_code == 1 and json.loads(r.output)["valid"] is False


def test_cli_prove_event_and_consistency_to_stdout(tmp_path, archive, keyring):
    r = invoke("prove", archive, "--event", "A:5")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["type"] == EVENT and doc["commitment_source"] == "published"
    (tmp_path / "ev.json").write_text(r.output)
    assert invoke("verify-proof", tmp_path / "ev.json", "--trusted-keys", keyring).exit_code == 0
    r = invoke("prove", archive, "--consistency", f"10:{doc['tree_size']}", "--cohort", "c1")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["commitment_sources"] == {"old": "recomputed", "new": "published"}
    (tmp_path / "c.json").write_text(r.output)
    # the old root is recomputed (unsigned): fine without keys, not with them
    assert invoke("verify-proof", tmp_path / "c.json").exit_code == 0
    r = invoke("verify-proof", tmp_path / "c.json", "--trusted-keys", keyring)
    assert r.exit_code == 1 and "UNSIGNED" in r.output


def test_cli_prove_from_jsonl(tmp_path):
    r = invoke("prove", SEED, "--event", "C:0", "--size", "20", "-o", tmp_path / "p.json", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {"out": str(tmp_path / "p.json"), "type": EVENT, "cohort": "c1",
                                    "commitment": "recomputed"}
    assert invoke("verify-proof", tmp_path / "p.json").exit_code == 0


@pytest.mark.parametrize("args,message", [
    (["--head", "A", "--event", "A:1"], "exactly one"),
    ([], "exactly one"),
    (["--consistency", "1:2"], "needs --cohort"),
    (["--event", "A"], "JOB:SEQ"),
    (["--event", "A:x"], "integer"),
    (["--event", "Z:1"], "no accepted event"),
    (["--head", "Z"], "no event"),
    (["--consistency", "5:1", "--cohort", "c1"], "old size"),
    (["--head", "A", "--size", "3"], "--size goes with --event"),
])
def test_cli_prove_errors(args, message):
    r = CliRunner().invoke(cli, ["prove", SEED, *args])
    assert r.exit_code == 1, r.output
    assert message in r.output


def test_cli_prove_unreadable_source(tmp_path):
    r = CliRunner().invoke(cli, ["prove", str(tmp_path / "missing.jsonl"), "--head", "A"])
    assert r.exit_code == 2 and "cannot read" in r.output


def test_cli_verify_proof_of_garbage(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    r = invoke("verify-proof", p)
    assert r.exit_code == 1 and r.output.startswith("INVALID: ")
    p.write_text("[]")
    assert invoke("verify-proof", p).exit_code == 1
    r = CliRunner().invoke(cli, ["verify-proof", str(tmp_path / "missing.json")])
    assert r.exit_code == 2
    empty = tmp_path / "empty-ring"
    empty.mkdir()
    p.write_text("{}")
    r = CliRunner().invoke(cli, ["verify-proof", str(p), "--trusted-keys", str(empty)])
    assert r.exit_code == 2 and "no public key" in r.output


def test_cli_keygen(tmp_path):
    r = invoke("keygen", "--out", tmp_path / "keys", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    priv, pub = Path(res["private_key"]), Path(res["public_key"])
    assert priv.name == "processor.key" and pub.name == f"processor-{res['key_id']}.pub"
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert key_id(load_private_key(priv)) == res["key_id"]
    r = invoke("keygen", "--out", tmp_path / "keys")
    assert r.exit_code == 1 and "exists" in r.output
    r = invoke("keygen", "--out", tmp_path / "keys", "--force")
    assert r.exit_code == 0 and "key id" in r.output
    assert pub.exists()  # the old public key stays for the old commitments


def test_cli_keygen_then_signed_pipeline_then_verify(tmp_path):
    """The whole story: a key from keygen signs the pipeline's commitments; the auditor proves
    from the archive and verifies with the .pub in their keyring."""
    r = invoke("keygen", "--out", tmp_path / "keys", "--json")
    res = json.loads(r.output)
    log = pipeline_log(SEED, CommitmentSigner.from_file(res["private_key"]), batch=11, commit_every=2)
    path = tmp_path / "log.avro"
    write_archive(str(path), [r for t in log.records.values() for r in t], {"topics": {}})
    ring = tmp_path / "ring"
    ring.mkdir()
    Path(res["public_key"]).rename(ring / Path(res["public_key"]).name)
    out = tmp_path / "proof.json"
    assert invoke("prove", path, "--event", "B:20", "-o", out).exit_code == 0
    r = invoke("verify-proof", out, "--trusted-keys", ring)
    assert r.exit_code == 0 and res["key_id"] in r.output, r.output
    com = commitment_from_json(json.loads(out.read_text())["commitment"])
    assert verify_commitment(com, {res["key_id"]: load_private_key(tmp_path / "keys" / "processor.key").public_key()})
