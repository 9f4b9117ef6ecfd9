"""The transparency-log formats every standard tool reads (issue 28): C2SP signed notes
(https://c2sp.org/signed-note), log checkpoints (https://c2sp.org/tlog-checkpoint) and witness
cosignatures (https://c2sp.org/tlog-cosignature, ``cosignature/v1``).

A **signed note** is a text ending in a newline, a blank line, and one or more signature lines
``— <key name> <base64(key ID || signature)>``. The key ID is the first four bytes of
``SHA-256(key name || 0x0A || type || public key)``: type 0x01 for an Ed25519 note key (what the
processor signs checkpoints with), 0x04 for an Ed25519 cosignature key (what a witness signs
with). A verifier key is written ``<name>+<key ID, 8 hex digits>+<base64(type || public key)>``,
the form ``golang.org/x/mod/sumdb/note`` and every witness read; the private form
``PRIVATE+KEY+<name>+<key ID>+<base64(0x01 || seed)>`` is x/mod's.

A **checkpoint** is a note whose text is the log's origin, its size in decimal and the base64 of
its RFC 6962 root, one a line, then optional extension lines. A **cosignature** signs
``cosignature/v1\\ntime <t>\\n`` followed by the checkpoint's text, and carries the timestamp
``t`` (seconds, big-endian u64) before the Ed25519 signature.

Pure: bytes and text in, values out; the keys are ``cryptography``'s Ed25519 keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass, field
from typing import Iterable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from streams.errors import TraintraceError

#: the signature types of c2sp.org/signed-note this module reads and writes
ED25519 = 0x01
COSIGNATURE_V1 = 0x04
_DASH = "\u2014 "  # em dash and a space: every signature line starts so
_MAX_SIGNATURES = 100  # as x/mod's note.Open
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


class NoteError(TraintraceError):
    """A note, key or checkpoint that is malformed, or a note no trusted key verifies."""


class NotSignedBy(NoteError):
    """A well-formed note that carries no signature by the key(s) asked for (as opposed to a
    signature by one of them that does not verify, a plain :class:`NoteError`)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise NoteError(f"{what}: not base64: {text[:40]!r}") from None


def _raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _check_name(name: str) -> None:
    if not name or "+" in name or any(c.isspace() for c in name):
        raise NoteError(f"key name {name!r}: must be non-empty, without spaces or '+'")


def key_hash(name: str, kind: int, public: bytes) -> int:
    """The 32-bit key ID of a key: ``SHA-256(name || 0x0A || kind || public)[:4]``, big-endian."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([kind]) + public).digest()
    return int.from_bytes(digest[:4], "big")


@dataclass(frozen=True)
class NoteKey:
    """A verifier key: a name, a type (:data:`ED25519` or :data:`COSIGNATURE_V1`) and a raw
    32-byte Ed25519 public key; ``str()`` is its verifier-key string."""

    name: str
    kind: int
    public: bytes

    def __post_init__(self) -> None:
        _check_name(self.name)
        if self.kind not in (ED25519, COSIGNATURE_V1):
            raise NoteError(f"key {self.name}: signature type {self.kind:#04x} is not Ed25519 (0x01) "
                            "or cosignature/v1 (0x04)")
        if len(self.public) != 32:
            raise NoteError(f"key {self.name}: an Ed25519 public key has 32 bytes, not {len(self.public)}")

    @property
    def key_hash(self) -> int:
        return key_hash(self.name, self.kind, self.public)

    def __str__(self) -> str:
        return f"{self.name}+{self.key_hash:08x}+{_b64(bytes([self.kind]) + self.public)}"

    @classmethod
    def of(cls, name: str, key: Ed25519PublicKey | Ed25519PrivateKey, kind: int = ED25519) -> "NoteKey":
        public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
        return cls(name, kind, _raw(public))

    @classmethod
    def parse(cls, vkey: str) -> "NoteKey":
        """A verifier-key string ``<name>+<hash>+<base64(type || key)>``; the hash must be the
        key's own."""
        parts = vkey.strip().split("+", 2)
        if len(parts) != 3 or len(parts[1]) != 8:
            raise NoteError(f"verifier key {vkey[:60]!r}: not <name>+<8 hex digits>+<base64 key>")
        name, hash16, data = parts
        try:
            stated = int(hash16, 16)
        except ValueError:
            raise NoteError(f"verifier key {vkey[:60]!r}: {hash16!r} is not 8 hex digits") from None
        raw = _unb64(data, f"verifier key {name}")
        if not raw:
            raise NoteError(f"verifier key {name}: no key")
        key = cls(name, raw[0], raw[1:])
        if key.key_hash != stated:
            raise NoteError(f"verifier key {name}: its key ID {hash16} is not its key's ({key.key_hash:08x})")
        return key

    def _ed25519(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.public)

    def verify(self, text: bytes, signature: bytes) -> bool:
        """Whether ``signature`` (without its key ID) signs the note text ``text``."""
        if self.kind == COSIGNATURE_V1:
            if len(signature) != 72:
                return False
            (t,) = struct.unpack(">Q", signature[:8])
            message, signature = cosignature_message(text, t), signature[8:]
        else:
            message = text
        try:
            self._ed25519().verify(signature, message)
        except InvalidSignature:
            return False
        return True


