"""traintrace inside the training frameworks people use (issue 15).

Each module imports its framework, so importing this package imports none of them; install the
extra of the one you use (``pip install 'traintrace[torch]'``, ``[hf]``, ``[lightning]``, ``[ray]``):

- :mod:`streams.integrations.torch`: :class:`~streams.integrations.torch.TorchLineage`, the
  PyTorch part every other integration builds on: checkpoints that record themselves
  (``CheckpointWritten`` with the hash of the bytes written), loads of another job's checkpoint
  through the load-time gate (``CheckpointConsumed`` with its mode, the hash of the bytes
  actually loaded checked against the record), rollbacks that restore model, optimizer and
  scheduler from the target (then ``RolledBack``);
- :mod:`streams.integrations.store`: where a cohort's checkpoints live (one directory);
- :mod:`streams.integrations.guard`: a non-finite loss reported as a divergence at once.

The public names are ``traintrace.integrations.<framework>``: see the ``traintrace`` package.
"""

from streams.integrations.errors import IntegrationError

__all__ = ["IntegrationError"]
