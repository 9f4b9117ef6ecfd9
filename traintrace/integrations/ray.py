"""Ray Tune population-based training: see :mod:`streams.integrations.ray_tune`."""

from streams.integrations.ray_tune import LineagePBT, TrialJob

__all__ = ["LineagePBT", "TrialJob"]
