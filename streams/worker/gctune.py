"""The worker's garbage collector settings.

The fold keeps millions of long-lived objects (the lineage state) and creates short-lived ones
per event. With CPython's default thresholds (700, 10, 10) every 700 surviving allocations start
a young collection, and enough of those a full one, which scans the whole state. Events held
for their seal (:mod:`streams.core.seals`) survive young collections in bursts, so a worker
folding sealed jobs ran six times as many collections, full ones included, as one folding plain
jobs (``fold_batch`` over 152k events: 704 / 64 / 5 collections per generation against
113 / 10 / 0), and its rate in ``bench/bench_pipeline.py --seals compare`` spread down to ×0.75.

So the worker freezes what exists at start-up (it is never garbage) and collects the young
generation every 50,000 surviving allocations: 9 / 0 / 0 and 1 / 0 / 0 collections for the same
runs, and both fold faster. So nothing the worker drops may wait for a collection to be freed:
the fold leaves no reference cycles, and the state's only one (a consumption's incarnation) is
broken when a cohort is dropped (``Lineage.release``; both guarded by tests/unit/test_memory.py).
Before that, every cohort a worker let go stayed in its memory until a full collection, which
came rarely if ever (issue 27). Other cycles are still collected, only less often.
"""

from __future__ import annotations

import gc

#: (young, middle, old) thresholds of :func:`gc.set_threshold`
THRESHOLDS = (50_000, 20, 10)


def tune() -> None:
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


_trim = None
#: how often a worker gives its heap's free pages back (``malloc_trim`` takes ~0.1 ms)
TRIM_INTERVAL_S = 5.0


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). A takeover reads whole topics (the snapshots of a partition, the control topic)
    through librdkafka's buffers and decodes large records; what that frees stays in the
    process's heap, fragmented across its threads' arenas, and without this a worker that took
    a 1M-event history over kept ~195 MB it no longer used (RSS 516 → 321 MB when trimmed).
    The worker calls it after every takeover and every :data:`TRIM_INTERVAL_S` seconds."""
    global _trim
    if _trim is None:
        try:
            import ctypes

            _trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc
            _trim = False
    if _trim:
        _trim(0)


def rss_mb() -> float:
    """This process's resident memory (``VmRSS``) in MiB; 0.0 where ``/proc`` has none."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
