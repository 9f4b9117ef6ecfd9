"""Ray Tune's own shipped PBT examples, unchanged but for the scheduler (issue 22).

``ray/tune/examples/pbt_function.py`` (the function API, ``CheckpointConfig(num_to_keep=2,
checkpoint_score_attribute="mean_accuracy")``) and ``pbt_example.py`` (the class API,
``num_to_keep=4``) are loaded from the installed ``ray`` package and run as a user runs them
(``--smoke-test``: 8 trials, 10 iterations, ``metric="mean_accuracy", mode="max"``), each in its
own process (``ray_example_driver.py``) with ``PopulationBasedTraining`` swapped for
``LineagePBT``, against a real broker and a real worker:

- healthy (the worker's detector window 3, so that a spike could show within 10 iterations): no
  plan, no halt (an accuracy that rises is no loss that spikes); every exploit in
  Ray's own ``pbt_global.txt`` is a ``PBT_EXPLOIT`` event of the same (target, source) trials;
  the log audits clean; ``Tuner.fit()`` returns;
- a NaN injected into one trial's ``mean_accuracy`` at iteration 6, after another trial exploited
  its iteration-5 checkpoint (a taint margin of 1 taints it): the diverged trial and exactly the
  trials that exploited its tainted checkpoint are rolled back (or quarantined, an exploiter that
  Ray ran to its end before the NaN), and the run finishes. (Rotation
  through the referee, SPEC §13, is ``test_ray.py``'s: this smoke test writes two checkpoints a
  trial, too few to rotate.)

Ray draws its exploits at random (the smoke test's eight trials share one ``lr``: their
accuracies are noise; about one run in two makes none), so the driver runs the example again in
the same process, Ray cluster and cohort until it made one (``TRAINTRACE_EXAMPLE_RUNS``); the
checks are of the last run's trials, and the earlier runs' trials must be healthy and finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("ray.tune.examples.pbt_function")

pytestmark = pytest.mark.integration

DRIVER = Path(__file__).with_name("ray_example_driver.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def one_ray_at_a_time():
    """The examples' Ray clusters and test_ray.py's never train at once (scripts/test runs
    several pytest processes on the machine's two cores)."""
    from tests.integration.frameworks import exclusive

    with exclusive("ray"):
        yield


def run_example(run, tmp_path: Path, example: str, nan_at: int | None = None, runs: int = 1) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / f"{example}.json"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "KAFKA_BOOTSTRAP_SERVERS": run.bootstrap,
           "TRAINTRACE_TOPIC_PREFIX": run.topics.events[: -len("lineage.events")],
           "TRAINTRACE_TRUSTED_KEYS": str(run.keys),
           "TRAINTRACE_EXAMPLE_WORKER_URL": run.worker_url,
           "TRAINTRACE_EXAMPLE_JOURNALS": str(tmp_path / "jobs"),
           "TRAINTRACE_EXAMPLE_COHORT": run.cohort,
           "TRAINTRACE_EXAMPLE_RUNS": str(runs),
           "PYTHONPATH": str(REPO), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    if nan_at is not None:
        env["TRAINTRACE_EXAMPLE_NAN_AT"] = str(nan_at)
    p = subprocess.run([sys.executable, str(DRIVER), example, str(out)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    tail = (p.stdout[-3000:] + "\n--- stderr ---\n" + p.stderr[-6000:])
    assert p.returncode == 0, f"the example did not finish (exit {p.returncode}):\n{tail}"
    report = json.loads(out.read_text())
    report["output"] = tail
    return report


def last_run(report: dict, events: list[dict]) -> list[dict]:
    """The events of the last run's trials; the earlier runs' (which made no exploit, or with a
    NaN to inject none where it could be) each finished healthy: no divergence, no rollback."""
    earlier = set(report["earlier_jobs"])
    assert not earlier & set(report["jobs"])
    theirs = [e for e in events if e["job_id"] in earlier]
    assert {e["job_id"] for e in theirs if e["type"] == "JobFinished" and e["status"] == "SUCCEEDED"} == earlier
    assert not [e for e in theirs if e["type"] in ("DivergenceReported", "RolledBack")]
    return [e for e in events if e["job_id"] not in earlier]


def ray_exploits(report: dict) -> list[tuple[str, str]]:
    """(target trial, source trial) of every line of Ray's own ``pbt_global.txt``."""
    by_tag = {tag: tid for tid, tag in report["tags"].items()}
    lines = []
    for path in report["pbt_global"]:
        lines += [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    return sorted((by_tag[a], by_tag[b]) for a, b, *_ in lines)


def trial_notes(report: dict) -> dict:
    """Each trial's refused exploit sources and integration outcomes (for a failure's message)."""
    return {t: (j["refused"], j["outcomes"]) for t, j in report["jobs"].items() if j["refused"] or j["outcomes"]}


def recorded_exploits(events: list[dict]) -> list[tuple[str, str]]:
    written = {e["checkpoint_id"]: e["job_id"] for e in events if e["type"] == "CheckpointWritten"}
    return sorted((e["job_id"], written[e["source_checkpoint_id"]]) for e in events
                  if e["type"] == "CheckpointConsumed" and e["mode"] == "PBT_EXPLOIT")


@pytest.mark.parametrize("example", ["pbt_function", "pbt_example"])
def test_rays_own_example_runs_healthy_with_no_plan(lineage_cohort, tmp_path, example):
    from streams.core.state import Config
    from tests.integration.frameworks import assert_checkpoints_hold_what_was_recorded

    # a detector window of 3 (the smoke test has 10 iterations): were the rising accuracy taken
    # for a loss, its rise would pass the spike rule within the run
    # pbt_function: up to 12 runs until one made an exploit (about one in two makes none: 0.45^12
    # is 7e-5). pbt_example: 2, since a run without an exploit is checked too (below), and a run
    # takes a minute or more on a machine loaded by the rest of the suite
    run = lineage_cohort(extra_args=["--window", "3"])
    report = run_example(run, tmp_path, example, runs=12 if example == "pbt_function" else 2)
    run.settle(grace_s=1)
    print(f"\n{example}: {report['runs']} run(s), {report['perturbations']} exploit(s) in the last")
    events = last_run(report, run.events())
    assert len(report["jobs"]) == 8
    plans = run.plans()
    assert plans["plans"] == [] and plans["halts"] == [], (plans, report["output"])
    assert run.rollbacks() == {}
    progress = [e for e in events if e["type"] == "Progress"]
    assert progress and all(e["loss"] is None for e in progress)  # mean_accuracy is no loss
    pairs = ray_exploits(report)
    if example == "pbt_function":
        assert pairs, (f"Ray's smoke test made no exploit in {report['runs']} runs ({report['perturbations']} perturbations; "
                       f"refused, outcomes: {trial_notes(report)}):\n{report['output']}")
    elif not pairs:
        # the class API's smoke test exploits only at iteration 5, and only where the upper
        # trial's pending save resolved before its actor was paused and reused: on a loaded
        # machine Ray itself can make none in several runs (CI saw three, with nothing refused and no
        # outcome of ours). The lineage then records none either, which is what is checked.
        warnings.warn(f"{example}: Ray made no exploit in {report['runs']} runs ({report['perturbations']} perturbations); "
                      "the exploit record was checked only for being empty too")
    assert recorded_exploits(events) == pairs
    finished = {e["job_id"]: e["status"] for e in events if e["type"] == "JobFinished"}
    assert finished == {j: "SUCCEEDED" for j in report["jobs"]}
    assert_checkpoints_hold_what_was_recorded(events)
    run.assert_audits_clean(Config(window=3))


def test_rays_own_example_with_a_nan_rolls_back_the_trial_and_its_exploiters(lineage_cohort, tmp_path):
    from streams.core.state import Config
    from tests.integration.frameworks import assert_checkpoints_hold_what_was_recorded

    run = lineage_cohort(extra_args=["--taint-margin", "1"])
    report = run_example(run, tmp_path, "pbt_function", nan_at=6, runs=12)
    run.settle(grace_s=1)
    print(f"\npbt_function with a NaN: {report['runs']} run(s)")
    events = last_run(report, run.events())
    bad = report["injected"]
    assert bad, (f"no trial's iteration-5 checkpoint was exploited before iteration 6 in {report['runs']} runs (refused, outcomes: "
                 f"{trial_notes(report)}):\n{report['output']}")
    tainted_source = f"{bad}-5"
    exploiters = sorted(j for j, info in report["jobs"].items() if tainted_source in info["consumed"])
    assert exploiters
    # exactly the diverged trial and its exploiters have a plan: each is rolled back, or, an exploiter
    # that finished before it could act on it (Ray can run it to its end first on a loaded machine:
    # before the divergence reached the worker, or after its RollbackCommand was sent but before
    # the trial's next report), quarantined with every tainted checkpoint it wrote (SPEC §7: a
    # finished job cannot be rolled back; its plan turns from ROLLBACK to QUARANTINE)
    live, quarantined = run.rollbacks(), run.quarantines()
    assert set(live) | set(quarantined) == {bad, *exploiters}, (live, quarantined, exploiters)
    assert bad in live, (live, quarantined)
    rolled = {e["job_id"] for e in events if e["type"] == "RolledBack"}
    assert bad in rolled, (live, quarantined)
    for j in sorted({bad, *exploiters} - rolled):
        assert j in quarantined, (j, live, quarantined)
        ids = quarantined[j]
        mine = [e for e in events if e["job_id"] == j]
        took = next(e["seq"] for e in mine if e["type"] == "CheckpointConsumed"
                    and e["source_checkpoint_id"] == tainted_source)
        after = {e["checkpoint_id"] for e in mine if e["type"] == "CheckpointWritten" and e["seq"] > took}
        assert after <= set(ids), (j, after, ids)
        assert j in live or after, (j, "finished before the divergence, yet wrote nothing after the exploit",
                                    [(e["seq"], e["type"], e.get("step"), e.get("checkpoint_id")) for e in mine],
                                    report["output"])
        assert mine[-1]["type"] == "JobFinished", (j, mine[-1])
    for j in sorted(rolled & set(live)):
        mine = [e for e in events if e["job_id"] == j]
        rb = [e for e in mine if e["type"] == "RolledBack"]
        assert report["jobs"][j]["restores"], report["jobs"][j]
        # what it restored is what it says it restored, and it is clean
        restored = rb[0]["restored_checkpoint_id"]
        assert [restored] == [r[0] for r in report["jobs"][j]["restores"][:1]]
        assert mine[-1]["type"] == "JobFinished"
    assert rolled <= set(live), (rolled, live)
    plans = run.plans()
    # every rollback acknowledged; a quarantine stays in force
    assert {p["job_id"]: p["action"] for p in plans["plans"]} == {j: "QUARANTINE" for j in {bad, *exploiters} - rolled}, plans
    assert plans["halts"] == [], plans
    finished = {e["job_id"] for e in events if e["type"] == "JobFinished"}
    assert finished == set(report["jobs"])
    assert_checkpoints_hold_what_was_recorded(events)
    run.assert_audits_clean(Config(taint_margin=1))
