"""PyTorch Lightning: see :mod:`streams.integrations.lightning`."""

from streams.integrations.lightning import (
    LineageCheckpoint,
    TraintraceCallback,
    fit_under_control,
    read_lightning_checkpoint,
)
from streams.integrations.store import CheckpointStore

__all__ = ["CheckpointStore", "LineageCheckpoint", "TraintraceCallback", "fit_under_control",
           "read_lightning_checkpoint"]
