"""A sealed job's events built by hand, for tests: chained (SPEC §9) and, where asked, sealed by the
job's key (:mod:`streams.core.seals`) — or by another key, as a forger would."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from streams.core.chain import GENESIS, chain_hash
from streams.core.events import Event, parse_event
from streams.core.seals import public_key_hex, seal


class SealedJob:
    """Writes one job's chained events, sealing the ones asked. ``advance=False`` builds an event
    at the job's next ``seq`` without moving on (a forgery, or a second candidate)."""

    def __init__(self, job_id: str = "A", key: Ed25519PrivateKey | None = None, cohort: str = "c1") -> None:
        self.job_id, self.cohort = job_id, cohort
        self.key = key or Ed25519PrivateKey.generate()
        self.seq, self.head, self.ts = 0, GENESIS, 1000

    def event(self, etype: str, fields: dict[str, Any], sealed: bool = True, key: Any = None,
              advance: bool = True) -> Event:
        ev = parse_event({"type": etype, "job_id": self.job_id, "seq": self.seq, "incarnation": 0, "ts": self.ts,
                          "prev_hash": self.head, **fields})
        ev = replace(ev, hash=chain_hash(ev.prev_hash, ev))
        if sealed:
            ev = replace(ev, signature=seal(ev.hash, key or self.key))
        if advance:
            self.seq, self.head, self.ts = self.seq + 1, ev.hash, self.ts + 10
        return ev

    def start(self, sealed: bool = True, declare: Any = True, key: Any = None) -> Event:
        """``declare``: True (the job's key), None (no key: an unsealed job) or a key's hex."""
        pk = public_key_hex(self.key) if declare is True else declare
        return self.event("JobStarted", {"cohort_id": self.cohort, "base_model": "m", "base_checkpoint_id": None,
                                         "config_hash": None, "public_key": pk}, sealed, key)

    def progress(self, step: int, loss: float = 1.0, sealed: bool = False, advance: bool = True) -> Event:
        return self.event("Progress", {"step": step, "epoch": 0, "loss": loss, "grad_norm": None, "lr": None},
                          sealed, advance=advance)

    def checkpoint(self, step: int, sealed: bool = True) -> Event:
        return self.event("CheckpointWritten", {"checkpoint_id": f"{self.job_id}-{step}", "step": step,
                                                "epoch": 0, "content_hash": f"{step:064x}", "uri": "u"}, sealed)

    def consumed(self, checkpoint_id: str, sealed: bool = True) -> Event:
        return self.event("CheckpointConsumed", {"source_checkpoint_id": checkpoint_id, "step": 0, "mode": "INIT"},
                          sealed)

    def diverged(self, onset: int, sealed: bool = True, key: Any = None, advance: bool = True,
                 reason: str = "r") -> Event:
        return self.event("DivergenceReported", {"onset_step": onset, "detector": "d", "reason": reason},
                          sealed, key, advance)
