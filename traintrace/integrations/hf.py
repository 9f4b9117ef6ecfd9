"""Hugging Face ``Trainer``: see :mod:`streams.integrations.hf`."""

from streams.integrations.hf import (
    TraintraceCallback,
    base_model_of,
    config_hash_of,
    consume,
    load_folder_weights,
    train_under_control,
)

__all__ = ["TraintraceCallback", "base_model_of", "config_hash_of", "consume", "load_folder_weights",
           "train_under_control"]
