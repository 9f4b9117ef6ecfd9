"""Errors of the training-job client."""

from __future__ import annotations
from streams.errors import TraintraceError


class ClientError(TraintraceError):
    """The client cannot do what was asked (bad journal, Kafka buffer full past the timeout,
    invalid event fields, ...); the message says what and why."""


class GateRefused(ClientError):
    """The load-time gate refused a checkpoint: tainted, unknown to the referee (or the referee
    unreachable) in ``gate="refuse"`` mode, or the loaded content does not match the recorded
    hash. Nothing was emitted.

    ``checkpoint_id``, ``status`` (``tainted`` / ``unknown`` / ``mismatch``) and ``detail``
    (the worker's answer, or the hashes compared) say why.
    """

    def __init__(self, message: str, checkpoint_id: str, status: str, detail: dict | None = None) -> None:
        super().__init__(message)
        self.checkpoint_id = checkpoint_id
        self.status = status
        self.detail = dict(detail or {})
