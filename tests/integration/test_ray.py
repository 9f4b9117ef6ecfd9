"""Ray Tune PBT integration (issue 15) on a real broker and a real worker: four trials of a tiny
torch trainable that knows nothing of traintrace, under :class:`LineagePBT`.

- Every exploit Ray did (its own ``pbt_global.txt`` log, and the scheduler's count) is exactly one
  ``PBT_EXPLOIT`` event of the exploiting trial, naming a checkpoint of the trial Ray cloned,
  and the trial resumed at exactly that checkpoint's iteration (its next ``Progress``).
- The cascade: a trial with the best (stale) score blows up to a large finite loss at iteration 3
  after another exploited its iteration-2 checkpoint; the worker's spike detector finds it, the
  taint margin taints that checkpoint, and both trials are rolled back through Ray's restore.
- One trial's learning rate is blown up at iteration 3 (from its config): its loss is infinite,
  the guard reports it, the trial is held; the referee rolls it back to its iteration-2
  checkpoint, which Ray restores through its own restore path, and the trial trains to the end.
- The gate: the best (stale) trial has already diverged when the bottom trials exploit it; its
  checkpoint is tainted, the exploit is refused and goes to the other trial of the upper quantile.

The log audits clean in all.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import pytest

torch = pytest.importorskip("torch")
from tests.integration import ray_env  # noqa: E402

ray_env.apply()  # before ray is imported
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ray = pytest.importorskip("ray")
tune = pytest.importorskip("ray.tune")

from streams.client.hashing import hash_directory  # noqa: E402
from streams.integrations.ray_tune import LineagePBT  # noqa: E402
from tests.integration.frameworks import assert_checkpoints_hold_what_was_recorded, exclusive  # noqa: E402

pytestmark = pytest.mark.integration

ITERS = 6
LRS = [0.002, 0.01, 0.05, 0.2]


def train_fn(config):
    """The user's trainable: a tiny regression, one checkpoint per iteration. ``lr_spike_at``
    (iteration) multiplies the learning rate by ``spike`` (1e20: an infinite loss) for that one
    update of a fresh run (or, with ``spike_marker``, of the first pass there); ``score`` is
    reported as is (a stale evaluation metric); ``pace`` seconds of sleep per iteration;
    ``arrive_*``: the order of arrival at a synchronous perturbation (:func:`arrive`)."""
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
    if config.get("trace"):  # what each (re)start of the function began from, for a failure's message
        with open(config["trace"], "a") as f:
            f.write(f"{tune.get_context().get_trial_id()} start={start} from={ck.path if ck else None}\n")
    for it in range(start + 1, config.get("iters", ITERS) + 1):
        spike = config.get("spike", 1e20) if config.get("lr_spike_at") == it and first_pass(config, ck) else 1.0
        for group in opt.param_groups:
            group["lr"] = config["lr"] * spike
        for _ in range(5):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        with torch.no_grad():
            loss = torch.nn.functional.mse_loss(model(x), y).item()
        # as Ray's own examples do: report() has copied the checkpoint when it returns, so the
        # directory goes (a mkdtemp() here left one in /tmp per iteration of every test run)
        with tempfile.TemporaryDirectory() as d:
            torch.save({"model": model.state_dict(), "iteration": it}, os.path.join(d, "state.pt"))
            time.sleep(config.get("pace", 0.0))
            arrive(config, it)
            tune.report({"loss": loss, "score": config.get("score", 0.0)},
                        checkpoint=tune.Checkpoint.from_directory(d))


def first_pass(config, ck) -> bool:
    """Whether the run passes the spike iteration for the first time: a fresh run, or with
    ``spike_marker`` (a file, for trials paused and restored as synchronous PBT does) while the
    marker is absent; creating it (a transient fault: a restore from before it does not repeat it)."""
    marker = config.get("spike_marker")
    if marker is None:
        return ck is None
    try:
        open(marker, "x").close()
    except FileExistsError:
        return False
    return True


def arrive(config, it: int) -> None:
    """At iteration ``arrive_at`` the trial with ``arrive_last`` waits before it reports until the
    scheduler has taken ``arrive_after`` other trials' results there (:func:`note_arrivals` leaves
    a file in ``arrive_dir`` for each), so its result is the one that completes the synchronous
    perturbation. (A file left by each trial before it reported, and a second's wait, were not
    enough on a loaded machine: its result reached the scheduler after P's.)"""
    d = config.get("arrive_dir")
    if d is None or config.get("arrive_at") != it or not config.get("arrive_last"):
        return
    deadline = time.monotonic() + 120
    while len(os.listdir(d)) < config["arrive_after"] and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)


