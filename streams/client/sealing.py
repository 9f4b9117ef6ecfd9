"""The job's seals: which events the client signs, and the key it signs them with.

Why a policy and not a signature per event: a seal (:func:`streams.core.seals.seal`, Ed25519
over the event's ``hash``) vouches for every earlier event of the job, since each hash covers
the one before (SPEC §9). Signing costs about 25 µs (libsodium) here, a few per cent of the
client's ~0.8 ms per training step, and checking a seal costs the processor about 60 µs — as
much as folding an event — so the client seals what matters at once and the rest in runs:

- every event that is not a ``Progress`` (``JobStarted``, checkpoints, consumptions,
  divergences, rollbacks, the finish): the processor folds them, and what hangs on them, without
  waiting;
- a ``Progress`` when ``every`` events went unsealed before it, or ``ms`` milliseconds passed
  since the oldest of them — so a run the processor holds (it folds an unsealed event of a keyed
  job only once a later seal covers it) is at most ``every`` events long and rarely older than
  ``ms``;
- and when the job goes idle with unsealed events (nothing emitted for ``ms``), a *seal record*:
  the head event again, the same content, now carrying its ``signature``. The processor releases
  the held run with it and drops it as a duplicate of the head.

:class:`SealSchedule` is that decision alone — pure, clocked by the caller — so it is tested
without threads or a broker. :func:`resolve_job_key` is where the job's key comes from: given,
``$TRAINTRACE_JOB_KEY``, or generated on first start and kept in the journal directory (mode
0600), so a restarted process signs with the key its ``JobStarted`` declared.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.client.errors import ClientError
from streams.core.seals import Sealer, public_key_hex
from streams.signing import SigningError, generate_key, load_private_key, save_private_key

log = logging.getLogger("traintrace.client")

#: the job's private key, in its journal directory (PKCS#8 PEM, mode 0600)
JOB_KEY_FILE = "traintrace-job-key.pem"
#: a path to the job's private key (PEM), used when ``job_key`` is not given
JOB_KEY_ENV = "TRAINTRACE_JOB_KEY"

#: at least every 64th event is sealed, and an unsealed one waits at most about a second: the
#: processor checks about one seal per job and second (~60 µs), plus every non-Progress event
SEAL_EVERY = 64
SEAL_MS = 1000.0


@dataclass(slots=True)
class SealSchedule:
    """Which event to seal (module doc). Times are the caller's monotonic clock in ms."""

    every: int = SEAL_EVERY
    ms: float = SEAL_MS
    #: events emitted unsealed since the last seal
    unsealed: int = 0
    #: when the oldest of them was emitted
    oldest: float | None = None
    #: when the last event was emitted
    last: float | None = None

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ClientError(f"seal_every must be >= 1, got {self.every}")
        if not self.ms > 0:
            raise ClientError(f"seal_ms must be > 0, got {self.ms}")

    def wants_seal(self, etype: str, now: float) -> bool:
        """Seal the event of type ``etype`` about to be emitted at ``now``?"""
        if etype != "Progress":
            return True
        if self.unsealed + 1 >= self.every:
            return True
        return self.oldest is not None and now - self.oldest >= self.ms

    def emitted(self, sealed: bool, now: float) -> None:
        """An event was emitted at ``now``, sealed or not."""
        self.last = now
        if sealed:
            self.unsealed, self.oldest = 0, None
        else:
            self.unsealed += 1
            if self.oldest is None:
                self.oldest = now

    def idle_due(self, now: float) -> bool:
        """Send a seal record now: events wait unsealed and nothing was emitted for ``ms``."""
        return self.unsealed > 0 and self.last is not None and now - self.last >= self.ms

    def head_sealed(self) -> None:
        """A seal record of the head was sent: nothing waits any more."""
        self.unsealed, self.oldest = 0, None


def sealed_dict(data: dict[str, Any], sealer: Sealer) -> dict[str, Any]:
    """The event ``data`` (its Avro dict, with its ``hash``) with its ``signature`` set."""
    return {**data, "signature": sealer.seal(data["hash"])}


