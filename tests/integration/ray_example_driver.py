"""Run one of Ray's own shipped PBT examples as a user would (``python pbt_function.py
--smoke-test``), with only the scheduler swapped for :class:`LineagePBT`.

Run in a subprocess by ``test_ray_examples.py``::

    python ray_example_driver.py EXAMPLE OUT.json

``EXAMPLE`` is a module name under ``ray.tune.examples`` (``pbt_function``, ``pbt_example``),
loaded from the installed ``ray`` package and executed as ``__main__`` with ``--smoke-test``:
its own trainable, ``CheckpointConfig(num_to_keep=…)``, ``metric``/``mode`` and stop rule,
unchanged. ``ray.tune.schedulers.PopulationBasedTraining`` is replaced, before the example
imports it, by a subclass of ``LineagePBT`` that takes the example's own arguments and adds the
lineage's (journal directory, cohort, the gate's worker URL). Kafka, topics and the trusted
keyring come from the environment (``KAFKA_BOOTSTRAP_SERVERS``, ``TRAINTRACE_TOPIC_PREFIX``,
``TRAINTRACE_TRUSTED_KEYS``), the rest from ``TRAINTRACE_EXAMPLE_*``:

- ``TRAINTRACE_EXAMPLE_WORKER_URL``, ``TRAINTRACE_EXAMPLE_JOURNALS``, ``TRAINTRACE_EXAMPLE_COHORT``;
- ``TRAINTRACE_EXAMPLE_NAN_AT`` (an iteration): a NaN injected, where Tune hands results to the
  scheduler, into ``mean_accuracy`` of the first trial whose checkpoint of the iteration before
  was exploited by another trial (the trial "reported" NaN as far as Tune and PBT can tell);
- ``TRAINTRACE_EXAMPLE_RUNS`` (default 1): run the example again, in the same process, Ray
  cluster and cohort, until Ray made an exploit (with ``NAN_AT``: until a NaN was injected),
  that many times at most. The smoke test's exploits are drawn at random by its own trainable
  (eight trials with the same ``lr``: their accuracies are noise); about one run in two makes
  none, which a fresh cohort, worker and Ray cluster per try (~55 s each on a loaded machine)
  made the suite's costliest wait and, at five tries, still a flake (0.45^5).

Writes to ``OUT.json`` what the scheduler of the last run saw: each trial's restores, refused
exploits, the injected trial, where Ray's ``pbt_global.txt`` is, and the trials of the earlier
runs (``earlier_jobs``: healthy, finished, no exploit among them but with ``NAN_AT``). Exit
status 0 when ``Tuner.fit()`` returned (the example ran to its end).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import os
import runpy
import shutil
import sys
import time
from pathlib import Path

from tests.integration import ray_env  # noqa: E402

ray_env.apply()  # before ray is imported

import ray.tune.schedulers as schedulers  # noqa: E402
from ray.tune.experiment import Trial  # noqa: E402
from ray.tune.schedulers import TrialScheduler  # noqa: E402

from streams.integrations.ray_tune import LineagePBT  # noqa: E402

INSTANCES: list["Swapped"] = []
NAN_AT = int(os.environ["TRAINTRACE_EXAMPLE_NAN_AT"]) if os.environ.get("TRAINTRACE_EXAMPLE_NAN_AT") else None
RUNS = int(os.environ.get("TRAINTRACE_EXAMPLE_RUNS", "1"))


class Swapped(LineagePBT):
    """The example's ``PopulationBasedTraining(...)``, with the lineage's arguments added."""

    def __init__(self, **pbt):
        super().__init__(journal_dir=os.environ["TRAINTRACE_EXAMPLE_JOURNALS"],
                         cohort=os.environ.get("TRAINTRACE_EXAMPLE_COHORT"), base_model="ray-example",
                         client_kwargs={"worker_url": os.environ["TRAINTRACE_EXAMPLE_WORKER_URL"],
                                        "gate_unknown_wait": 30.0},
                         hold_timeout=180, **pbt)
        self.injected: str | None = None
        INSTANCES.append(self)

    def on_trial_result(self, tune_controller, trial, result):
        if NAN_AT is not None and self.injected is None and result.get("training_iteration") == NAN_AT:
            before = f"{trial.trial_id}-{NAN_AT - 1}"
            exploited = any(before in getattr(j, "consumed", ()) for j in self.jobs.values())
            if exploited:
                self.injected = trial.trial_id
        if self.injected == trial.trial_id and result.get("training_iteration") == NAN_AT \
                and self.jobs[trial.trial_id].client.incarnation == 0:
            result = {**result, "mean_accuracy": math.nan}
        decision = super().on_trial_result(tune_controller, trial, result)
        if self.injected is not None and trial.trial_id != self.injected and self._await_rollback(trial):
            return TrialScheduler.NOOP  # paused by its rollback, as when the command comes in time
        return decision

    def _await_rollback(self, trial) -> bool:
        """After the NaN: a trial that exploited the tainted checkpoint waits (up to 60 s) for the
        referee's rollback before it trains on. Ray's smoke-test iterations take milliseconds,
        less than the referee's round trip on a loaded machine; an exploiter that runs to its end
        first is quarantined instead (SPEC §7: it cannot be rolled back), which is not what this
        test is about (seen in CI: an exploiter ran 6..10 and finished before its rollback came).
        The wait polls the job's commands as the scheduler does after a result, so the rollback is
        applied by the same code. Whether the trial is now paused by it."""
        job = self.jobs.get(trial.trial_id)
        if job is None or f"{self.injected}-{NAN_AT - 1}" not in getattr(job, "consumed", ()):
            return False
        deadline = time.monotonic() + 60
        while job.client.incarnation == 0 and not job.client.is_finished and time.monotonic() < deadline:
            job.client.poll(timeout=0.5)
        return trial.status == Trial.PAUSED


def start_ray() -> None:
    """``ray.init(num_cpus=2)`` as the example's ``--smoke-test`` asks, started here first by
    :func:`ray_env.init` (its agents' ports given, so a loaded machine cannot make the raylet
    abort); the example's own ``ray.init`` then joins it (``ignore_reinit_error``)."""
    import ray

    real_init = ray.init
    ray_env.init(num_cpus=2, include_dashboard=False)
    ray.init = lambda *a, **k: real_init(*a, **{**k, "ignore_reinit_error": True})


