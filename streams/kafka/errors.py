"""Errors of the Kafka adapters."""

from __future__ import annotations

from streams.errors import TraintraceError


class KafkaAdapterError(TraintraceError):
    """A Kafka operation of traintrace failed; the message says which and why."""
