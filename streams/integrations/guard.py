"""A non-finite loss is a divergence at once: the job says so itself (``DivergenceReported``)
and stops stepping until the referee says what to do, instead of writing NaN checkpoints.

The processor also finds divergences in ``Progress`` by itself (SPEC §5: non-finite values and
loss spikes); the job's own report names the detector and reaches the referee in the same event
stream, and the guard lets the framework stop before it saves a broken checkpoint.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

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

    def check(self, step: int, loss: float | None, grad_norm: float | None = None,
              metrics: Mapping[str, Any] | None = None) -> bool:
        """Whether ``loss``/``grad_norm`` of ``step``, or any number in ``metrics`` (every other
        metric the job reported: an accuracy, a reward, an eval loss), is non-finite; the first
        such step of an incarnation is reported, naming the metric."""
        bad = nonfinite_metric(loss, grad_norm, metrics)
        if bad is None:
            return False
        if not self.tripped:
            self._reported.add(self.client.incarnation)
            what, value = bad
            self.client.diverged(step, DETECTOR, f"{what} is {value} at step {step}")
        return True


def nonfinite_metric(loss: float | None, grad_norm: float | None = None,
                     metrics: Mapping[str, Any] | None = None) -> tuple[str, float] | None:
    """The first non-finite value among the loss, the grad norm and the numbers of ``metrics``
    (booleans and non-numbers skipped), as (name, value); None when all are finite."""
    if not finite(loss):
        return "loss", loss  # type: ignore[return-value]
    if not finite(grad_norm):
        return "grad norm", grad_norm  # type: ignore[return-value]
    for name, v in (metrics or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if not math.isfinite(v):
            return str(name), float(v)
    return None
