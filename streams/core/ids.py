"""Identifiers of SPEC §10: hashes of several parts."""

from __future__ import annotations

import hashlib
from typing import Iterable


def _part(value: object) -> bytes:
    if value is None:
        text = ""
    elif isinstance(value, bool):  # never expected, but never "True"
        text = "1" if value else "0"
    else:
        text = str(value)
    return text.encode("utf-8") + b"\x00"


def hash_parts(parts: Iterable[object]) -> str:
    """SHA-256 over each part as UTF-8 text (numbers decimal, null empty) + one 0x00 byte."""
    h = hashlib.sha256()
    for p in parts:
        h.update(_part(p))
    return h.hexdigest()


def incident_id(job_id: str, incarnation: int, onset_step: int) -> str:
    return hash_parts((job_id, incarnation, onset_step))


def command_id(
    incident_ids: Iterable[str],
    job_id: str,
    incarnation: int,
    action: str,
    target_checkpoint_id: str | None,
) -> str:
    return hash_parts((*sorted(incident_ids), job_id, incarnation, action, target_checkpoint_id))
