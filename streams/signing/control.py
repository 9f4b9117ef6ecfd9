"""The signatures of the ``lineage.control`` records (``RollbackCommand``, ``QuarantineNotice``,
``PlanCleared``, ``HaltCommand``; schemas v5; ``RetentionNotice``, v9): the message, what signing one needs of a key's
role, signing, checking, and the signer of the referee and of ``traintrace release``."""

from __future__ import annotations

from typing import Any, Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.signing.keys import RELEASE_PERMISSION, TrustedKeys, key_id
from streams.signing.message import (BAD_SIGNATURE, MALFORMED, OK, UNKNOWN_KEY, UNSIGNED, WRONG_ROLE, SignatureCheck,
                                     Signer, part, public_key_of, signature_bytes)

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
    # schemas v9 (SPEC §13); each item of deletable / kept is the part ``checkpoint_id reason by``
    # (0x1f between them; ``by`` empty when null)
    "RetentionNotice": ("command_id", "job_id", "cohort_id", "version", "deletable", "kept", "watermark_ms",
                        "settle_horizon_ms", "issued_ts", "key_id"),
}
#: the domain tag of each kind, the first part of its signing message
CONTROL_DOMAINS: dict[str, str] = {name: f"traintrace/{name}/v1" for name in CONTROL_FIELDS}


def control_permission(name: str, record: Mapping[str, Any]) -> str:
    """What signing ``record`` needs: its record name, or ``HaltCommand:RELEASE`` for a release
    (an operator's, which no processor key may sign)."""
    if name == "HaltCommand" and record.get("reason") == "RELEASE":
        return RELEASE_PERMISSION
    return name

def _item(v: Any) -> Any:
    """A list item as its part: a string as itself; a retained checkpoint (RetentionNotice) as
    ``checkpoint_id``, ``reason`` and ``by`` (empty when null) joined by 0x1f."""
    if isinstance(v, Mapping):
        return "\x1f".join(str(v.get(k) or "") for k in ("checkpoint_id", "reason", "by"))
    return v


def _field_part(name: str, value: Any) -> bytes:
    """``name=value`` (a null is the bare ``name``, so null and "" differ); a list is
    ``name#count`` followed by its items, one part each."""
    if value is None:
        return part(name, name)
    if isinstance(value, (list, tuple)):
        return part(f"{name}#{len(value)}", name) + b"".join(part(_item(v), f"{name}[]") for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} must be a string, an integer or a list, not {type(value).__name__}")
    return part(f"{name}={value}", name)

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
    return part(CONTROL_DOMAINS[name], "domain") + b"".join(_field_part(f, record.get(f)) for f in fields)

def sign_control(name: str, record: Mapping[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """A copy of the control record with ``key_id`` and ``signature`` set (deterministic)."""
    signed = {**record, "key_id": key_id(private_key)}
    signed["signature"] = private_key.sign(control_message(name, signed))
    return signed

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
    key = public_key_of(key)
    if key is None:
        return SignatureCheck(False, UNKNOWN_KEY, kid, f"trusted key {kid} is not a 32-byte Ed25519 key")
    sig = signature_bytes(sig_field)
    if sig is None:
        return SignatureCheck(False, MALFORMED, kid, f"{name} {cid}: signature is neither bytes nor hex")
    try:
        key.verify(sig, control_message(name, record))
    except InvalidSignature:
        return SignatureCheck(False, BAD_SIGNATURE, kid, f"{name} {cid}: the signature does not verify under key {kid}")
    except (TypeError, ValueError, AttributeError) as exc:
        return SignatureCheck(False, MALFORMED, kid, f"{name} {cid}: cannot verify: {exc}")
    return SignatureCheck(True, OK, kid, f"signed by {kid}")

class ControlSigner(Signer):
    """The callable ``(record name, record) -> signed record`` a
    :class:`~streams.referee.referee.Referee` signs its control records with (and
    ``traintrace release --signing-key``)."""

    def __call__(self, name: str, record: Mapping[str, Any]) -> dict[str, Any]:
        return sign_control(name, record, self.private_key)