def note_arrivals(monkeypatch) -> None:
    """The scheduler leaves a file in a trial's ``arrive_dir`` once it has taken that trial's
    result at ``arrive_at`` (for :func:`arrive`)."""
    taken = LineagePBT.on_trial_result

    def on_trial_result(self, tune_controller, trial, result):
        decision = taken(self, tune_controller, trial, result)
        config = trial.config
        if config.get("arrive_dir") and not config.get("arrive_last") \
                and result.get("training_iteration") == config.get("arrive_at"):
            open(os.path.join(config["arrive_dir"], str(config["lr"])), "a").close()
        return decision

    monkeypatch.setattr(LineagePBT, "on_trial_result", on_trial_result)


@pytest.fixture(scope="module")
def ray_cluster():
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with exclusive("ray"):
        ray_env.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        yield
        ray.shutdown()


def run_pbt(run, tmp_path, name: str, param_space: dict, perturbation_interval: int,
            metric: str = "loss", mode: str = "min", iters: int = ITERS, quantile_fraction: float = 0.25,
            checkpoint_config=None, cpus_per_trial: float | None = None, **lineage) -> tuple:
    pbt = LineagePBT(journal_dir=tmp_path / "jobs", cohort=run.cohort, base_model="tiny-mlp",
                     client_kwargs=run.client_kwargs(), hold_timeout=120,
                     time_attr="training_iteration", perturbation_interval=perturbation_interval,
                     quantile_fraction=quantile_fraction, resample_probability=0.0,
                     hyperparam_mutations={"lr": LRS}, **lineage)
    trainable = train_fn if cpus_per_trial is None else tune.with_resources(train_fn, {"cpu": cpus_per_trial})
    tuner = tune.Tuner(
        trainable, param_space={**param_space, "iters": iters},
        tune_config=tune.TuneConfig(scheduler=pbt, metric=metric, mode=mode, num_samples=1,
                                    reuse_actors=True),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp_path / "ray"), verbose=0,
                                  stop={"training_iteration": iters}, checkpoint_config=checkpoint_config))
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
    assert_checkpoints_hold_what_was_recorded(events)
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
    assert_checkpoints_hold_what_was_recorded(events)
    run.assert_audits_clean()


