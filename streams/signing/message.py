"""What every signature of traintrace shares: the SPEC §10 part encoding of a signing message,
the outcome of a check (:class:`SignatureCheck` and its reasons), and a signer's key."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from streams.signing.keys import key_id, load_private_key

# verification outcomes (the ``reason`` of a check)
OK = "OK"
UNSIGNED = "UNSIGNED"              # no signature (or no key_id)
UNKNOWN_KEY = "UNKNOWN_KEY"        # key_id not in the trusted keyring
MALFORMED = "MALFORMED"            # a field the message needs is missing or of the wrong type
BAD_SIGNATURE = "BAD_SIGNATURE"    # the signature does not verify under the named key
HEADS_MISMATCH = "HEADS_MISMATCH"  # signed root is fine, but the heads do not hash to it
WRONG_ROLE = "WRONG_ROLE"          # the key is trusted, but not for this kind of record


def part(value: Any, what: str) -> bytes:
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

def typed_field(record: Mapping[str, Any], name: str, kind: type, nullable: bool = False) -> Any:
    if name not in record and not nullable:
        raise ValueError(f"{name} is missing")
    v = record.get(name)
    if v is None and nullable:
        return None
    if not isinstance(v, kind) or isinstance(v, bool):
        raise ValueError(f"{name} must be {kind.__name__}{' or null' if nullable else ''}, not {v!r}")
    return v

@dataclass(frozen=True)
class SignatureCheck:
    ok: bool
    reason: str                 # OK, UNSIGNED, UNKNOWN_KEY, MALFORMED, BAD_SIGNATURE, HEADS_MISMATCH
    key_id: str | None = None
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason

def signature_bytes(sig: Any) -> bytes | None:
    if isinstance(sig, (bytes, bytearray, memoryview)):
        return bytes(sig)
    if isinstance(sig, str):  # the hex of a JSON document
        try:
            return bytes.fromhex(sig)
        except ValueError:
            return None
    return None

def public_key_of(key: Any) -> Ed25519PublicKey | None:
    """A trusted key as a public key (a keyring may hold the raw 32 bytes); None when it is not one."""
    if isinstance(key, (bytes, bytearray)):
        try:
            return Ed25519PublicKey.from_public_bytes(bytes(key))
        except ValueError:
            return None
    return key

class Signer:
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
