"""Ed25519 signatures of ``LineageCommitment`` records (SPEC §9: "It can be signed with the
processor's key").

Keys
----
One Ed25519 key pair per processor deployment. The private key is a PKCS#8 PEM file
(unencrypted unless a password is given; written with mode 0600), the public key a
SubjectPublicKeyInfo PEM file. A key is named by its **key id**: the first 16 hex characters
(lower case) of SHA-256 over the raw 32-byte public key (:func:`key_id`). A **keyring** is what
an auditor trusts: a directory of public-key files (``*.pub``, ``*.pem``) or a list of files,
loaded by :func:`load_keyring` into ``{key_id: public key}``. Rotation keeps old public keys in
the keyring, so commitments signed before the rotation still verify.

The signing message
-------------------
What is signed is the SPEC §10 part encoding (each part as UTF-8 text — numbers in decimal,
null as the empty string — followed by one 0x00 byte) of, in this order::

    "traintrace/LineageCommitment/v1"      the domain tag (DOMAIN)
    cohort_id
    root                                   as written in the record (lower-case hex)
    tree_size                              decimal
    log_root                               hex, or "" when null
    log_size                               decimal, or "" when null
    ts                                     decimal
    snapshot_sha256                        hex SHA-256 of the snapshot's canonical JSON

The message is signed as it is (Ed25519 hashes internally; no pre-hash). The snapshot's
canonical JSON is the list of its entries in record order, each entry exactly the four keys
``incarnation``, ``job_id``, ``last_step``, ``status`` in sorted order, without whitespace,
UTF-8 without ``\\u`` escapes of non-ASCII characters: RFC 8785 (JCS) for these values, i.e.
``json.dumps(entries, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``. An empty
snapshot is ``[]``.

Everything but ``signature`` and ``key_id`` is covered: ``heads`` through ``root`` (RFC 6962,
with ``tree_size``), which is why :func:`verify_commitment` also checks that the heads hash to the
root. Ed25519 (RFC 8032) signatures are deterministic: the same record signed with the same key
gives the same bytes, so a replay reproduces the published commitments byte for byte.

Control records and key roles
-----------------------------
The records of ``lineage.control`` (``RollbackCommand``, ``QuarantineNotice``, ``PlanCleared``,
``HaltCommand``; schemas v5) are signed too: see :func:`control_message` for the message,
:class:`TrustedKeys` for the keyring with roles (``processor/`` and ``operator/``), and
docs/keys-and-proofs.md for the layout and rotation.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from streams.files.atomic import atomic_write
from streams.core.commitment import check_heads
from streams.errors import TraintraceError

__all__ = [
    "BAD_SIGNATURE",
    "CommitmentSigner",
    "DOMAIN",
    "HEADS_MISMATCH",
    "KeyPair",
    "MALFORMED",
    "OK",
    "PRIVATE_KEY_FILE",
    "SIGNING_KEY_ENV",
    "SignatureCheck",
    "SigningError",
    "UNKNOWN_KEY",
    "UNSIGNED",
    "check_commitment",
    "generate_key",
    "key_id",
    "load_keyring",
    "load_private_key",
    "load_public_key",
    "public_key_bytes",
    "public_key_file_name",
    "save_private_key",
    "save_public_key",
    "sign_commitment",
    "signing_message",
    "snapshot_digest",
    "verify_commitment",
    "write_keypair",
    # control records (see streams.signing's "Control records" and docs/keys-and-proofs.md)
    "CONTROL_DOMAINS",
    "CONTROL_FIELDS",
    "ControlSigner",
    "OPERATOR",
    "PROCESSOR",
    "ROLE_PERMISSIONS",
    "TRUSTED_KEYS_ENV",
    "TrustedKeys",
    "WRONG_ROLE",
    "check_control",
    "control_message",
    "control_permission",
    "load_trusted_keys",
    "sign_control",
]

#: the domain tag, the first part of every signing message
DOMAIN = "traintrace/LineageCommitment/v1"
#: environment variable of the worker's private key file
SIGNING_KEY_ENV = "TRAINTRACE_SIGNING_KEY"
#: the private key file ``traintrace keygen`` writes
PRIVATE_KEY_FILE = "processor.key"

# verification outcomes (the ``reason`` of verify_commitment)
OK = "OK"
UNSIGNED = "UNSIGNED"              # no signature (or no key_id)
UNKNOWN_KEY = "UNKNOWN_KEY"        # key_id not in the trusted keyring
MALFORMED = "MALFORMED"            # a field the message needs is missing or of the wrong type
BAD_SIGNATURE = "BAD_SIGNATURE"    # the signature does not verify under the named key
HEADS_MISMATCH = "HEADS_MISMATCH"  # signed root is fine, but the heads do not hash to it
WRONG_ROLE = "WRONG_ROLE"          # the key is trusted, but not for this kind of record

_KEYRING_SUFFIXES = (".pub", ".pem")

# key roles: the subdirectories of a keyring with roles, and what each role may sign
PROCESSOR = "processor"
OPERATOR = "operator"
#: environment variable of the job client's (and the audit's) trusted keyring
TRUSTED_KEYS_ENV = "TRAINTRACE_TRUSTED_KEYS"
#: the permission of a LineageCommitment; a control record's is control_permission(name, record)
COMMITMENT = "LineageCommitment"
RELEASE_PERMISSION = "HaltCommand:RELEASE"
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    PROCESSOR: frozenset({COMMITMENT, "RollbackCommand", "QuarantineNotice", "PlanCleared", "HaltCommand"}),
    OPERATOR: frozenset({RELEASE_PERMISSION}),
}


class SigningError(TraintraceError):
    """A key cannot be generated, written or read (names the file and why)."""


# ---------------------------------------------------------------------------- keys


def generate_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def _public(key: Ed25519PrivateKey | Ed25519PublicKey) -> Ed25519PublicKey:
    if isinstance(key, Ed25519PrivateKey):
        return key.public_key()
    if isinstance(key, Ed25519PublicKey):
        return key
    raise TypeError(f"expected an Ed25519 key, not {type(key).__name__}")


def public_key_bytes(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    """The raw 32-byte public key."""
    return _public(key).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """First 16 hex characters of SHA-256 over the raw 32-byte public key."""
    return hashlib.sha256(public_key_bytes(key)).hexdigest()[:16]


def public_key_file_name(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    return f"processor-{key_id(key)}.pub"


def _write(path: Path, data: bytes, mode: int, overwrite: bool) -> Path:
    path = Path(path)
    if path.exists() and not overwrite:
        raise SigningError(f"{path} exists; not overwriting a key file")
    try:
        atomic_write(path, data, mode)
        os.chmod(path, mode)
    except OSError as exc:
        raise SigningError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return path


def save_private_key(key: Ed25519PrivateKey, path: str | os.PathLike[str], *, password: bytes | None = None,
                     overwrite: bool = False) -> Path:
    """Write ``key`` as PKCS#8 PEM with mode 0600 (atomically; refuses to replace a file unless
    ``overwrite``)."""
    enc = (serialization.BestAvailableEncryption(password) if password
           else serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)
    return _write(Path(path), pem, 0o600, overwrite)


def save_public_key(key: Ed25519PrivateKey | Ed25519PublicKey, path: str | os.PathLike[str], *,
                    overwrite: bool = True) -> Path:
    """Write the public key as SubjectPublicKeyInfo PEM (mode 0644)."""
    pem = _public(key).public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _write(Path(path), pem, 0o644, overwrite)


def _read(path: str | os.PathLike[str]) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SigningError(f"cannot read key file {path}: {exc.strerror or exc}") from exc


def load_private_key(path: str | os.PathLike[str], password: bytes | None = None) -> Ed25519PrivateKey:
    """An Ed25519 private key from a PEM file."""
    data = _read(path)
    try:
        key = serialization.load_pem_private_key(data, password=password)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{path} is not a readable PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key")
    return key


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file."""
    data = _read(path)
    if b"PRIVATE KEY" in data:
        raise SigningError(f"{path} holds a private key; a keyring holds public keys only "
                           "(the processor-<key id>.pub file)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{path} is not a readable PEM public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key")
    return key