def test_num_to_keep_rotates_through_the_referee_and_keeps_the_target(ray_cluster, lineage_cohort, tmp_path):
    """``CheckpointConfig(num_to_keep=2)`` with a settle horizon on the worker (SPEC §13): Tune's
    rotation is the scheduler's, through the referee. Each trial checkpoints every iteration; the
    older ones go as they become deletable; a trial diverging at iteration 8 is rolled back to
    its iteration-7 checkpoint, which the rotation kept until then, and restores it with no
    substitution."""
    torch.set_num_threads(1)
    run = lineage_cohort(extra_args=["--settle-horizon", "1", "--retention-interval", "0.2"])
    # 14 iterations: the rolled-back trial trains 6 more after its rollback (2.4 s of pace), time
    # for the worker's notices to list its older checkpoints on a loaded machine (10 were too few
    # once in a fresh-clone CI run: it finished with nothing pruned)
    iters = 14
    space = {"lr": tune.grid_search(LRS[1:3]), "pace": 0.4,
             "lr_spike_at": tune.sample_from(lambda s: 8 if s.config.lr == LRS[2] else None)}
    pbt, results = run_pbt(run, tmp_path, "rotation", space, perturbation_interval=100, iters=iters,
                           checkpoint_config=tune.CheckpointConfig(num_to_keep=2))
    assert not results.errors, results.errors
    run.settle(grace_s=1)
    spiked = next(j for j in pbt.jobs.values() if j.trial.config.get("lr_spike_at") == 8)
    p = spiked.job_id
    assert run.rollbacks() == {p: ("ROLLBACK", f"{p}-7")}
    assert [(r.checkpoint_id, r.step) for r in spiked.restores] == [(f"{p}-7", 7)], spiked.outcomes
    events = run.events()
    deleted = [e["checkpoint_id"] for e in events if e["type"] == "CheckpointDeleted"]
    written = [e["checkpoint_id"] for e in events if e["type"] == "CheckpointWritten"]
    assert all(j.keep == 2 for j in pbt.jobs.values())
    # the target was kept until the trial restored it; after its rollback it may go (SPEC §13: it
    # and a later settled clean checkpoint of the new incarnation both lie in its ancestry), which
    # a run long enough for the worker's notices to catch up shows
    mine = [e for e in events if e["job_id"] == p]
    restored_at = next(i for i, e in enumerate(mine) if e["type"] == "RolledBack")
    assert not any(e["type"] == "CheckpointDeleted" and e["checkpoint_id"] == f"{p}-7" for e in mine[:restored_at])
    assert mine[restored_at]["restored_checkpoint_id"] == f"{p}-7"
    # how many go depends on how far the worker's notices trail the trials (a loaded machine: the
    # healthy trial may end before any of its checkpoints is listed); the rolled-back trial runs
    # on after the worker folded its divergence, so its older checkpoints are listed by then
    assert spiked.pruned, (deleted, [j.pruned for j in pbt.jobs.values()])
    assert sorted(deleted) == sorted(c for j in pbt.jobs.values() for c in j.pruned)
    on_disk = sum(1 for w in pbt.checkpoints.values() if os.path.isdir(w.path))
    print(f"\nretention (Ray, num_to_keep=2, H=1s): {len(written)} checkpoint(s) written, {len(deleted)} deleted, "
          f"{on_disk} on disk at the end")
    from streams.testing.invariants import alert_records

    assert "DELETED_PINNED" not in {a["kind"] for a in alert_records(run.bootstrap, run.topics)}
    assert_checkpoints_hold_what_was_recorded(events)
    run.assert_audits_clean()


def assert_audits_clean(run, config) -> None:
    """``run.assert_audits_clean`` with the worker's detector settings (the audit recomputes the
    referee's commands, so it must fold with the same window and margin)."""
    run.assert_audits_clean(config)


def offline_plans(events: list[dict], config, before_rollbacks: bool = False) -> dict:
    """The offline answer (``traintrace analyze``'s fold) of ``events``; with ``before_rollbacks``
    of what the referee knew before anybody obeyed: each job's events up to its first
    ``RolledBack``, and no ``JobFinished`` (every job still running, as when it was planned)."""
    from streams.core.cohorts import CohortLineage
    from streams.core.events import parse_event

    lineage = CohortLineage(config)
    stopped: set[str] = set()
    for e in sorted(events, key=lambda e: (e["job_id"], e["seq"])):
        if before_rollbacks:
            if e["type"] == "RolledBack":
                stopped.add(e["job_id"])
            if e["job_id"] in stopped or e["type"] == "JobFinished":
                continue
        lineage.fold(parse_event(e))
    lineage.finish_input()
    return lineage.final_state()