def cosignature_message(text: bytes, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: ``cosignature/v1\\ntime <t>\\n`` and the checkpoint text."""
    return b"cosignature/v1\ntime %d\n" % timestamp + text


def cosignature_time(signature: bytes) -> int:
    """The timestamp (POSIX seconds) of a cosignature/v1 signature (without its key ID)."""
    if len(signature) != 72:
        raise NoteError(f"a cosignature/v1 signature has 72 bytes after its key ID, not {len(signature)}")
    return struct.unpack(">Q", signature[:8])[0]


@dataclass(frozen=True)
class NoteSigner:
    """An Ed25519 key that signs notes under ``name`` (type :data:`ED25519`), or cosigns them
    (:data:`COSIGNATURE_V1`, a witness's signature)."""

    name: str
    private_key: Ed25519PrivateKey = field(repr=False)
    kind: int = ED25519

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def key(self) -> NoteKey:
        return NoteKey.of(self.name, self.private_key, self.kind)

    def sign(self, text: bytes, timestamp: int | None = None) -> str:
        """The signature line (``— name base64``, with its newline) of this key over ``text``."""
        if self.kind == COSIGNATURE_V1:
            if timestamp is None or timestamp <= 0:
                raise NoteError("a cosignature needs a positive timestamp")
            body = struct.pack(">Q", timestamp) + self.private_key.sign(cosignature_message(text, timestamp))
        else:
            body = self.private_key.sign(text)
        return f"{_DASH}{self.name} {_b64(self.key.key_hash.to_bytes(4, 'big') + body)}\n"

    def private_key_string(self) -> str:
        """x/mod's signer-key string ``PRIVATE+KEY+<name>+<hash>+<base64(0x01 || seed)>``."""
        if self.kind != ED25519:
            raise NoteError("x/mod's signer-key string is for Ed25519 note keys (type 0x01) only")
        seed = self.private_key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                              serialization.NoEncryption())
        return f"PRIVATE+KEY+{self.name}+{self.key.key_hash:08x}+{_b64(bytes([ED25519]) + seed)}"

    @classmethod
    def parse(cls, skey: str) -> "NoteSigner":
        """x/mod's signer-key string (see :meth:`private_key_string`)."""
        parts = skey.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("signer key: not PRIVATE+KEY+<name>+<hash>+<base64 key>")
        raw = _unb64(parts[4], f"signer key {parts[2]}")
        if len(raw) != 33 or raw[0] != ED25519:
            raise NoteError(f"signer key {parts[2]}: not an Ed25519 seed (0x01 and 32 bytes)")
        signer = cls(parts[2], Ed25519PrivateKey.from_private_bytes(raw[1:]))
        if f"{signer.key.key_hash:08x}" != parts[3].lower():
            raise NoteError(f"signer key {parts[2]}: its key ID {parts[3]} is not its key's")
        return signer


@dataclass(frozen=True)
class Signature:
    """One signature line of a note: the key's name, its 32-bit ID and the signature bytes
    (without the ID)."""

    name: str
    key_hash: int
    signature: bytes

    def line(self) -> str:
        return f"{_DASH}{self.name} {_b64(self.key_hash.to_bytes(4, 'big') + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    """A parsed signed note: its text (ending in a newline) and its signature lines in order."""

    text: str
    signatures: tuple[Signature, ...]

    def __str__(self) -> str:
        return self.text + "\n" + "".join(s.line() for s in self.signatures)

    def with_signatures(self, lines: str | Iterable[Signature]) -> "Note":
        """This note with more signature lines (a witness's answer), a line already here kept once."""
        extra = _signature_lines(lines) if isinstance(lines, str) else tuple(lines)
        have = list(self.signatures)
        for s in extra:
            if s not in have:
                have.append(s)
        return Note(self.text, tuple(have))


def _signature_lines(block: str) -> tuple[Signature, ...]:
    if not block.endswith("\n"):
        raise NoteError("the signature lines must end in a newline")
    out = []
    for line in block[:-1].split("\n"):
        if not line.startswith(_DASH):
            raise NoteError(f"signature line {line[:60]!r}: does not start with an em dash and a space")
        name, sep, b64 = line[len(_DASH):].partition(" ")
        if not sep:
            raise NoteError(f"signature line {line[:60]!r}: no signature after the key name")
        _check_name(name)
        raw = _unb64(b64, f"signature of {name}")
        if len(raw) < 5:
            raise NoteError(f"signature of {name}: {len(raw)} bytes, too short")
        out.append(Signature(name, int.from_bytes(raw[:4], "big"), raw[4:]))
    if len(out) > _MAX_SIGNATURES:
        raise NoteError(f"{len(out)} signatures: more than {_MAX_SIGNATURES}")
    return tuple(out)


def parse_note(message: str | bytes) -> Note:
    """Split a signed note into its text and signatures (none verified: see :func:`open_note`)."""
    if isinstance(message, bytes):
        try:
            message = message.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteError("a note is UTF-8 text") from None
    bad = next((c for c in message if ord(c) < 0x20 and c != "\n"), None)
    if bad is not None:
        raise NoteError(f"a note has no control characters but newlines (found {bad!r})")
    split = message.rfind("\n\n")
    if split < 0:
        raise NoteError("a note is a text, a blank line and signature lines: no blank line found")
    text, sigs = message[:split + 1], message[split + 2:]
    if not sigs:
        raise NoteError("a note without signature lines")
    return Note(text, _signature_lines(sigs))


@dataclass(frozen=True)
class Opened:
    """A note checked against known keys: the keys whose signatures verified, in note order."""

    note: Note
    verified: tuple[NoteKey, ...]

    def cosigners(self) -> tuple[NoteKey, ...]:
        return tuple(k for k in self.verified if k.kind == COSIGNATURE_V1)

    def timestamp(self, key: NoteKey) -> int:
        sig = next(s for s in self.note.signatures if (s.name, s.key_hash) == (key.name, key.key_hash))
        return cosignature_time(sig.signature)


def open_note(message: str | bytes | Note, known: Iterable[NoteKey]) -> Opened:
    """Verify a note's signatures by the ``known`` keys (signature.md's rules): a signature by an
    unknown key is ignored; one by a known key must verify (else :class:`NoteError` naming it);
    at least one must verify (else :class:`NoteError`)."""
    note = message if isinstance(message, Note) else parse_note(message)
    keys = {(k.name, k.key_hash): k for k in known}
    text = note.text.encode("utf-8")
    verified: list[NoteKey] = []
    for sig in note.signatures:
        key = keys.get((sig.name, sig.key_hash))
        if key is None or key in verified:
            continue
        if not key.verify(text, sig.signature):
            raise NoteError(f"the signature of {sig.name} ({sig.key_hash:08x}) does not verify")
        verified.append(key)
    if not verified:
        names = ", ".join(sorted({f"{s.name}+{s.key_hash:08x}" for s in note.signatures}))
        raise NotSignedBy(f"no signature by a trusted key (signed by: {names})")
    return Opened(note, tuple(verified))


@dataclass(frozen=True)
class Checkpoint:
    """A C2SP tlog-checkpoint: origin, tree size, 32-byte RFC 6962 root, extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or any(c.isspace() and c != " " for c in self.origin):
            raise NoteError(f"checkpoint origin {self.origin!r}: must be one non-empty line")
        if self.size < 0:
            raise NoteError(f"checkpoint size {self.size}: negative")
        if len(self.root) != 32:
            raise NoteError(f"checkpoint root: 32 bytes (SHA-256), not {len(self.root)}")
        for ext in self.extensions:
            if not ext or "\n" in ext:
                raise NoteError(f"checkpoint extension line {ext!r}: must be one non-empty line")

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{_b64(self.root)}\n" + "".join(e + "\n" for e in self.extensions)

    @classmethod
    def parse(cls, text: str) -> "Checkpoint":
        """A checkpoint's note text (strict, as torchwood: a canonical decimal size, a 32-byte
        root, non-empty extension lines)."""
        if not text.endswith("\n"):
            raise NoteError("a checkpoint's text ends in a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise NoteError("a checkpoint has at least three lines: origin, size, root")
        origin, size, root, *ext = lines
        if not _DECIMAL.fullmatch(size):
            raise NoteError(f"checkpoint size {size!r}: not a decimal without leading zeros")
        return cls(origin, int(size), _unb64(root, "checkpoint root"), tuple(ext))


def sign_checkpoint(checkpoint: Checkpoint, signer: NoteSigner) -> str:
    """The checkpoint as a signed note (one signature, the log's)."""
    text = checkpoint.text()
    return text + "\n" + signer.sign(text.encode("utf-8"))


def open_checkpoint(message: str | bytes | Note, log_key: NoteKey, witnesses: Iterable[NoteKey] = (),
                    origin: str | None = None) -> tuple[Checkpoint, Opened]:
    """A signed checkpoint checked as ``transparency-dev/formats/log.ParseCheckpoint`` does: the
    log's key must have signed it, a known witness's cosignature must verify, and the origin is
    ``origin`` when given."""
    opened = open_note(message, [log_key, *witnesses])
    if log_key not in opened.verified:
        raise NotSignedBy(f"the checkpoint is not signed by the log's key {log_key.name}+{log_key.key_hash:08x}")
    checkpoint = Checkpoint.parse(opened.note.text)
    if origin is not None and checkpoint.origin != origin:
        raise NoteError(f"the checkpoint's origin is {checkpoint.origin!r}, not {origin!r}")
    return checkpoint, opened
