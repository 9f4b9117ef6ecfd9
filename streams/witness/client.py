"""The client side of C2SP tlog-witness (``POST <prefix>/add-checkpoint``).

The request body is ``old <size>``, the consistency proof from that size (one base64 hash a
line), a blank line and the signed checkpoint note. The witness answers 200 with its
cosignature lines; 409 with the size it last cosigned (``text/x.tlog.size``) when ``old`` is not
that size; 403 when no trusted key of the origin signed the note (litewitness v0.6.1 also for an
unknown origin, which the specification makes 404); 422 when the proof does not hold; 400 for a
malformed request.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable, Sequence

from streams.errors import TraintraceError
from streams.signing.notes import COSIGNATURE_V1, Checkpoint, Note, NoteError, NoteKey, open_note, parse_note

#: seconds a witness may take to answer
TIMEOUT_S = 10.0


class WitnessError(TraintraceError):
    """A witness could not be asked, or answered what the protocol does not allow."""


class WitnessRefused(WitnessError):
    """The witness answered with a refusal (``status``: 400, 403, 404, 409, 422, ...)."""

    def __init__(self, witness: str, status: int, body: str) -> None:
        self.status, self.body = status, body
        super().__init__(f"witness {witness}: HTTP {status}: {body.strip()[:200]}")


@dataclass(frozen=True)
class Witness:
    """A witness: its submission prefix (``http://host:port``) and its cosignature key."""

    url: str
    key: NoteKey

    def __post_init__(self) -> None:
        if self.key.kind != COSIGNATURE_V1:
            raise NoteError(f"witness {self.url}: its key {self.key.name} is not a cosignature/v1 key (0x04)")

    @classmethod
    def parse(cls, text: str) -> "Witness":
        """``<vkey>@<url>``, the form of ``--witness``."""
        vkey, sep, url = text.rpartition("@")
        if not sep or not url.startswith(("http://", "https://")):
            raise WitnessError(f"witness {text[:80]!r}: expected <verifier key>@<http(s) URL>")
        return cls(url.rstrip("/"), NoteKey.parse(vkey))


def add_checkpoint_body(old_size: int, proof: Sequence[bytes], signed_checkpoint: str) -> bytes:
    """The ``add-checkpoint`` request body."""
    lines = [f"old {old_size}\n"] + [base64.b64encode(h).decode() + "\n" for h in proof]
    return ("".join(lines) + "\n" + signed_checkpoint).encode("utf-8")


def submit(witness: Witness, signed_checkpoint: str, old_size: int, proof: Sequence[bytes],
           timeout: float = TIMEOUT_S) -> str:
    """One ``add-checkpoint``: the witness's cosignature lines (verified by its key) or
    :class:`WitnessRefused` (``status`` 409: ``int(body)`` is the size it knows)."""
    req = urllib.request.Request(witness.url + "/add-checkpoint", method="POST",
                                 data=add_checkpoint_body(old_size, proof, signed_checkpoint))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        raise WitnessRefused(witness.url, exc.code, exc.read().decode("utf-8", errors="replace")) from None
    except (urllib.error.URLError, OSError) as exc:
        raise WitnessError(f"witness {witness.url}: {getattr(exc, 'reason', exc)}") from None
    note = parse_note(signed_checkpoint).with_signatures(body)
    try:
        open_note(note, [witness.key])
    except NoteError as exc:
        raise WitnessError(f"witness {witness.url}: its answer is no valid cosignature: {exc}") from None
    return "".join(s.line() for s in note.signatures
                   if (s.name, s.key_hash) == (witness.key.name, witness.key.key_hash))


def cosign(witness: Witness, signed_checkpoint: str, known_size: int,
           proof_from: Callable[[int, int], Sequence[bytes]], timeout: float = TIMEOUT_S) -> tuple[Note, int]:
    """Have ``witness`` cosign a checkpoint: submitted with the consistency proof from
    ``known_size`` (what we believe it cosigned last; 0 at first) given by ``proof_from(old,
    new)``, and once more from the size it answers with a 409. Returns the note with the
    cosignature and the size the witness now knows."""
    size = Checkpoint.parse(parse_note(signed_checkpoint).text).size
    old = known_size
    for attempt in range(2):
        proof = proof_from(old, size) if 0 < old < size else []
        try:
            lines = submit(witness, signed_checkpoint, old, proof, timeout)
            return parse_note(signed_checkpoint).with_signatures(lines), size
        except WitnessRefused as exc:
            if exc.status != 409 or attempt:
                raise
            try:
                old = int(exc.body.strip())
            except ValueError:
                raise WitnessError(f"witness {witness.url}: a 409 without its size: {exc.body[:80]!r}") from None
            if old > size:
                raise WitnessError(f"witness {witness.url} has cosigned size {old} of this log, beyond {size}: "
                                   "another history was shown to it (a split view)") from None
    raise AssertionError("unreachable")  # pragma: no cover
