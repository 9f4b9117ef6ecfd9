"""Sealed events: only the job itself can extend its record (SPEC revision 3).

A job may declare an Ed25519 public key in its ``JobStarted`` (``public_key``, hex). From then on
the fold takes an event of that job only when the job's key vouches for it. The job vouches by
*sealing*: it signs the ``hash`` of an event (``signature`` = Ed25519 over
``SEAL_DOMAIN || bytes.fromhex(hash)``). Since each hash covers the previous one (SPEC §9), one
seal vouches for every event of the job up to it, so a job need not sign every event: the job
client seals every event but ``Progress``, and a ``Progress`` every few events or after a
short while (:mod:`streams.client.job`). Verifying a signature costs far more than folding an
event (about 120 µs against 65 µs here); sealing a run of events with one signature keeps the
processor's cost a few per cent.

The gate (:class:`SealGate`) sits in front of the fold:

- an event of a job without a key folds as before (nothing changes for unsigned jobs);
- a ``JobStarted`` that declares a key must be sealed by that key (proof of possession), and,
  when the processor has a list of issued keys, the key must be on it; with
  ``require_sealed``, a ``JobStarted`` without a key is refused;
- an unsealed event of a keyed job is *held* until a seal arrives whose chain leads back to it;
  then the sealed run folds in ``seq`` order. A held event that is not on the sealed chain (a
  different event took its ``seq``) is refused as forged, as is an unsealed event whose ``seq``
  the job's record already holds with other content, and any event whose seal does not verify;
- a refusal never touches the fold: a forgery for a running job is dead-lettered, it does not
  halt the job and the genuine event with that ``seq`` still folds when it comes.

Everything is deterministic in the order of the events given, so a replay of the same input
holds, releases and refuses exactly the same events. Cost: a dict lookup per event for jobs
without a key; for a keyed job one signature check per seal and a dict operation per held
event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey, VerifyKey

from streams.core.chain import chain_hash, canonical_with_nulls, event_digest
from streams.core.events import Event, JobStarted

#: What a seal signs, before the 32 bytes of the event's hash.
SEAL_DOMAIN = b"traintrace/event-seal/v1\x00"

#: The kinds of refusal (the dead letter's error kind).
FORGED = "FORGED_EVENT"
UNSIGNED_JOB = "UNSIGNED_JOB"
KEY_NOT_ISSUED = "KEY_NOT_ISSUED"


def seal_message(event_hash: str) -> bytes:
    """The bytes a seal signs for an event whose ``hash`` is ``event_hash`` (hex)."""
    return SEAL_DOMAIN + bytes.fromhex(event_hash)


class Sealer:
    """Seals a job's events with its private key (an ``Ed25519PrivateKey`` of ``cryptography``,
    as :mod:`streams.signing` loads and saves them, or 32 raw seed bytes), converted once."""

    def __init__(self, private_key: Any) -> None:
        raw = private_key if isinstance(private_key, bytes) else private_key.private_bytes_raw()
        self._key = SigningKey(raw)
        #: the ``public_key`` its job declares in ``JobStarted``
        self.public_key = self._key.verify_key.encode().hex()

    def seal(self, event_hash: str) -> str:
        """The ``signature`` (hex) that seals the event whose ``hash`` is ``event_hash``."""
        return self._key.sign(seal_message(event_hash)).signature.hex()

    def __repr__(self) -> str:
        return f"Sealer(public_key={self.public_key[:16]}…)"


def seal(event_hash: str, private_key: Any) -> str:
    """The ``signature`` (hex) that seals the event whose ``hash`` is ``event_hash`` (one-off: a
    job sealing many events keeps a :class:`Sealer`)."""
    return Sealer(private_key).seal(event_hash)


def public_key_hex(key: Any) -> str:
    """The ``public_key`` a ``JobStarted`` declares for ``key`` (a private or public
    ``cryptography`` Ed25519 key)."""
    pub = key.public_key() if hasattr(key, "public_key") else key
    raw: bytes = pub.public_bytes_raw()
    return raw.hex()


def load_public_key(text: str) -> VerifyKey | None:
    """The key a ``public_key`` field names, or None when it is not 32 bytes of hex."""
    try:
        raw = bytes.fromhex(text)
        return VerifyKey(raw) if len(raw) == 32 else None
    except (ValueError, TypeError, CryptoError):
        return None


def check_seal(event: Event, key: VerifyKey, canonical: bytes | None = None) -> str | None:
    """None when ``event`` is sealed by ``key`` and its hash is its content's; else why not."""
    if event.signature is None:
        return "it carries no seal (signature)"
    if event.hash is None:
        return "it carries a signature but no hash to seal"
    try:
        computed = chain_hash(event.prev_hash, event, canonical)
    except ValueError:
        return f"prev_hash {event.prev_hash!r} is not hex"
    if computed != event.hash:
        return f"its hash {event.hash} is not its content's ({computed})"
    try:
        key.verify(seal_message(event.hash), bytes.fromhex(event.signature))
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return "its signature does not verify with the job's key"
    return None


