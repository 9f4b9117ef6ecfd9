"""The records the processor publishes, typed: one frozen dataclass per record kind, beside the
events of :mod:`streams.core.events`, pure (no Kafka, no Avro). The referee builds them
(:mod:`streams.referee.records`); the codec converts them to and from Avro at its boundary
(``Codec.encode_typed`` / ``Codec.decode_typed``); each one's fields are the newest schema's,
checked by ``tests/unit/test_record_shapes.py``."""

from __future__ import annotations

from typing import Any, Mapping

from streams.records.base import SIGNER_FIELDS, Record
from streams.records.control import HaltCommand, PlanCleared, QuarantineNotice, RetentionNotice, RollbackCommand
from streams.records.published import (Alert, CheckpointStatus, CohortSnapshot, DeadLetter, DivergenceManifest,
                                       EventBatch, LineageCommitment, SnapshotRound)

#: record name -> its class
RECORD_TYPES: dict[str, type[Record]] = {cls.NAME: cls for cls in (
    RollbackCommand, QuarantineNotice, PlanCleared, HaltCommand, Alert, DivergenceManifest, CheckpointStatus,
    LineageCommitment, CohortSnapshot, SnapshotRound, DeadLetter, EventBatch, RetentionNotice)}
#: the commands of lineage.control (a RetentionNotice is on it too, but is no command: it
#: tells a job what it may delete, see streams.client.retention)
CONTROL_TYPES: dict[str, type[Record]] = {cls.NAME: cls for cls in (
    RollbackCommand, QuarantineNotice, PlanCleared, HaltCommand)}


def typed(name: str, value: Mapping[str, Any]) -> Record:
    """The typed record of a decoded value of record ``name`` (KeyError: not a record kind)."""
    return RECORD_TYPES[name].from_value(value)


__all__ = ["Alert", "CONTROL_TYPES", "CheckpointStatus", "CohortSnapshot", "DeadLetter", "DivergenceManifest",
           "EventBatch", "HaltCommand", "LineageCommitment", "PlanCleared", "QuarantineNotice", "RECORD_TYPES",
           "Record", "RetentionNotice", "RollbackCommand", "SIGNER_FIELDS", "SnapshotRound", "typed"]
