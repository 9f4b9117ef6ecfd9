"""The settle horizon a log keeps (SPEC §13), measured over the log: for the retention property
tests and ``bench/bench_retention.py``."""

from __future__ import annotations

from typing import Iterable

from streams.core.decide import Lineage
from streams.core.events import Event


def kept_horizon(events: Iterable[Event]) -> int:
    """The smallest H the log keeps (plus one, ms of event time): for every event, how far the
    watermark (the largest ts folded so far) had passed its ts when it was folded; for every
    divergence, how far it had passed the ts of the incarnation's first event at or after the
    onset when the onset became known."""
    lin = Lineage()
    w = None
    worst = 0
    steps: dict[tuple[str, int], list[tuple[int, int]]] = {}
    onsets: dict[tuple[str, int], int] = {}
    for e in events:
        if w is not None:
            worst = max(worst, w - e.ts)
        step = getattr(e, "step", None)
        if step is not None:
            steps.setdefault((e.job_id, e.incarnation), []).append((step, e.ts))
        lin.apply(e)
        w = e.ts if w is None else max(w, e.ts)
        for key, inc in lin.state.diverged.items():
            onset = inc.onset
            if onset is None or onsets.get(key, onset + 1) <= onset:
                continue
            onsets[key] = onset
            first = [ts for s, ts in steps.get(key, []) if s >= onset]
            if first:
                worst = max(worst, w - min(first))
    return worst + 1


__all__ = ["kept_horizon"]
