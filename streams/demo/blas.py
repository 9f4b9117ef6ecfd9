"""One BLAS thread per process, set before numpy is imported.

The demo runs six training processes on a 2-core machine, and OpenBLAS's default (a thread per
core in every process, spinning) makes the cohort about twenty times slower (measured: 27 s
instead of 1.3 s). The variables are read when numpy is first imported, so
:func:`one_thread_per_process` must run before that: ``streams/demo/__init__.py`` calls it, so
importing any ``streams.demo`` module sets them, and processes started afterwards inherit them.
"""

from __future__ import annotations

import os
import sys

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_thread_per_process() -> None:
    """Set the BLAS thread variables to 1 (unless already set, and only if numpy is not imported
    yet: afterwards they would change nothing in this process and mislead its children)."""
    if "numpy" in sys.modules:
        return
    for var in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(var, "1")
