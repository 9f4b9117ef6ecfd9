"""The real training side of the demo (issue 5), numpy only.

- :mod:`streams.demo.model`: a small MLP on a synthetic classification task; SGD, checkpoints
  (deterministic bytes, atomic writes), weight averaging, a reference-model KL term.
- :mod:`streams.demo.jobs`: :func:`~streams.demo.jobs.run_job`, the training loop of one job
  driving the lineage client; the cohort's shared checkpoint registry.
- :mod:`streams.demo.scenario`: the six-job demo cohort, its story and the expected verdicts;
  :func:`~streams.demo.scenario.run_scenario_job` is what one demo process runs.

One BLAS thread per process: the demo runs six training processes on a 2-core machine, and
OpenBLAS's default (a thread per core in every process, spinning) makes the cohort about twenty
times slower (measured: 27 s instead of 1.3 s). The variables are read when numpy is first
imported, so they are set here (unless already set, and only if numpy is not imported yet);
processes started after this import inherit them.
"""

import os as _os
import sys as _sys

if "numpy" not in _sys.modules:
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        _os.environ.setdefault(_var, "1")
