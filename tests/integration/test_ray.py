"""Ray Tune PBT integration (issue 15) on a real broker and a real worker: four trials of a tiny
torch trainable that knows nothing of traintrace, under :class:`LineagePBT`.

- Every exploit Ray did (its own ``pbt_global.txt`` log, and the scheduler's count) is exactly one
  ``PBT_EXPLOIT`` event of the exploiting trial, naming a checkpoint of the trial Ray cloned,
  and the trial resumed at exactly that checkpoint's iteration (its next ``Progress``).
- One trial's learning rate is blown up at iteration 3 (from its config): its loss is infinite,
  the guard reports it, the trial is held; the referee rolls it back to its iteration-2
  checkpoint, which Ray restores through its own restore path, and the trial trains to the end.

The log audits clean in both.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ray = pytest.importorskip("ray")
tune = pytest.importorskip("ray.tune")

from streams.integrations.ray_tune import LineagePBT  # noqa: E402

pytestmark = pytest.mark.integration

ITERS = 6
LRS = [0.002, 0.01, 0.05, 0.2]


def train_fn(config):
    """The user's trainable: a tiny regression, one checkpoint per iteration. ``lr_spike_at``
    (iteration) multiplies the learning rate by 1e20 for that one update of a fresh run."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    g = torch.Generator().manual_seed(7)
    x = torch.randn(64, 4, generator=g)
    y = x.sum(dim=1, keepdim=True).tanh()
    start = 0
    ck = tune.get_checkpoint()
    if ck is not None:
        with ck.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        model.load_state_dict(state["model"])
        start = state["iteration"]
    for it in range(start + 1, ITERS + 1):
        spike = 1e20 if config.get("lr_spike_at") == it and ck is None else 1.0
        for group in opt.param_groups:
            group["lr"] = config["lr"] * spike
        for _ in range(5):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        with torch.no_grad():
            loss = torch.nn.functional.mse_loss(model(x), y).item()
        d = tempfile.mkdtemp()
        torch.save({"model": model.state_dict(), "iteration": it}, os.path.join(d, "state.pt"))
        tune.report({"loss": loss}, checkpoint=tune.Checkpoint.from_directory(d))


@pytest.fixture(scope="module")
def ray_cluster():
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def run_pbt(run, tmp_path, name: str, param_space: dict, perturbation_interval: int) -> tuple:
    pbt = LineagePBT(journal_dir=tmp_path / "jobs", cohort=run.cohort, base_model="tiny-mlp",
                     client_kwargs=run.client_kwargs(), hold_timeout=120,
                     time_attr="training_iteration", perturbation_interval=perturbation_interval,
                     quantile_fraction=0.25, resample_probability=0.0,
                     hyperparam_mutations={"lr": LRS})
    tuner = tune.Tuner(
        train_fn, param_space=param_space,
        tune_config=tune.TuneConfig(scheduler=pbt, metric="loss", mode="min", num_samples=1,
                                    reuse_actors=True),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp_path / "ray"), verbose=0,
                                  stop={"training_iteration": ITERS}))
    results = tuner.fit()
    return pbt, results


def test_every_pbt_exploit_is_recorded(ray_cluster, lineage_cohort, tmp_path):
    torch.set_num_threads(1)
    run = lineage_cohort()
    pbt, results = run_pbt(run, tmp_path, "exploits", {"lr": tune.grid_search(LRS)}, perturbation_interval=2)
    assert not results.errors, results.errors
    run.settle(grace_s=1)

    # what Ray did: its own exploit log, one line per exploit
    ray_log = tmp_path / "ray" / "exploits" / "pbt_global.txt"
    lines = ray_log.read_text().splitlines() if ray_log.exists() else []
    ray_exploits = [json.loads(line) for line in lines]
    assert pbt._num_perturbations == len(ray_exploits) >= 1
    tag_to_trial = {j.trial.experiment_tag.split("@")[0]: tid for tid, j in pbt.jobs.items()}
    def trial_of(tag: str) -> str:
        return tag_to_trial[tag.split("@")[0]]

    ray_pairs = sorted((trial_of(e[0]), trial_of(e[1])) for e in ray_exploits)

    events = run.events()
    exploits = [e for e in events if e["type"] == "CheckpointConsumed"]
    assert all(e["mode"] == "PBT_EXPLOIT" for e in exploits)
    written = {e["checkpoint_id"]: e for e in events if e["type"] == "CheckpointWritten"}
    recorded_pairs = sorted((e["job_id"], written[e["source_checkpoint_id"]]["job_id"]) for e in exploits)
    assert recorded_pairs == ray_pairs
    for e in exploits:  # the consumer resumed at exactly the source's iteration
        src = written[e["source_checkpoint_id"]]
        after = [p for p in events
                 if p["job_id"] == e["job_id"] and p["type"] == "Progress" and p["seq"] > e["seq"]]
        assert after and after[0]["step"] == src["step"] + 1, (e, src, after[:1])
    assert not any(j.refused for j in pbt.jobs.values())
    finished = [e for e in events if e["type"] == "JobFinished"]
    assert sorted(e["job_id"] for e in finished) == sorted(pbt.jobs)
    assert run.rollbacks() == {}
    run.assert_audits_clean()


def test_a_diverged_trial_is_rolled_back_through_rays_restore(ray_cluster, lineage_cohort, tmp_path):
    torch.set_num_threads(1)
    run = lineage_cohort()
    space = {"lr": tune.grid_search(LRS[1:]),
             "lr_spike_at": tune.sample_from(lambda s: 3 if s.config.lr == 0.05 else None)}
    pbt, results = run_pbt(run, tmp_path, "rollback", space, perturbation_interval=4)
    assert not results.errors, results.errors
    run.settle(grace_s=1)

    spiked = next(j for j in pbt.jobs.values() if j.trial.config.get("lr_spike_at") == 3)
    p = spiked.job_id
    assert run.rollbacks() == {p: ("ROLLBACK", f"{p}-2")}
    assert [(r.checkpoint_id, r.step) for r in spiked.restores] == [(f"{p}-2", 2)]
    events = run.events()
    mine = [e for e in events if e["job_id"] == p]
    kinds = [e["type"] for e in mine]
    assert kinds.count("DivergenceReported") == 1 and kinds.count("RolledBack") == 1
    rb = kinds.index("RolledBack")
    after = [e for e in mine[rb:] if e["type"] == "Progress"]
    assert after and after[0]["step"] == 3 and after[0]["incarnation"] == 1  # resumed from iteration 2
    assert after[-1]["step"] == ITERS and all(e["loss"] < 10 for e in after)
    assert any(e["step"] == ITERS and e["incarnation"] == 1 for e in mine if e["type"] == "CheckpointWritten")
    assert mine[-1]["type"] == "JobFinished" and mine[-1]["status"] == "SUCCEEDED"
    run.assert_audits_clean()
