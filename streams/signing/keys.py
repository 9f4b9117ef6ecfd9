"""Ed25519 keys and keyrings: generating, writing and reading keys (PKCS#8 / SubjectPublicKeyInfo
PEM), key ids, the plain keyring of an auditor and the keyring with roles (``processor/``,
``operator/``) the job clients and the audit verify control with, the issued job keys."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from streams.errors import TraintraceError
from streams.files.atomic import atomic_write

#: environment variable of the worker's private key file
SIGNING_KEY_ENV = "TRAINTRACE_SIGNING_KEY"
#: the private key file ``traintrace keygen`` writes
PRIVATE_KEY_FILE = "processor.key"
KEY_SUFFIXES = (".pub", ".pem")

# key roles: the subdirectories of a keyring with roles, and what each role may sign
PROCESSOR = "processor"
OPERATOR = "operator"
TRAINER = "trainer"
#: environment variable of the job client's (and the audit's) trusted keyring
TRUSTED_KEYS_ENV = "TRAINTRACE_TRUSTED_KEYS"
#: the permission of a LineageCommitment; a control record's is control_permission(name, record)
COMMITMENT = "LineageCommitment"
RELEASE_PERMISSION = "HaltCommand:RELEASE"
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    PROCESSOR: frozenset({COMMITMENT, "RollbackCommand", "QuarantineNotice", "PlanCleared", "HaltCommand",
                          "RetentionNotice"}),
    OPERATOR: frozenset({RELEASE_PERMISSION}),
}


class SigningError(TraintraceError):
    """A key cannot be generated, written or read (names the file and why)."""

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
            files.extend(sorted(f for f in p.iterdir() if f.is_file() and f.suffix in KEY_SUFFIXES))
            sub = p / PROCESSOR  # a keyring with roles: only processor keys sign commitments
            if sub.is_dir():
                files.extend(sorted(f for f in sub.iterdir() if f.is_file() and f.suffix in KEY_SUFFIXES))
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
    return sorted(f for f in directory.iterdir() if f.is_file() and f.suffix in KEY_SUFFIXES)

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
