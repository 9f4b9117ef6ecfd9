"""Ed25519 signatures of ``LineageCommitment`` records (SPEC §9: "It can be signed with the
processor's key"), of ``CohortSnapshot`` and of the ``lineage.control`` records.

One concern a module: :mod:`.keys` (keys, keyrings, roles), :mod:`.message` (the part encoding,
the outcome of a check, a signer), :mod:`.commitments`, :mod:`.snapshots`, :mod:`.control`;
everything is importable from here.

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

from streams.signing.keys import (  # noqa: F401
    SIGNING_KEY_ENV,
    PRIVATE_KEY_FILE,
    KEY_SUFFIXES,
    PROCESSOR,
    OPERATOR,
    TRAINER,
    TRUSTED_KEYS_ENV,
    COMMITMENT,
    RELEASE_PERMISSION,
    ROLE_PERMISSIONS,
    SigningError,
    generate_key,
    public_key_bytes,
    key_id,
    public_key_file_name,
    save_private_key,
    save_public_key,
    load_private_key,
    load_public_key,
    load_keyring,
    KeyPair,
    write_keypair,
    TrustedKeys,
    load_trusted_keys,
    issued_job_keys,
)
from streams.signing.message import (  # noqa: F401
    OK,
    UNSIGNED,
    UNKNOWN_KEY,
    MALFORMED,
    BAD_SIGNATURE,
    HEADS_MISMATCH,
    WRONG_ROLE,
    part,
    typed_field,
    SignatureCheck,
    signature_bytes,
    public_key_of,
    Signer,
)
from streams.signing.commitments import (  # noqa: F401
    DOMAIN,
    snapshot_digest,
    signing_message,
    sign_commitment,
    check_commitment,
    verify_commitment,
    CommitmentSigner,
    log_origin,
    checkpoint_note,
    check_checkpoint,
    checkpoint_problem,
)
from streams.signing.notes import (  # noqa: F401
    Checkpoint,
    NoteError,
    NoteKey,
    NoteSigner,
    open_checkpoint,
    open_note,
    parse_note,
    sign_checkpoint,
)
from streams.signing.snapshots import (  # noqa: F401
    SNAPSHOT_DOMAIN,
    snapshot_message,
    SnapshotSigner,
    check_snapshot,
)
from streams.signing.control import (  # noqa: F401
    CONTROL_FIELDS,
    CONTROL_DOMAINS,
    control_permission,
    control_message,
    sign_control,
    unverified_row,
    check_control,
    ControlSigner,
)

__all__ = [
    "BAD_SIGNATURE",
    "COMMITMENT",
    "CONTROL_DOMAINS",
    "CONTROL_FIELDS",
    "CommitmentSigner",
    "ControlSigner",
    "DOMAIN",
    "HEADS_MISMATCH",
    "KEY_SUFFIXES",
    "KeyPair",
    "MALFORMED",
    "OK",
    "OPERATOR",
    "PRIVATE_KEY_FILE",
    "PROCESSOR",
    "RELEASE_PERMISSION",
    "ROLE_PERMISSIONS",
    "SIGNING_KEY_ENV",
    "SNAPSHOT_DOMAIN",
    "SignatureCheck",
    "Signer",
    "SigningError",
    "SnapshotSigner",
    "TRAINER",
    "TRUSTED_KEYS_ENV",
    "TrustedKeys",
    "UNKNOWN_KEY",
    "UNSIGNED",
    "WRONG_ROLE",
    "check_commitment",
    "check_control",
    "check_snapshot",
    "control_message",
    "control_permission",
    "generate_key",
    "issued_job_keys",
    "key_id",
    "load_keyring",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
    "part",
    "public_key_bytes",
    "public_key_file_name",
    "public_key_of",
    "save_private_key",
    "save_public_key",
    "sign_commitment",
    "sign_control",
    "signature_bytes",
    "signing_message",
    "snapshot_digest",
    "snapshot_message",
    "typed_field",
    "unverified_row",
    "verify_commitment",
    "write_keypair",
]
