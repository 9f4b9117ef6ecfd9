"""The environment the Ray tests run Ray in, set before ``ray`` is imported (``test_ray.py`` in the
test process, ``ray_example_driver.py`` in its own): the classic Tune output, logs not
deduplicated, and no workers prestarted for the first driver (two a cluster, which the trials'
actors never used here: 22 of 62 Ray workers of a suite run stayed idle, ~5 s of CPU each)."""

from __future__ import annotations

import os

RAY_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "RAY_DEDUP_LOGS": "0", "RAY_prestart_worker_first_driver": "0"}


def apply() -> None:
    for k, v in RAY_ENV.items():
        os.environ.setdefault(k, v)
