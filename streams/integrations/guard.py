"""A non-finite loss is a divergence at once: the job says so itself (``DivergenceReported``)
and stops stepping until the referee says what to do, instead of writing NaN checkpoints.

The processor also finds divergences in ``Progress`` by itself (SPEC §5: non-finite values and
loss spikes); the job's own report names the detector and reaches the referee in the same event
stream, and the guard lets the framework stop before it saves a broken checkpoint.
"""

from __future__ import annotations

import math
from typing import Any

DETECTOR = "traintrace-nonfinite"


def finite(x: float | None) -> bool:
    return x is None or math.isfinite(x)


class DivergenceGuard:
    """Reports the first non-finite loss or gradient norm of each incarnation of ``client``'s
    job (``DivergenceReported``, detector :data:`DETECTOR`)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._reported: set[int] = set()

    @property
    def tripped(self) -> bool:
        """Whether the current incarnation reported a divergence (a rollback opens a new one)."""
        return self.client.incarnation in self._reported

    def check(self, step: int, loss: float | None, grad_norm: float | None = None) -> bool:
        """Whether ``loss``/``grad_norm`` of ``step`` are non-finite; the first such step of an
        incarnation is reported."""
        if finite(loss) and finite(grad_norm):
            return False
        if not self.tripped:
            self._reported.add(self.client.incarnation)
            what = "loss" if not finite(loss) else "grad norm"
            value = loss if not finite(loss) else grad_norm
            self.client.diverged(step, DETECTOR, f"{what} is {value} at step {step}")
        return True