def resolve_job_key(job_key: Any, directory: Path, declared: str | None, started: bool) -> Ed25519PrivateKey | None:
    """The key the job signs with, or None for an unsealed job.

    ``job_key``: an ``Ed25519PrivateKey``, a path to a PEM private key, ``True`` (the key kept
    in ``directory``, generated on the first start), ``False`` (no sealing) or None (the path in
    ``$TRAINTRACE_JOB_KEY``, else as ``True``). ``declared``/``started``: what the journal says
    the job's ``JobStarted`` declared. A job that declared a key must go on with that very key;
    a job that started without one stays unsealed (its record has no key to check against).
    """
    if job_key is None:
        job_key = os.environ.get(JOB_KEY_ENV) or True
    if job_key is False:
        if declared is not None:
            raise ClientError(f"the job declared public key {declared[:16]}… in its JobStarted, so "
                              "every later event must be sealed by it: job_key=False cannot continue it")
        return None
    if started and declared is None:
        if job_key is not True:
            log.warning("traintrace client: the job started without a public key; its events stay "
                        "unsealed (the job_key given is not used)")
        return None
    if job_key is True:
        key = _kept_key(directory, declared)
    elif isinstance(job_key, Ed25519PrivateKey):
        key = job_key
    elif isinstance(job_key, (str, os.PathLike)):
        key = _load(Path(job_key))
    else:
        raise ClientError(f"job_key must be an Ed25519PrivateKey, a path, True or False, not "
                          f"{type(job_key).__name__}")
    if declared is not None and public_key_hex(key) != declared:
        raise ClientError(f"the job key (public {public_key_hex(key)[:16]}…) is not the key the job "
                          f"declared in its JobStarted ({declared[:16]}…): a job keeps its key")
    return key


def _load(path: Path) -> Ed25519PrivateKey:
    try:
        return load_private_key(path)
    except SigningError as exc:
        raise ClientError(f"job key: {exc}") from exc


def _kept_key(directory: Path, declared: str | None) -> Ed25519PrivateKey:
    """The key in ``directory``; generated (and saved, 0600) when the job has none yet."""
    path = directory / JOB_KEY_FILE
    if path.exists():
        return _load(path)
    if declared is not None:
        raise ClientError(f"the journal in {directory} says the job declared public key {declared[:16]}… "
                          f"but its private key {path} is missing: restore it (or pass job_key=) — the "
                          "job's later events cannot be sealed without it")
    key = generate_key()
    try:
        save_private_key(key, path)
    except SigningError as exc:
        raise ClientError(f"job key: {exc}") from exc
    log.info("traintrace client: generated the job's key %s (public %s…)", path, public_key_hex(key)[:16])
    return key


class SealingMixin:
    """Sending seal records of the head event: on demand, after a restart, before a flush or
    close, and from the idle timer (a part of ``JobClient``: it uses the client's journal,
    delivery, lock and :class:`SealSchedule`)."""

    def _seal_head(self, why: str) -> bool:
        """Under the lock: send a seal record of the head event (module doc); False when there
        is no head content to seal (nothing emitted, or a journal without its head entry)."""
        data = self._head_data
        if data is None:
            head = self._journal.head_entry
            if head is None:
                log.warning("traintrace client %s: the head event (seq %d) is not in the journal, so it "
                            "cannot be sealed again; the job's next sealed event vouches for it", self.job_id,
                            self.seq)
                return False
            data = self.codec.decode_event(head.value)
        value = self.codec.encode_event(sealed_dict(data, self._seals))
        self._delivery.send_seal(data["seq"], value, self._event_headers(data["type"]))
        self._seal_policy.head_sealed()
        self.seal_records += 1
        log.debug("traintrace client %s: seal record of seq %d (%s)", self.job_id, data["seq"], why)
        return True

    def _seal_restarted_head(self) -> None:
        """A restart whose head event was never sealed seals it now: the events before it may be
        held by the processor, waiting for a seal that the last process did not send."""
        head = self._journal.head_entry
        if self._key is not None and self._journal.state.started and not (head is not None and head.sealed):
            self._seal_head("restart")

    def _seal_pending(self, why: str) -> None:
        """Under the lock: seal the head if events wait unsealed (flush, close)."""
        if self._key is not None and self._seal_policy.unsealed > 0 and not self._closed:
            self._seal_head(why)

    def _seal_loop(self) -> None:
        """The timer: a seal record when the job went idle with unsealed events."""
        tick = max(0.005, self._seal_policy.ms / 4000)
        while not self._sealer_stop.wait(tick):
            try:
                with self._lock:
                    if self._closed or self._delivery.closed:  # closed, or a test's simulated crash
                        return
                    if self._seal_policy.idle_due(time.monotonic() * 1000):
                        self._seal_head("idle")
            except Exception:  # never let the timer die silently; the next seal covers the run
                log.exception("traintrace client %s: sealing the head failed", self.job_id)