def test_an_exploit_of_a_diverged_trial_is_rolled_back_too(ray_cluster, lineage_cohort, tmp_path):
    """The cascade. P reports the best (stale) score but its weights blow up at iteration 3 to a
    large finite loss: the worker's spike detector finds it (window 2), and with a taint margin of
    1 its iteration-2 checkpoint, which C exploited at the synchronous perturbation at 2, before
    anybody could know, is tainted. The referee rolls back P to P-1 and C to its own checkpoint
    before that exploit, and Ray restores both."""
    from streams.core.state import Config
    from streams.testing.invariants import assert_live_equals_offline

    torch.set_num_threads(1)
    run = lineage_cohort(extra_args=["--window", "2", "--taint-margin", "1"])
    scores = {0.05: 3.0, 0.002: 2.0, 0.01: 1.0}  # P, Q, C: C exploits P at 2
    space = {"lr": tune.grid_search(list(scores)), "pace": 0.3, "spike": 30.0,
             "spike_marker": str(tmp_path / "spiked"), "trace": str(tmp_path / "starts.txt"),
             "score": tune.sample_from(lambda s: scores[s.config.lr]),
             "lr_spike_at": tune.sample_from(lambda s: 3 if s.config.lr == 0.05 else None)}
    pbt, results = run_pbt(run, tmp_path, "cascade", space, perturbation_interval=2, metric="score",
                           mode="max", iters=8, loss_metric="loss", synch=True)
    assert not results.errors, results.errors
    run.settle(grace_s=1)

    jobs = {j.job_id: j for j in pbt.jobs.values()}
    events = run.events()
    written = {e["checkpoint_id"]: e for e in events if e["type"] == "CheckpointWritten"}
    p = next(e["job_id"] for e in events if e["type"] == "Progress" and e["loss"] > 10)
    spikes = [e["loss"] for e in events if e["job_id"] == p and e["type"] == "Progress"
              and e["incarnation"] == 0]
    assert 1e3 > spikes[2] > 3 * max(spikes[:2])  # a finite spike at iteration 3: no guard, the detector

    # (a) the commands the referee issued are what the offline fold of the same evidence plans
    config = Config(window=2, taint_margin=1)
    planned = {pl["job_id"]: (pl["action"], pl.get("target_checkpoint_id"))
               for pl in offline_plans(events, config, before_rollbacks=True)["plans"]}
    live = run.rollbacks()
    assert live == planned
    assert live[p] == ("ROLLBACK", f"{p}-1")
    assert_live_equals_offline(run.bootstrap, run.topics, offline_plans(events, config))

    # (b) the cascade: C, which exploited P-2, goes back to its own checkpoint before the exploit
    others = {j: cmd for j, cmd in live.items() if j != p}
    assert others, live
    exploits = [e for e in events if e["type"] == "CheckpointConsumed"]
    for j, (action, target) in others.items():
        assert action == "ROLLBACK"
        first = next(e for e in exploits if e["job_id"] == j)
        assert written[first["source_checkpoint_id"]]["job_id"] == p
        assert written[target]["seq"] < first["seq"] and written[target]["job_id"] == j

    # (c) every one resumed through Ray's restore at exactly its target, and finished
    for j, (_action, target) in live.items():
        assert [r.checkpoint_id for r in jobs[j].restores] == [target]
        mine = [e for e in events if e["job_id"] == j]
        rb = next(i for i, e in enumerate(mine) if e["type"] == "RolledBack")
        assert mine[rb]["restored_checkpoint_id"] == target
        after = [e for e in mine[rb:] if e["type"] == "Progress"]
        assert after and after[0]["step"] == written[target]["step"] + 1, (j, target, after[:1])
        # the target's directory still holds what was recorded: Tune wrote no later checkpoint
        # into it (it did, for the trial exploited at the perturbation: LineagePBT._rollback)
        kept = pbt.checkpoints[target]
        assert hash_directory(kept.path) == kept.content_hash, (j, target, kept.path)
        assert after[-1]["step"] == 8, (j, [(e["type"], e.get("step"), e.get("status")) for e in mine[rb:]],
                                        (tmp_path / "starts.txt").read_text(), jobs[j].outcomes)
        assert mine[-1]["type"] == "JobFinished" and mine[-1]["status"] == "SUCCEEDED"
    # (d)
    assert_checkpoints_hold_what_was_recorded(events)
    assert_audits_clean(run, config)


class _CloneFirst:
    """Ray PBT's ``random`` with the choice of the trial to clone fixed: ``first`` whenever it is
    among the choices (as if the draw had landed on it); everything else is the real module."""

    def __init__(self, first):
        self.first = first

    def choice(self, seq):
        import random

        hits = [t for t in seq if getattr(t, "trial_id", None) and self.first(t)]
        return hits[0] if hits else random.choice(seq)

    def __getattr__(self, name):
        import random

        return getattr(random, name)


