"""PyTorch: see :mod:`streams.integrations.torch`."""

from streams.integrations.store import CheckpointStore
from streams.integrations.torch import (
    TorchCheckpoint,
    TorchLineage,
    checkpoint_bytes,
    merge_weights,
    read_checkpoint,
)

__all__ = ["CheckpointStore", "TorchCheckpoint", "TorchLineage", "checkpoint_bytes", "merge_weights",
           "read_checkpoint"]
