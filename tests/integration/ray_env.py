"""The environment the Ray tests run Ray in, set before ``ray`` is imported (``test_ray.py`` in the
test process, ``ray_example_driver.py`` in its own): the classic Tune output, logs not
deduplicated, and no workers prestarted for the first driver (two a cluster, which the trials'
actors never used here: 22 of 62 Ray workers of a suite run stayed idle, ~5 s of CPU each); and
:func:`init`, ``ray.init`` retried where a loaded machine kept the raylet from registering in time."""

from __future__ import annotations

import os

RAY_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "RAY_DEDUP_LOGS": "0", "RAY_prestart_worker_first_driver": "0"}


def apply() -> None:
    for k, v in RAY_ENV.items():
        os.environ.setdefault(k, v)


def init(**kwargs: object) -> None:
    """``ray.init(**kwargs)``, tried three times: Ray gives its raylet a fixed 30 s to register
    with the GCS (``ray/_private/node.py``), which a machine loaded by the rest of the suite
    (the fault tests' three brokers, the churn tests' workers) can miss: "The current node
    timed out during startup" (seen in a full run, at the fixture of every test of test_ray.py)."""
    import ray

    for attempt in range(3):
        try:
            ray.init(**kwargs)
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for it
            if "timed out during startup" not in str(exc) or attempt == 2:
                raise
            ray.shutdown()
