"""The signature of a ``LineageCommitment`` (SPEC §9; the message is described in
:mod:`streams.signing`): signing, checking, and the signer the referee signs with."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.core.commitment import check_heads
from streams.signing.notes import (Checkpoint, NoteError, NoteKey, NoteSigner, NotSignedBy, Opened, open_checkpoint,
                                   parse_note, sign_checkpoint)
from streams.signing.keys import COMMITMENT, TrustedKeys, key_id
from streams.signing.message import (BAD_SIGNATURE, HEADS_MISMATCH, MALFORMED, OK, UNKNOWN_KEY, UNSIGNED, WRONG_ROLE,
                                     SignatureCheck, Signer, part, public_key_of, signature_bytes, typed_field)

#: the domain tag, the first part of every signing message
DOMAIN = "traintrace/LineageCommitment/v1"


def snapshot_digest(snapshot: Iterable[Mapping[str, Any]]) -> str:
    """Hex SHA-256 of the snapshot's canonical JSON (see the module docstring)."""
    if isinstance(snapshot, (str, bytes)) or not isinstance(snapshot, Iterable):
        raise ValueError("snapshot must be a list of entries")
    entries = []
    for e in snapshot:
        if not isinstance(e, Mapping):
            raise ValueError(f"snapshot entry {e!r} is not an object")
        entries.append({
            "job_id": typed_field(e, "job_id", str),
            "incarnation": typed_field(e, "incarnation", int),
            "last_step": typed_field(e, "last_step", int, nullable=True),
            "status": typed_field(e, "status", str),
        })
    text = json.dumps(entries, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

def signing_message(record: Mapping[str, Any]) -> bytes:
    """The bytes a commitment's signature is over. Raises ValueError for a malformed record."""
    if not isinstance(record, Mapping):
        raise ValueError(f"a commitment must be an object, not {type(record).__name__}")
    parts = [
        (DOMAIN, "domain"),
        (typed_field(record, "cohort_id", str), "cohort_id"),
        (typed_field(record, "root", str), "root"),
        (typed_field(record, "tree_size", int), "tree_size"),
        (typed_field(record, "log_root", str, nullable=True), "log_root"),
        (typed_field(record, "log_size", int, nullable=True), "log_size"),
        (typed_field(record, "ts", int), "ts"),
        (snapshot_digest(typed_field(record, "snapshot", list)), "snapshot"),
    ]
    if record.get("input_offset") is not None or record.get("input_partition") is not None:
        # the point of the processor's input the commitment covers (schemas v3)
        parts.append((typed_field(record, "input_partition", int, nullable=True), "input_partition"))
        parts.append((typed_field(record, "input_offset", int, nullable=True), "input_offset"))
    return b"".join(part(v, what) for v, what in parts)

def sign_commitment(record: Mapping[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """A copy of ``record`` with ``signature`` (64 bytes) and ``key_id`` set."""
    signature = private_key.sign(signing_message(record))
    return {**record, "signature": signature, "key_id": key_id(private_key)}

def check_commitment(record: Mapping[str, Any], trusted: Mapping[str, Any]) -> SignatureCheck:
    """Verify a commitment's signature against the trusted keys ``{key_id: public key}``
    (an Ed25519PublicKey, or its raw 32 bytes), and that its heads hash to its root.
    Never raises. ``signature`` may be bytes or hex."""
    if not isinstance(record, Mapping):
        return SignatureCheck(False, MALFORMED, None, "a commitment must be an object")
    kid = record.get("key_id")
    sig_field = record.get("signature")
    if sig_field is None or sig_field == b"" or sig_field == "":
        return SignatureCheck(False, UNSIGNED, kid if isinstance(kid, str) else None,
                              f"commitment of cohort {record.get('cohort_id')!r} carries no signature")
    if not isinstance(kid, str) or not kid:
        return SignatureCheck(False, UNSIGNED, None, "signature without a key_id")
    key = trusted.get(kid) if isinstance(trusted, Mapping) else None
    if key is None:
        return SignatureCheck(False, UNKNOWN_KEY, kid, f"key {kid} is not in the trusted keyring")
    if isinstance(trusted, TrustedKeys) and not trusted.allows(kid, COMMITMENT):
        return SignatureCheck(False, WRONG_ROLE, kid,
                              f"key {kid} ({', '.join(sorted(trusted.roles[kid]))}) may not sign commitments")
    key = public_key_of(key)
    if key is None:
        return SignatureCheck(False, UNKNOWN_KEY, kid, f"trusted key {kid} is not a 32-byte Ed25519 key")
    sig = signature_bytes(sig_field)
    if sig is None:
        return SignatureCheck(False, MALFORMED, kid, "signature is neither bytes nor hex")
    try:
        message = signing_message(record)
    except ValueError as exc:
        return SignatureCheck(False, MALFORMED, kid, str(exc))
    try:
        key.verify(sig, message)
    except InvalidSignature:
        return SignatureCheck(False, BAD_SIGNATURE, kid, f"the signature does not verify under key {kid}")
    except (TypeError, ValueError, AttributeError) as exc:
        return SignatureCheck(False, BAD_SIGNATURE, kid, f"cannot verify: {exc}")
    problem = check_heads(record)
    if problem is not None:
        return SignatureCheck(False, HEADS_MISMATCH, kid, problem)
    return SignatureCheck(True, OK, kid, f"signed by {kid}")

def verify_commitment(record: Mapping[str, Any], trusted: Mapping[str, Any]) -> tuple[bool, str]:
    """``(ok, reason)``: reason is ``OK`` or one of ``UNSIGNED``, ``UNKNOWN_KEY``, ``MALFORMED``,
    ``BAD_SIGNATURE``, ``HEADS_MISMATCH``. Never raises (see :func:`check_commitment`)."""
    c = check_commitment(record, trusted)
    return c.ok, c.reason

def log_origin(prefix: str, cohort_id: str) -> str:
    """The C2SP origin of a cohort's fold log: ``<prefix>/<cohort_id>``."""
    return f"{prefix}/{cohort_id}"


def checkpoint_note(record: Mapping[str, Any], signer: NoteSigner, prefix: str) -> str | None:
    """The commitment's fold log (``log_size`` leaves, root ``log_root``) as a C2SP checkpoint
    signed by ``signer``: origin ``<prefix>/<cohort_id>``; None without a fold log."""
    root, size = record.get("log_root"), record.get("log_size")
    if root is None or size is None:
        return None
    cp = Checkpoint(log_origin(prefix, str(record["cohort_id"])), int(size), bytes.fromhex(str(root)))
    return sign_checkpoint(cp, signer)


def check_checkpoint(record: Mapping[str, Any], log_key: NoteKey, prefix: str | None = None,
                     witnesses: Iterable[NoteKey] = ()) -> tuple[Checkpoint, Opened]:
    """The commitment's checkpoint note opened with the log's note key: signed by it, any known
    witness's cosignature valid, and saying what the record says (the origin ends with the
    cohort, or is ``<prefix>/<cohort_id>``; size ``log_size``; root ``log_root``).
    :class:`~streams.signing.notes.NoteError` naming what is wrong."""
    note = record.get("checkpoint")
    if not note:
        raise NoteError(f"cohort {record.get('cohort_id')!r}: the commitment carries no checkpoint note")
    cp, opened = open_checkpoint(str(note), log_key, witnesses)
    cohort = str(record.get("cohort_id"))
    want = log_origin(prefix, cohort) if prefix is not None else None
    if (want is not None and cp.origin != want) or (want is None and not cp.origin.endswith("/" + cohort)):
        raise NoteError(f"cohort {cohort!r}: the checkpoint's origin {cp.origin!r} is not this cohort's log")
    if cp.size != record.get("log_size") or cp.root.hex() != record.get("log_root"):
        raise NoteError(f"cohort {cohort!r}: the checkpoint (size {cp.size}, root {cp.root.hex()[:16]}…) is not "
                        f"the commitment's fold log (size {record.get('log_size')}, root "
                        f"{str(record.get('log_root'))[:16]}…)")
    return cp, opened


def open_commitment_checkpoint(record: Mapping[str, Any], public_key: Any,
                               witnesses: Iterable[NoteKey] = ()) -> tuple[Checkpoint, Opened]:
    """The commitment's checkpoint note opened with the commitment's own key (``public_key``,
    under whichever note key name its signature lines carry) and checked against the record
    (:func:`check_checkpoint`). :class:`~streams.signing.notes.NoteError` naming what is wrong."""
    note = record.get("checkpoint")
    if not note:
        raise NoteError(f"cohort {record.get('cohort_id')!r}: the commitment carries no checkpoint note")
    names = sorted({s.name for s in parse_note(str(note)).signatures})
    for name in names:
        try:
            return check_checkpoint(record, NoteKey.of(name, public_key), witnesses=witnesses)
        except NotSignedBy:
            continue  # another name of the note
    raise NoteError(f"the checkpoint is not signed by key {record.get('key_id')} under any name it carries "
                    f"({', '.join(names)})")


def checkpoint_problem(record: Mapping[str, Any], trusted: Mapping[str, Any],
                       witnesses: Iterable[NoteKey] = ()) -> str | None:
    """What is wrong with a commitment's checkpoint note (None: nothing, or no note): signed by
    the commitment's own trusted key (``key_id``) and saying the record's fold log. Never raises."""
    if not record.get("checkpoint"):
        return None
    kid = record.get("key_id")
    key = public_key_of(trusted.get(kid)) if isinstance(kid, str) and isinstance(trusted, Mapping) else None
    if key is None:
        return f"the checkpoint's key {kid} is not in the trusted keyring"
    try:
        open_commitment_checkpoint(record, key, witnesses)
    except (NoteError, ValueError) as exc:
        return str(exc)
    return None


class CommitmentSigner(Signer):
    """The callable a :class:`~streams.referee.referee.Referee` signs its commitments with. With
    a ``log_origin`` prefix it also publishes each commitment's fold log as a C2SP checkpoint
    note (``checkpoint``, schemas v10), signed with the same key under the note key name
    ``log_origin`` (issue 28, docs/keys-and-proofs.md)."""

    log_origin: str | None = None

    def with_log_origin(self, prefix: str | None) -> "CommitmentSigner":
        self.log_origin = prefix.rstrip("/") if prefix else None
        return self

    @property
    def note_signer(self) -> NoteSigner | None:
        return NoteSigner(self.log_origin, self.private_key) if self.log_origin else None

    def __call__(self, record: Mapping[str, Any]) -> dict[str, Any]:
        signed = sign_commitment(record, self.private_key)
        note_signer = self.note_signer
        if note_signer is not None and self.log_origin is not None:
            signed["checkpoint"] = checkpoint_note(record, note_signer, self.log_origin)
        return signed
