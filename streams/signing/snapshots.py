"""The signature of a ``CohortSnapshot`` (the worker's snapshots, signed with the commitments' key)."""

from __future__ import annotations

from typing import Any, Mapping

from cryptography.exceptions import InvalidSignature

from streams.signing.message import (BAD_SIGNATURE, MALFORMED, OK, UNKNOWN_KEY, UNSIGNED, Signer, part, public_key_of,
                                     signature_bytes, typed_field)

#: the domain tag of a CohortSnapshot's signing message
SNAPSHOT_DOMAIN = "traintrace/CohortSnapshot/v1"


def snapshot_message(record: Mapping[str, Any]) -> bytes:
    """The bytes a ``CohortSnapshot``'s signature is over: every field but the state itself
    (its digest stands for it) and the signature."""
    parts = [(SNAPSHOT_DOMAIN, "domain")]
    for name, kind, nullable in (("cohort_id", str, False), ("partition", int, False), ("covers", int, False),
                                 ("input_offset", int, True), ("format", int, False), ("digest", str, False),
                                 ("ts", int, False), ("key_id", str, True)):
        parts.append((typed_field(record, name, kind, nullable), name))
    parts.append(("1" if record.get("settled") else "0", "settled"))
    return b"".join(part(v, what) for v, what in parts)

class SnapshotSigner(Signer):
    """Signs the worker's ``CohortSnapshot`` records (with the commitments' key)."""

    def __call__(self, record: Mapping[str, Any]) -> dict[str, Any]:
        signed = {**record, "key_id": self.key_id}
        return {**signed, "signature": self.private_key.sign(snapshot_message(signed))}

def check_snapshot(record: Mapping[str, Any], keys: Mapping[str, Any]) -> tuple[bool, str]:
    """``(ok, reason)`` of a ``CohortSnapshot``'s signature under ``{key_id: public key}``:
    ``OK``, ``UNSIGNED``, ``UNKNOWN_KEY``, ``MALFORMED`` or ``BAD_SIGNATURE``. Never raises."""
    kid, sig = record.get("key_id"), signature_bytes(record.get("signature"))
    if not sig or not isinstance(kid, str):
        return False, UNSIGNED
    key = public_key_of(keys.get(kid)) if keys.get(kid) is not None else None
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