def test_an_exploit_of_a_tainted_checkpoint_is_refused_and_another_taken(
        ray_cluster, lineage_cohort, tmp_path, monkeypatch):
    """The gate. Four trials, synchronous PBT at iteration 3, upper quantile {P, Q} by a stale
    score. P blows up at 3 to a large finite loss and is the last to arrive there: when the
    perturbation runs, the worker has found the spike (window 2) and P-3 is tainted. Ray's draw
    for both bottom trials is P (fixed here): the gate refuses P-3 and each exploits Q-3
    instead; Ray's log, the scheduler and the record agree, and P alone is rolled back."""
    import ray.tune.schedulers.pbt as ray_pbt

    from streams.client import checkpoint_status
    from streams.core.state import Config

    torch.set_num_threads(1)
    run = lineage_cohort(extra_args=["--window", "2"])
    arrived = tmp_path / "arrived"
    arrived.mkdir()
    scores = {0.05: 4.0, 0.2: 3.0, 0.01: 2.0, 0.002: 1.0}  # P, Q (upper); two bottom trials
    space = {"lr": tune.grid_search(list(scores)), "spike": 30.0, "spike_marker": str(tmp_path / "spiked"),
             "score": tune.sample_from(lambda s: scores[s.config.lr]),
             "lr_spike_at": tune.sample_from(lambda s: 3 if s.config.lr == 0.05 else None),
             "arrive_dir": str(arrived), "arrive_at": 3, "arrive_after": 3,
             "arrive_last": tune.sample_from(lambda s: s.config.lr == 0.05)}
    monkeypatch.setattr(ray_pbt, "random", _CloneFirst(lambda t: t.config.get("score") == 4.0))
    note_arrivals(monkeypatch)
    # a quarter of a CPU each: all four run at once, so the trial that waits to arrive last never
    # keeps the others from getting there (CI once had one slot free: P waited out its deadline alone)
    pbt, results = run_pbt(run, tmp_path, "gate", space, perturbation_interval=3, metric="score",
                           mode="max", iters=5, quantile_fraction=0.5, loss_metric="loss", synch=True,
                           cpus_per_trial=0.25)
    assert not results.errors, results.errors
    run.settle(grace_s=1)

    jobs = {j.job_id: j for j in pbt.jobs.values()}
    events = run.events()
    p = next(e["job_id"] for e in events if e["type"] == "Progress" and e["loss"] > 10)
    q = next(j for j, job in jobs.items() if j != p and job.trial.config["score"] == 3.0 and not job.exploits)
    bottom = sorted(set(jobs) - {p, q})
    assert jobs[p].trial.config["score"] == 4.0 and len(bottom) == 2

    # (a) the refusal: each bottom trial drew P, the gate refused P-3, it exploited Q-3 instead
    for j in bottom:
        assert jobs[j].refused == [f"{p}-3"] and jobs[j].exploits == 1, (j, jobs[j].refused)
    assert not jobs[p].refused and not jobs[q].refused and not jobs[p].exploits
    exploits = [e for e in events if e["type"] == "CheckpointConsumed"]
    assert sorted((e["job_id"], e["source_checkpoint_id"], e["mode"], e["step"]) for e in exploits) == \
        [(j, f"{q}-3", "PBT_EXPLOIT", 3) for j in bottom]
    for e in exploits:  # resumed at exactly Q-3
        after = [x for x in events if x["job_id"] == e["job_id"] and x["type"] == "Progress"
                 and x["seq"] > e["seq"]]
        assert after and after[0]["step"] == 4, (e, after[:1])

    # (b) no exploit names a tainted source: at the worker's gate and in the offline fold
    config = Config(window=2)
    tainted = set(offline_plans(events, config)["tainted_checkpoints"])
    assert f"{p}-3" in tainted and checkpoint_status(run.worker_url, f"{p}-3")["status"] == "tainted"
    for e in exploits:
        src = e["source_checkpoint_id"]
        assert src not in tainted and checkpoint_status(run.worker_url, src)["status"] == "clean"

    # (c) Ray's own log agrees: two exploits, both of Q
    ray_log = tmp_path / "ray" / "gate" / "pbt_global.txt"
    lines = ray_log.read_text().splitlines() if ray_log.exists() else []
    tag_to_trial = {pbt._trial_state[j.trial].orig_tag: tid for tid, j in pbt.jobs.items()}
    ray_pairs = sorted((tag_to_trial[x[0]], tag_to_trial[x[1]]) for x in map(json.loads, lines))
    assert pbt._num_perturbations == len(ray_pairs) == 2
    assert ray_pairs == sorted((e["job_id"], q) for e in exploits)

    # (d) P alone is rolled back, through Ray's restore, and everyone finishes
    assert run.rollbacks() == {p: ("ROLLBACK", f"{p}-2")}
    assert [(r.checkpoint_id, r.step) for r in jobs[p].restores] == [(f"{p}-2", 2)]
    finished = {e["job_id"]: e["status"] for e in events if e["type"] == "JobFinished"}
    assert finished == {j: "SUCCEEDED" for j in jobs}
    assert_checkpoints_hold_what_was_recorded(events)
    assert_audits_clean(run, config)