@dataclass(frozen=True, slots=True)
class SealPolicy:
    """What the processor demands of keys: ``require_sealed`` refuses jobs that declare none;
    ``issued_keys`` (hex public keys), when not empty, are the only keys a job may declare."""

    require_sealed: bool = False
    issued_keys: frozenset[str] = frozenset()
    #: the most events of one job held at once waiting for a seal; more are refused
    max_held: int = 4096


@dataclass(slots=True)
class Held:
    event: Event
    canonical: Any
    ref: Any
    #: the gate found the event's hash to be its content's (the fold need not compute it again)
    checked: bool = False


@dataclass(slots=True)
class Admission:
    """What the gate decided for one event: ``fold`` these now, in order (each ``Held``: the
    event, its canonical bytes if known, the caller's ``ref``); ``refused`` (ref, event, kind,
    reason); ``held``: the event waits for a seal."""

    fold: list[Held] = field(default_factory=list)
    refused: list[tuple[Any, Event, str, str]] = field(default_factory=list)
    held: bool = False


#: the admission of every held event (read only)
HELD = Admission(held=True)


class SealGate:
    """Held events and loaded keys of the jobs that declared one. ``jobs`` is the fold's job
    table (:attr:`streams.core.state.LineageState.jobs`): a job's key is what its folded
    ``JobStarted`` declared (``Job.public_key``)."""

    def __init__(self, jobs: dict[str, Any], policy: SealPolicy | None = None) -> None:
        self.jobs = jobs
        self.policy = policy or SealPolicy()
        self.keys: dict[str, VerifyKey] = {}
        #: job -> seq -> events held at that seq, in arrival order
        self.held: dict[str, dict[int, list[Held]]] = {}
        self.held_count: dict[str, int] = {}  # job -> events held
        self.holding = 0  # events held, all jobs

    def passes(self, event: Event) -> bool:
        """True when ``event`` folds as it is, without the gate (the fast path)."""
        job = self.jobs.get(event.job_id)
        if job is not None and job.public_key is not None:
            return False
        if type(event) is JobStarted:
            return event.public_key is None and not self.policy.require_sealed
        return True

    def admit(self, event: Event, canonical: Any = None, ref: Any = None) -> Admission:
        job = self.jobs.get(event.job_id)
        if job is None or job.public_key is None:
            return self._unkeyed(event, canonical, ref)
        key = self._key(job)
        if key is None:
            return self._refuse(event, ref, FORGED, f"{_name(event)}: the key the job's record pins "
                                f"({str(job.public_key)[:16]!r}) is not an Ed25519 public key in hex")
        if event.seq < job.next_seq:
            return self._past(job, key, event, canonical, ref)
        if event.signature is None:
            return self._hold(event, canonical, ref)
        problem = check_seal(event, key, canonical[0] if canonical else None)
        if problem:
            return self._refuse(event, ref, FORGED, f"{_name(event)} is forged: {problem}")
        return self._release(job, event, canonical, ref)

    def unsealed(self) -> list[tuple[Any, Event, str, str]]:
        """Every held event, refused (the end of an offline log: no seal will come)."""
        out = []
        for job_id in sorted(self.held):
            for seq in sorted(self.held[job_id]):
                for h in self.held[job_id][seq]:
                    out.append((h.ref, h.event, FORGED,
                                f"{_name(h.event)} was never sealed by its job's key"))
        self.held.clear()
        self.held_count.clear()
        self.holding = 0
        return out

    # ------------------------------------------------------------------ cases

    def _unkeyed(self, event: Event, canonical: Any, ref: Any) -> Admission:
        if type(event) is not JobStarted or (self.jobs.get(event.job_id) or _NoJob).registered:
            return Admission([Held(event, canonical, ref)])  # a second JobStarted: the fold halts it
        pk = event.public_key
        if pk is None:
            if self.policy.require_sealed:
                return self._refuse(event, ref, UNSIGNED_JOB,
                                    f"{_name(event)} declares no public_key and this processor requires sealed jobs")
            return Admission([Held(event, canonical, ref)])
        if self.policy.issued_keys and pk not in self.policy.issued_keys:
            return self._refuse(event, ref, KEY_NOT_ISSUED,
                                f"{_name(event)} declares key {pk[:16]}…, which is not among the issued job keys")
        key = load_public_key(pk)
        if key is None:
            return self._refuse(event, ref, FORGED, f"{_name(event)}: public_key is not an Ed25519 key in hex")
        problem = check_seal(event, key, canonical[0] if canonical else None)
        if problem:
            return self._refuse(event, ref, FORGED, f"{_name(event)} is not sealed by the key it declares: {problem}")
        self.keys[event.job_id] = key
        return Admission([Held(event, canonical, ref)])

    def _past(self, job: Any, key: VerifyKey, event: Event, canonical: Any, ref: Any) -> Admission:
        """An event at a ``seq`` the job's record already holds: a redelivery folds (and is
        dropped as a duplicate); other content is the job's own conflict only if sealed."""
        if canonical is None:
            canonical = canonical_with_nulls(event)
        known = _digest_at(job, event.seq)
        if known == 0 or event_digest(event, canonical) == known:
            # a redelivery (the fold drops it), or an event late past a gap (the fold refuses it)
            return Admission([Held(event, canonical, ref)])
        if event.signature is None:
            return self._refuse(event, ref, FORGED, f"{_name(event)} is forged: the job's sealed record "
                                f"holds other content at seq {event.seq}")
        problem = check_seal(event, key, canonical[0])
        if problem:
            return self._refuse(event, ref, FORGED, f"{_name(event)} is forged: {problem}")
        return Admission([Held(event, canonical, ref)])  # sealed by the job: its own conflict

    def _hold(self, event: Event, canonical: Any, ref: Any) -> Admission:
        if event.hash is None:
            return self._refuse(event, ref, FORGED, f"{_name(event)} carries no hash, so no seal can cover it")
        n = self.held_count.get(event.job_id, 0)
        if n >= self.policy.max_held:
            return self._refuse(event, ref, FORGED, f"{_name(event)}: {n} events of the job already "
                                "wait for a seal")
        self.held.setdefault(event.job_id, {}).setdefault(event.seq, []).append(Held(event, canonical, ref))
        self.held_count[event.job_id] = n + 1
        self.holding += 1
        return HELD

    def _release(self, job: Any, sealed: Event, canonical: Any, ref: Any) -> Admission:
        """Fold the run the seal vouches for, back from ``sealed`` through held events while
        the hashes link; refuse the held events at those ``seq`` that are not on it."""
        held = self.held.get(job.job_id, {})
        run = [Held(sealed, canonical, ref, True)]
        cur = sealed
        while cur.seq > job.next_seq:
            link = next((h for h in held.get(cur.seq - 1, ()) if h.event.hash == cur.prev_hash
                         and _hash_ok(h)), None)
            if link is None:
                break  # the events before are missing: the fold sees the gap (LEDGER_GAP)
            run.append(link)
            cur = link.event
        run.reverse()
        out = Admission(run)
        on_run = {h.event.seq: h for h in run}
        for seq in [s for s in held if s <= sealed.seq]:
            for h in held.pop(seq):
                self.held_count[job.job_id] -= 1
                self.holding -= 1
                if h is on_run.get(seq):
                    continue
                twin = on_run.get(seq)
                if twin is not None and h.event.hash == twin.event.hash and _same(h, twin):
                    out.fold.append(h)  # a redelivery of a sealed event: the fold drops it
                    continue
                out.refused.append((h.ref, h.event, FORGED, f"{_name(h.event)} is forged: the job sealed "
                                    f"other content at seq {seq} (seal at seq {sealed.seq})"))
        if not held:
            self.held.pop(job.job_id, None)
            self.held_count.pop(job.job_id, None)
        return out

    def _refuse(self, event: Event, ref: Any, kind: str, reason: str) -> Admission:
        return Admission(refused=[(ref, event, kind, reason)])

    def _key(self, job: Any) -> VerifyKey | None:
        """The job's loaded key; None when what its record pins is no key (only a restored
        state can hold one: the gate pins only keys it loaded, :meth:`_unkeyed` refuses others)."""
        key = self.keys.get(job.job_id)
        if key is None:  # pinned by a JobStarted folded before this gate existed (a restored state)
            key = load_public_key(job.public_key)
            if key is not None:
                self.keys[job.job_id] = key
        return key


class _NoJob:
    registered = False


def _name(event: Event) -> str:
    return f"{type(event).__name__} ({event.job_id!r}, seq {event.seq})"


def _digest_at(job: Any, seq: int) -> int:
    return job.digests[seq] if seq < len(job.digests) else 0


def _hash_ok(h: Held) -> bool:
    """The held event's hash is its content's (a forger may copy a genuine hash onto other
    content). Keeps the canonical bytes it computes for the fold."""
    if h.canonical is None:
        h.canonical = canonical_with_nulls(h.event)
    try:
        h.checked = chain_hash(h.event.prev_hash, h.event, h.canonical[0]) == h.event.hash
    except ValueError:
        return False
    return h.checked


def _same(a: Held, b: Held) -> bool:
    return event_digest(a.event, a.canonical) == event_digest(b.event, b.canonical)