def done(pbt: "Swapped") -> bool:
    """Whether the run did what the test needs: an exploit (with ``NAN_AT``: an injected NaN)."""
    return pbt.injected is not None if NAN_AT is not None else pbt._num_perturbations > 0


def main(example: str, out: str) -> int:
    spec = importlib.util.find_spec(f"ray.tune.examples.{example}")
    assert spec is not None and spec.origin, example
    start_ray()
    schedulers.PopulationBasedTraining = Swapped
    results = Path(os.environ["HOME"]) / "ray_results"
    for attempt in range(RUNS):
        if attempt:  # the last run's experiment directory (its pbt_global.txt) out of the way
            shutil.move(str(results), str(results.with_name(f"ray_results.run{attempt - 1}")))
        sys.argv = [spec.origin, "--smoke-test"]
        runpy.run_path(spec.origin, run_name="__main__")
        if done(INSTANCES[-1]):
            break
    pbt = INSTANCES[-1]
    logs = sorted(set(glob.glob(str(results / "*" / "pbt_global.txt"))))
    report = {
        "example": spec.origin,
        "runs": len(INSTANCES),
        "perturbations": pbt._num_perturbations,
        "pbt_global": logs,
        "injected": pbt.injected,
        "tags": {tid: pbt._trial_state[j.trial].orig_tag for tid, j in pbt.jobs.items()},
        "jobs": {tid: {"restores": [[r.checkpoint_id, r.step, r.from_scratch] for r in j.restores],
                       "refused": j.refused, "exploits": j.exploits, "consumed": getattr(j, "consumed", []),
                       "outcomes": getattr(j, "outcomes", [])}
                 for tid, j in pbt.jobs.items()},
        "earlier_jobs": sorted(tid for p in INSTANCES[:-1] for tid in p.jobs),
    }
    Path(out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