def load_keyring(sources: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> dict[str, Ed25519PublicKey]:
    """The trusted public keys ``{key_id: key}`` of a directory (its ``*.pub`` and ``*.pem``
    files), a file, or a list of either. Raises :class:`SigningError` for an unreadable file or
    a source that yields no key."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    sources = list(sources)
    files: list[Path] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            files.extend(sorted(f for f in p.iterdir() if f.is_file() and f.suffix in _KEYRING_SUFFIXES))
            sub = p / PROCESSOR  # a keyring with roles: only processor keys sign commitments
            if sub.is_dir():
                files.extend(sorted(f for f in sub.iterdir() if f.is_file() and f.suffix in _KEYRING_SUFFIXES))
        elif p.exists():
            files.append(p)
        else:
            raise SigningError(f"keyring source {p} does not exist")
    ring: dict[str, Ed25519PublicKey] = {}
    for f in files:
        key = load_public_key(f)
        ring[key_id(key)] = key
    if not ring:
        raise SigningError(f"no public key (*.pub, *.pem) in {', '.join(str(Path(s)) for s in sources)}")
    return ring


@dataclass(frozen=True)
class KeyPair:
    key_id: str
    private_path: Path
    public_path: Path


def write_keypair(directory: str | os.PathLike[str], *, overwrite: bool = False,
                  key: Ed25519PrivateKey | None = None) -> KeyPair:
    """Generate (or take) a key and write ``processor.key`` (0600) and
    ``processor-<key id>.pub`` into ``directory``."""
    d = Path(directory)
    key = key or generate_key()
    priv = d / PRIVATE_KEY_FILE
    if priv.exists() and not overwrite:
        raise SigningError(f"{priv} exists; not overwriting a signing key (move it away, or --force)")
    pub = save_public_key(key, d / public_key_file_name(key))
    save_private_key(key, priv, overwrite=overwrite)
    return KeyPair(key_id(key), priv, pub)


# ---------------------------------------------------------------------------- the message


def _part(value: Any, what: str) -> bytes:
    if value is None:
        text = ""
    elif isinstance(value, bool):
        raise ValueError(f"{what} must not be a boolean")
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise ValueError(f"{what} must be a string or an integer, not {type(value).__name__}")
    if "\x00" in text:
        raise ValueError(f"{what} contains a 0x00 byte, which the encoding reserves")
    return text.encode("utf-8") + b"\x00"


def _typed(record: Mapping[str, Any], name: str, kind: type, nullable: bool = False) -> Any:
    if name not in record and not nullable:
        raise ValueError(f"{name} is missing")
    v = record.get(name)
    if v is None and nullable:
        return None
    if not isinstance(v, kind) or isinstance(v, bool):
        raise ValueError(f"{name} must be {kind.__name__}{' or null' if nullable else ''}, not {v!r}")
    return v


def snapshot_digest(snapshot: Iterable[Mapping[str, Any]]) -> str:
    """Hex SHA-256 of the snapshot's canonical JSON (see the module docstring)."""
    if isinstance(snapshot, (str, bytes)) or not isinstance(snapshot, Iterable):
        raise ValueError("snapshot must be a list of entries")
    entries = []
    for e in snapshot:
        if not isinstance(e, Mapping):
            raise ValueError(f"snapshot entry {e!r} is not an object")
        entries.append({
            "job_id": _typed(e, "job_id", str),
            "incarnation": _typed(e, "incarnation", int),
            "last_step": _typed(e, "last_step", int, nullable=True),
            "status": _typed(e, "status", str),
        })
    text = json.dumps(entries, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def signing_message(record: Mapping[str, Any]) -> bytes:
    """The bytes a commitment's signature is over. Raises ValueError for a malformed record."""
    if not isinstance(record, Mapping):
        raise ValueError(f"a commitment must be an object, not {type(record).__name__}")
    parts = [
        (DOMAIN, "domain"),
        (_typed(record, "cohort_id", str), "cohort_id"),
        (_typed(record, "root", str), "root"),
        (_typed(record, "tree_size", int), "tree_size"),
        (_typed(record, "log_root", str, nullable=True), "log_root"),
        (_typed(record, "log_size", int, nullable=True), "log_size"),
        (_typed(record, "ts", int), "ts"),
        (snapshot_digest(_typed(record, "snapshot", list)), "snapshot"),
    ]
    if record.get("input_offset") is not None or record.get("input_partition") is not None:
        # the point of the processor's input the commitment covers (schemas v3)
        parts.append((_typed(record, "input_partition", int, nullable=True), "input_partition"))
        parts.append((_typed(record, "input_offset", int, nullable=True), "input_offset"))
    return b"".join(_part(v, what) for v, what in parts)


# ---------------------------------------------------------------------------- sign / verify


def sign_commitment(record: Mapping[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """A copy of ``record`` with ``signature`` (64 bytes) and ``key_id`` set."""
    signature = private_key.sign(signing_message(record))
    return {**record, "signature": signature, "key_id": key_id(private_key)}


@dataclass(frozen=True)
class SignatureCheck:
    ok: bool
    reason: str                 # OK, UNSIGNED, UNKNOWN_KEY, MALFORMED, BAD_SIGNATURE, HEADS_MISMATCH
    key_id: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


def _signature_bytes(sig: Any) -> bytes | None:
    if isinstance(sig, (bytes, bytearray, memoryview)):
        return bytes(sig)
    if isinstance(sig, str):  # the hex of a JSON document
        try:
            return bytes.fromhex(sig)
        except ValueError:
            return None
    return None


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
    key = _public_key(key)
    if key is None:
        return SignatureCheck(False, UNKNOWN_KEY, kid, f"trusted key {kid} is not a 32-byte Ed25519 key")
    sig = _signature_bytes(sig_field)
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


def _public_key(key: Any) -> Ed25519PublicKey | None:
    """A trusted key as a public key (a keyring may hold the raw 32 bytes); None when it is not one."""
    if isinstance(key, (bytes, bytearray)):
        try:
            return Ed25519PublicKey.from_public_bytes(bytes(key))
        except ValueError:
            return None
    return key


class _Signer:
    """A private key and its key id; subclasses say what they sign."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise TypeError(f"expected an Ed25519PrivateKey, not {type(private_key).__name__}")
        self.private_key = private_key
        self.key_id = key_id(private_key)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], password: bytes | None = None):
        return cls(load_private_key(path, password))

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key_id={self.key_id!r})"


class CommitmentSigner(_Signer):
    """The callable a :class:`~streams.referee.referee.Referee` signs its commitments with."""

    def __call__(self, record: Mapping[str, Any]) -> dict[str, Any]:
        return sign_commitment(record, self.private_key)


# ---------------------------------------------------------------------------- snapshots

#: the domain tag of a CohortSnapshot's signing message
SNAPSHOT_DOMAIN = "traintrace/CohortSnapshot/v1"


def snapshot_message(record: Mapping[str, Any]) -> bytes:
    """The bytes a ``CohortSnapshot``'s signature is over: every field but the state itself
    (its digest stands for it) and the signature."""
    parts = [(SNAPSHOT_DOMAIN, "domain")]
    for name, kind, nullable in (("cohort_id", str, False), ("partition", int, False), ("covers", int, False),
                                 ("input_offset", int, True), ("format", int, False), ("digest", str, False),
                                 ("ts", int, False), ("key_id", str, True)):
        parts.append((_typed(record, name, kind, nullable), name))
    parts.append(("1" if record.get("settled") else "0", "settled"))
    return b"".join(_part(v, what) for v, what in parts)


class SnapshotSigner(_Signer):
    """Signs the worker's ``CohortSnapshot`` records (with the commitments' key)."""

    def __call__(self, record: Mapping[str, Any]) -> dict[str, Any]:
        signed = {**record, "key_id": self.key_id}
        return {**signed, "signature": self.private_key.sign(snapshot_message(signed))}


def check_snapshot(record: Mapping[str, Any], keys: Mapping[str, Any]) -> tuple[bool, str]:
    """``(ok, reason)`` of a ``CohortSnapshot``'s signature under ``{key_id: public key}``:
    ``OK``, ``UNSIGNED``, ``UNKNOWN_KEY``, ``MALFORMED`` or ``BAD_SIGNATURE``. Never raises."""
    kid, sig = record.get("key_id"), _signature_bytes(record.get("signature"))
    if not sig or not isinstance(kid, str):
        return False, UNSIGNED
    key = _public_key(keys.get(kid)) if keys.get(kid) is not None else None
    if key is None:
        return False, UNKNOWN_KEY
    try:
        message = snapshot_message(record)
    except ValueError:
        return False, MALFORMED
    try:
        key.verify(sig, message)
    except (InvalidSignature, TypeError, ValueError):
        return False, BAD_SIGNATURE
    return True, OK


# ---------------------------------------------------------------------------- control records

#: the fields of each control record, in the order its signing message covers them (every
#: field of the v5 schema but ``signature``; ``key_id`` last)
CONTROL_FIELDS: dict[str, tuple[str, ...]] = {
    "RollbackCommand": ("command_id", "job_id", "cohort_id", "incarnation", "action", "target_checkpoint_id",
                        "target_step", "incident_ids", "supersedes", "issued_ts", "commitment_root", "key_id"),
    "QuarantineNotice": ("command_id", "job_id", "cohort_id", "incarnation", "incident_ids",
                         "quarantined_checkpoint_ids", "supersedes", "issued_ts", "commitment_root", "key_id"),
    "PlanCleared": ("command_id", "job_id", "cohort_id", "incarnation", "supersedes", "reason", "issued_ts",
                    "key_id"),
    "HaltCommand": ("command_id", "job_id", "cohort_id", "reason", "detail", "seq", "issued_ts", "key_id"),
}
#: the domain tag of each kind, the first part of its signing message
CONTROL_DOMAINS: dict[str, str] = {name: f"traintrace/{name}/v1" for name in CONTROL_FIELDS}


def control_permission(name: str, record: Mapping[str, Any]) -> str:
    """What signing ``record`` needs: its record name, or ``HaltCommand:RELEASE`` for a release
    (an operator's, which no processor key may sign)."""
    if name == "HaltCommand" and record.get("reason") == "RELEASE":
        return RELEASE_PERMISSION
    return name


def _field_part(name: str, value: Any) -> bytes:
    """``name=value`` (a null is the bare ``name``, so null and "" differ); a list is
    ``name#count`` followed by its items, one part each."""
    if value is None:
        return _part(name, name)
    if isinstance(value, (list, tuple)):
        return _part(f"{name}#{len(value)}", name) + b"".join(_part(v, f"{name}[]") for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} must be a string, an integer or a list, not {type(value).__name__}")
    return _part(f"{name}={value}", name)


def control_message(name: str, record: Mapping[str, Any]) -> bytes:
    """The bytes a control record's signature is over: the SPEC §10 part encoding (UTF-8, each
    part followed by 0x00) of the domain tag ``traintrace/<record name>/v1``, then of every field
    of :data:`CONTROL_FIELDS` in order as ``name=value`` (null: ``name``; a list: ``name#count``
    then one part per item). Raises ValueError for an unknown kind or a malformed record."""
    fields = CONTROL_FIELDS.get(name)
    if fields is None:
        raise ValueError(f"{name!r} is not a control record ({', '.join(CONTROL_FIELDS)})")
    if not isinstance(record, Mapping):
        raise ValueError(f"a {name} must be an object, not {type(record).__name__}")
    for required in ("command_id", "job_id", "issued_ts"):
        if record.get(required) is None:
            raise ValueError(f"{required} is missing")
    return _part(CONTROL_DOMAINS[name], "domain") + b"".join(_field_part(f, record.get(f)) for f in fields)


def sign_control(name: str, record: Mapping[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """A copy of the control record with ``key_id`` and ``signature`` set (deterministic)."""
    signed = {**record, "key_id": key_id(private_key)}
    signed["signature"] = private_key.sign(control_message(name, signed))
    return signed


class TrustedKeys(dict):
    """A keyring with roles: ``{key_id: public key}`` (so it serves wherever a plain keyring
    does) plus :attr:`roles` ``{key_id: {role, ...}}``. A plain mapping given where one is
    expected is taken as processor keys (:meth:`of`)."""

    def __init__(self, keys: Mapping[str, Any] | None = None, roles: Mapping[str, Iterable[str]] | None = None,
                 source: str = "") -> None:
        super().__init__(keys or {})
        self.roles: dict[str, frozenset[str]] = {k: frozenset((roles or {}).get(k, (PROCESSOR,))) for k in self}
        self.source = source

    @classmethod
    def of(cls, trusted: "TrustedKeys | Mapping[str, Any] | str | os.PathLike[str]") -> "TrustedKeys":
        if isinstance(trusted, TrustedKeys):
            return trusted
        if isinstance(trusted, Mapping):
            return cls(trusted)
        return load_trusted_keys(trusted)

    def allows(self, kid: str, permission: str) -> bool:
        return any(permission in ROLE_PERMISSIONS.get(r, ()) for r in self.roles.get(kid, ()))

    def __reduce__(self):  # picklable for the audit's shard processes
        return (TrustedKeys, (dict(self), {k: tuple(v) for k, v in self.roles.items()}, self.source))

    def __repr__(self) -> str:
        return f"TrustedKeys({ {k: sorted(v) for k, v in self.roles.items()} })"


def _keys_in(directory: Path) -> list[Path]:
    return sorted(f for f in directory.iterdir() if f.is_file() and f.suffix in _KEYRING_SUFFIXES)


def load_trusted_keys(source: str | os.PathLike[str]) -> TrustedKeys:
    """A keyring with roles from a directory: public keys in ``processor/`` and ``operator/``
    have that role; keys directly in the directory (the layout ``traintrace keygen`` writes) are
    processor keys; other subdirectories (e.g. ``trainer/``) grant nothing here. A single file
    is one processor key. Raises :class:`SigningError` when there is no key at all."""
    p = Path(source)
    roles: dict[str, set[str]] = {}
    keys: dict[str, Ed25519PublicKey] = {}
    if p.is_dir():
        groups = [(PROCESSOR, _keys_in(p))] + [(r, _keys_in(p / r)) for r in (PROCESSOR, OPERATOR) if (p / r).is_dir()]
    elif p.exists():
        groups = [(PROCESSOR, [p])]
    else:
        raise SigningError(f"trusted keyring {p} does not exist (give a directory with processor/ and "
                           f"operator/ public keys, or unset {TRUSTED_KEYS_ENV})")
    for role, files in groups:
        for f in files:
            key = load_public_key(f)
            keys[key_id(key)] = key
            roles.setdefault(key_id(key), set()).add(role)
    if not keys:
        raise SigningError(f"no public key (*.pub, *.pem) in {p}, {p / PROCESSOR} or {p / OPERATOR}")
    return TrustedKeys(keys, roles, str(p))


TRAINER = "trainer"


def issued_job_keys(source: str | os.PathLike[str]) -> frozenset[str]:
    """The issued job keys (:class:`streams.core.seals.SealPolicy` ``issued_keys``: hex public
    keys) of a file or a directory — its ``trainer/`` subdirectory when it has one, so a keyring
    with roles serves as it is. Raises :class:`SigningError` when there is no key at all."""
    from streams.core.seals import public_key_hex

    p = Path(source)
    if p.is_dir():
        files = _keys_in(p / TRAINER) if (p / TRAINER).is_dir() else _keys_in(p)
    elif p.exists():
        files = [p]
    else:
        raise SigningError(f"job keys {p} do not exist (give a public key file or a directory of them)")
    if not files:
        raise SigningError(f"no public key (*.pub, *.pem) in {p / TRAINER if (p / TRAINER).is_dir() else p}")
    return frozenset(public_key_hex(load_public_key(f)) for f in files)


def unverified_row(name: str, record: Mapping[str, Any], check: SignatureCheck) -> dict[str, Any]:
    """What a reader lists of a control record left out because it did not verify (record,
    job_id, command_id, reason, detail); the caller adds where it was."""
    return {"record": name, "job_id": record.get("job_id"), "command_id": record.get("command_id"),
            "reason": check.reason, "detail": check.detail}


def check_control(name: str, record: Mapping[str, Any], trusted: Mapping[str, Any]) -> SignatureCheck:
    """Verify a control record's signature: by a trusted key (``trusted``: a
    :class:`TrustedKeys`, or a plain ``{key_id: key}`` taken as processor keys) whose role may
    sign this kind (:func:`control_permission`). Never raises."""
    ring = trusted if isinstance(trusted, TrustedKeys) else TrustedKeys(trusted if isinstance(trusted, Mapping) else {})
    if not isinstance(record, Mapping):
        return SignatureCheck(False, MALFORMED, None, f"a {name} must be an object")
    kid = record.get("key_id")
    sig_field = record.get("signature")
    cid = str(record.get("command_id") or "?")[:12]
    if sig_field is None or sig_field == b"" or sig_field == "":
        return SignatureCheck(False, UNSIGNED, kid if isinstance(kid, str) else None,
                              f"{name} {cid} carries no signature")
    if not isinstance(kid, str) or not kid:
        return SignatureCheck(False, UNSIGNED, None, f"{name} {cid}: signature without a key_id")
    key = ring.get(kid)
    if key is None:
        return SignatureCheck(False, UNKNOWN_KEY, kid, f"{name} {cid}: key {kid} is not in the trusted keyring")
    permission = control_permission(name, record)
    if not ring.allows(kid, permission):
        return SignatureCheck(False, WRONG_ROLE, kid, f"{name} {cid}: key {kid} "
                              f"({', '.join(sorted(ring.roles.get(kid, ()))) or 'no role'}) may not sign {permission}")
    key = _public_key(key)
    if key is None:
        return SignatureCheck(False, UNKNOWN_KEY, kid, f"trusted key {kid} is not a 32-byte Ed25519 key")
    sig = _signature_bytes(sig_field)
    if sig is None:
        return SignatureCheck(False, MALFORMED, kid, f"{name} {cid}: signature is neither bytes nor hex")
    try:
        key.verify(sig, control_message(name, record))
    except InvalidSignature:
        return SignatureCheck(False, BAD_SIGNATURE, kid, f"{name} {cid}: the signature does not verify under key {kid}")
    except (TypeError, ValueError, AttributeError) as exc:
        return SignatureCheck(False, MALFORMED, kid, f"{name} {cid}: cannot verify: {exc}")
    return SignatureCheck(True, OK, kid, f"signed by {kid}")


class ControlSigner(_Signer):
    """The callable ``(record name, record) -> signed record`` a
    :class:`~streams.referee.referee.Referee` signs its control records with (and
    ``traintrace release --signing-key``)."""

    def __call__(self, name: str, record: Mapping[str, Any]) -> dict[str, Any]:
        return sign_control(name, record, self.private_key)
