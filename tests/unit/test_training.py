"""The demo's real training side (streams.demo): the model, the job loop, the six-job scenario.

The job client is replaced by :class:`FakeClient`, an in-memory stand-in with the API of
``streams.client.JobClient``: it records every call as a SPEC §4 event (seq, incarnation, ts), runs
command callbacks in the polling thread, emits ``RolledBack`` after a rollback callback, and can
(a) deliver a command injected by the test (at a step, or when the job reports a divergence) and
(b) act as a live referee: a :class:`FakeBus` folds every event through the real lineage core
(``streams.core.Lineage``) and delivers the plans it decides as ``RollbackCommand``s.
"""

from __future__ import annotations

import collections
import hashlib
import math
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import streams.demo  # noqa: F401  before numpy: one BLAS thread per process (streams/demo/blas.py)

import numpy as np
import pytest

from streams.client import Restored
from streams.core.decide import Lineage, PlanChanged
from streams.core.events import parse_event
from streams.demo import model as M
from streams.demo.jobs import CohortRegistry, JobSpec, Share, run_job
from streams.demo.scenario import BLOWUP_UPDATE, ONSET, default_cohort, describe, expected

TASK = M.Task()
CFG = TASK.config


# ----------------------------------------------------------------------------- the fake client


@dataclass(frozen=True)
class FakeCommand:
    command_id: str
    action: str
    target_checkpoint_id: str | None
    target_step: int | None
    incident_ids: tuple[str, ...] = ()
    incarnation: int | None = None
    kind: str = "RollbackCommand"


class GateRefused(Exception):
    """Same name as the real client's exception: the job recognises it by name."""


class FakeBus:
    """The in-process stand-in for Kafka: one ordered event log for the cohort, a clock, and
    (``referee=True``) the real lineage core deciding commands as events arrive."""

    def __init__(self, referee: bool = False) -> None:
        self.lock = threading.RLock()
        self.events: list[dict[str, Any]] = []
        self.lineage = Lineage() if referee else None
        self.inbox: dict[str, collections.deque[FakeCommand]] = collections.defaultdict(collections.deque)
        self.issued: list[FakeCommand] = []
        self._ts = 1_760_000_000_000

    def emit(self, event: dict[str, Any]) -> None:
        with self.lock:
            self._ts += 1
            event["ts"] = self._ts
            self.events.append(event)
            if self.lineage is None:
                return
            for d in self.lineage.apply(parse_event(event)):
                if isinstance(d, PlanChanged) and d.plan is not None and d.plan["action"] != "QUARANTINE":
                    p = d.plan
                    cmd = FakeCommand(p["command_id"], p["action"], p["target_checkpoint_id"],
                                      p["target_step"], tuple(p["incident_ids"]), p["incarnation"])
                    self.issued.append(cmd)
                    self.inbox[d.job_id].append(cmd)

    def take(self, job_id: str) -> list[FakeCommand]:
        with self.lock:
            q = self.inbox[job_id]
            out = list(q)
            q.clear()
            return out

    def of(self, job_id: str, etype: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["job_id"] == job_id and (etype is None or e["type"] == etype)]


class FakeClient:
    """In-memory ``JobClient``: records calls as events on ``bus``; see the module docstring."""

    def __init__(self, job_id: str, cohort_id: str, base_model: str, *, bus: FakeBus,
                 on_rollback: Callable, on_halt: Callable, on_release: Callable, on_quarantine: Callable,
                 refuse: frozenset[str] = frozenset()) -> None:
        self.job_id, self.cohort_id, self.base_model = job_id, cohort_id, base_model
        self.bus = bus
        self.on_rollback, self.on_halt = on_rollback, on_halt
        self.on_release, self.on_quarantine = on_release, on_quarantine
        self.refuse = refuse
        self.seq = 0
        self.incarnation = 0
        self.last_step = 0
        self.applied: set[str] = set()
        self.at_step: list[tuple[int, FakeCommand]] = []
        self.on_divergence: list[FakeCommand] = []
        self.due: list[FakeCommand] = []
        self.calls: list[str] = []
        self.closed = False

    # test hooks
    def inject(self, cmd: FakeCommand, *, at_step: int | None = None, on_divergence: bool = False) -> None:
        if on_divergence:
            self.on_divergence.append(cmd)
        else:
            self.at_step.append((at_step or 0, cmd))

    def _emit(self, etype: str, **fields: Any) -> None:
        assert not self.closed
        if etype == "RolledBack":
            self.incarnation += 1
        self.bus.emit({"type": etype, "job_id": self.job_id, "seq": self.seq,
                       "incarnation": self.incarnation, **fields})
        self.seq += 1
        self.calls.append(etype)

    # the JobClient API
    def start(self, base_checkpoint_id=None, config_hash=None):
        assert self.seq == 0
        self._emit("JobStarted", cohort_id=self.cohort_id, base_model=self.base_model,
                   base_checkpoint_id=base_checkpoint_id, config_hash=config_hash)

    def progress(self, step, epoch, loss, grad_norm=None, lr=None):
        self.last_step = step
        self._emit("Progress", step=step, epoch=epoch, loss=loss, grad_norm=grad_norm, lr=lr)

    def checkpoint_written(self, checkpoint_id, path, step, epoch, uri=None):
        digest = M.content_hash(path)
        self.last_step = step
        self._emit("CheckpointWritten", checkpoint_id=checkpoint_id, step=step, epoch=epoch,
                   content_hash=digest, uri=uri or path)
        return digest

    def consumed(self, source_checkpoint_id, step, mode, load, expected_hash=None):
        if source_checkpoint_id in self.refuse:
            raise GateRefused(f"{source_checkpoint_id} is tainted")
        path = load()
        if expected_hash is not None:
            assert M.content_hash(path) == expected_hash
        self._emit("CheckpointConsumed", source_checkpoint_id=source_checkpoint_id, step=step, mode=mode)

    def diverged(self, onset_step, detector, reason):
        self._emit("DivergenceReported", onset_step=onset_step, detector=detector, reason=reason)
        self.due.extend(self.on_divergence)
        self.on_divergence = []

    def finished(self, status="SUCCEEDED", final_checkpoint_id=None):
        self._emit("JobFinished", status=status, final_checkpoint_id=final_checkpoint_id)

    def poll(self, timeout=0.0):
        ready = [c for s, c in self.at_step if s <= self.last_step]
        self.at_step = [(s, c) for s, c in self.at_step if s > self.last_step]
        cmds = self.due + ready + self.bus.take(self.job_id)
        self.due = []
        done = []
        for cmd in cmds:
            if cmd.command_id in self.applied:
                continue
            if cmd.incarnation is not None and cmd.incarnation != self.incarnation:
                continue  # stale: meant for an incarnation already rolled back
            self.applied.add(cmd.command_id)
            said = self.on_rollback(cmd)
            # as JobClient: the callback may say how it restored, else it obeyed the command
            r = said if isinstance(said, Restored) else Restored.of(cmd)
            self._emit("RolledBack", restored_checkpoint_id=r.checkpoint_id, resumed_step=r.step,
                       command_id=cmd.command_id, from_scratch=r.from_scratch)
            done.append(cmd)
        if not done and timeout:
            time.sleep(min(timeout, 0.002))
        return done

    halt_at: int | None = None  # test hook: halted from this step on, never released

    def wait_while_halted(self, timeout=None):
        return self.halt_at is None or self.last_step < self.halt_at  # False: still halted at the timeout

    def close(self):
        self.closed = True


class Factory:
    """client_factory for run_job: builds FakeClients on one bus and keeps them by job id."""

    def __init__(self, bus: FakeBus, refuse: frozenset[str] = frozenset(),
                 setup: Callable[[FakeClient], None] | None = None) -> None:
        self.bus, self.refuse, self.setup = bus, refuse, setup
        self.clients: dict[str, FakeClient] = {}

    def __call__(self, job_id, cohort_id, base_model, **callbacks):
        c = FakeClient(job_id, cohort_id, base_model, bus=self.bus, refuse=self.refuse, **callbacks)
        if self.setup is not None:
            self.setup(c)
        self.clients[job_id] = c
        return c


def run_cohort(specs: list[JobSpec], factory: Factory, cohort_dir: Path, **kw: Any) -> dict[str, Any]:
    """Every job in its own thread (as the demo runs them in their own processes)."""
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def one(spec: JobSpec) -> None:
        try:
            results[spec.job_id] = run_job(spec, factory, cohort_dir=cohort_dir, task=TASK, **kw)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(s,), name=s.job_id) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a job did not finish"
    if errors:
        raise errors[0]
    return results


def train(theta: np.ndarray, steps: range, lr: Callable[[int], float],
          seed: int = 1) -> tuple[np.ndarray, list[float]]:
    losses = []
    for s in steps:
        x, y = TASK.batch(seed, s)
        stats, grad = M.loss_and_grad(theta, x, y, CFG)
        losses.append(stats.loss)
        theta = M.sgd_step(theta, grad, lr(s))
    return theta, losses


def final_state(events: list[dict[str, Any]]) -> dict[str, Any]:
    lin = Lineage()
    lin.apply_many(parse_event(e) for e in events)
    lin.finish_input()
    return lin.final_state()


# ----------------------------------------------------------------------------------- the model


def test_model_learns_in_200_steps() -> None:
    theta0 = M.base_theta()
    theta, losses = train(theta0, range(1, 201), lambda s: 0.2)
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert last < 0.5 * first, (first, last)
    ev0, acc0 = M.evaluate(theta0, TASK)
    ev, acc = M.evaluate(theta, TASK)
    assert ev < 0.5 * ev0 and acc > acc0 + 0.4, (ev0, ev, acc0, acc)
    # the noise floor: no step's loss is anywhere near a 3x spike over its last 10
    assert max(losses[i] / statistics.median(losses[i - 10:i]) for i in range(10, 200)) < 1.8


def test_task_is_shared_and_data_order_is_per_job() -> None:
    other = M.Task()
    assert np.array_equal(other.x_train, TASK.x_train) and np.array_equal(other.y_eval, TASK.y_eval)
    x1, _ = TASK.batch(1, 5)
    x1b, _ = TASK.batch(1, 5)
    x2, _ = TASK.batch(2, 5)
    assert np.array_equal(x1, x1b) and not np.array_equal(x1, x2)
    n_steps = CFG.n_train // CFG.batch_size
    assert TASK.epoch_of(n_steps) == 0 and TASK.epoch_of(n_steps + 1) == 1
    assert np.array_equal(M.base_theta(), M.base_theta()) and M.base_theta().dtype == np.float32


def test_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    theta = M.base_theta().astype(np.float64) + rng.normal(0, 0.01, CFG.n_params)
    x, y = TASK.batch(3, 1)
    x = x[:32].astype(np.float64)
    y = y[:32]
    ref = M.predict_proba(theta + rng.normal(0, 0.1, CFG.n_params), x)
    _, grad = M.loss_and_grad(theta, x, y, ref_probs=ref, ref_coef=0.7)
    for i in rng.choice(CFG.n_params, 25, replace=False):
        e = np.zeros_like(theta)
        e[i] = 1e-6
        up = M.loss_and_grad(theta + e, x, y, ref_probs=ref, ref_coef=0.7)[0].total
        down = M.loss_and_grad(theta - e, x, y, ref_probs=ref, ref_coef=0.7)[0].total
        assert math.isclose((up - down) / 2e-6, grad[i], rel_tol=1e-4, abs_tol=1e-7), i


def test_lr_blowup_spikes_at_once_and_reaches_nan() -> None:
    theta, losses = train(M.base_theta(), range(1, 101), lambda s: 0.2)
    med = statistics.median(losses[-10:])
    x, y = TASK.batch(1, 101)
    stats, grad = M.loss_and_grad(theta, x, y)
    theta = M.sgd_step(theta, grad, 0.2 * 1000)  # update 101 blows up
    spike, nan_at = None, None
    for s in range(102, 140):
        x, y = TASK.batch(1, s)
        stats, grad = M.loss_and_grad(theta, x, y)
        if spike is None:
            spike = stats.loss
        if not M.is_finite(stats.loss, stats.grad_norm):
            nan_at = s
            break
        theta = M.sgd_step(theta, grad, 0.2 * 1000)
    assert spike > 100 * med  # the first loss on blown-up weights
    assert nan_at is not None and nan_at <= 101 + 20, nan_at


def test_checkpoint_round_trip_and_deterministic_bytes(tmp_path: Path) -> None:
    theta, _ = train(M.base_theta(), range(1, 21), lambda s: 0.2)
    h1 = M.save_checkpoint(tmp_path / "a" / "x.npy", theta)
    h2 = M.save_checkpoint(tmp_path / "b" / "y.npy", theta.copy())
    assert (tmp_path / "a" / "x.npy").read_bytes() == (tmp_path / "b" / "y.npy").read_bytes()
    assert h1 == h2 == M.content_hash(tmp_path / "a" / "x.npy")
    assert h1 == hashlib.sha256(M.checkpoint_bytes(theta)).hexdigest()
    back = M.load_checkpoint(tmp_path / "a" / "x.npy")
    assert back.dtype == theta.dtype and back.tobytes() == theta.tobytes()
    # a later identical save (other time) gives the same bytes; one changed weight does not
    time.sleep(0.01)
    assert M.save_checkpoint(tmp_path / "a" / "x2.npy", back) == h1
    other = theta.copy()
    other[7] = np.nextafter(other[7], np.float32(np.inf))
    assert M.save_checkpoint(tmp_path / "a" / "z.npy", other) != h1
    # non-finite weights round-trip too, and no temporary file is left behind
    nan = theta.copy()
    nan[0] = np.nan
    M.save_checkpoint(tmp_path / "a" / "x.npy", nan)
    assert np.isnan(M.load_checkpoint(tmp_path / "a" / "x.npy")[0])
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["x.npy", "x2.npy", "z.npy"]
    np.save(tmp_path / "bad.npy", np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError):
        M.load_checkpoint(tmp_path / "bad.npy")


def test_weight_averaging_of_siblings() -> None:
    a, la = train(M.base_theta(), range(1, 151), lambda s: 0.2, seed=1)
    b, lb = train(M.base_theta(), range(1, 151), lambda s: 0.1, seed=2)
    avg = M.average(a, b)
    assert avg.dtype == np.float32
    assert np.allclose(avg, (a.astype(np.float64) + b) / 2, atol=1e-6)
    assert np.array_equal(M.average(a, a), a)
    assert np.array_equal(M.average(a, b, 0.0), a) and np.array_equal(M.average(a, b, 1.0), b)
    # children of one base average well: no loss jump (a "model soup")
    ev_a, ev_b, ev_avg = (M.evaluate(t, TASK)[0] for t in (a, b, avg))
    assert ev_avg < 1.2 * max(ev_a, ev_b), (ev_a, ev_b, ev_avg)
    with pytest.raises(ValueError):
        M.average(a, a[:10])


def test_reference_term_pulls_toward_the_reference() -> None:
    ref_theta, _ = train(M.base_theta(), range(1, 41), lambda s: 0.2, seed=5)
    start, _ = train(M.base_theta(), range(1, 41), lambda s: 0.2, seed=6)

    def run(coef: float) -> float:
        theta = start.copy()
        for s in range(41, 141):
            x, y = TASK.batch(6, s)
            ref = M.predict_proba(ref_theta, x)
            _, grad = M.loss_and_grad(theta, x, y, ref_probs=ref, ref_coef=coef)
            theta = M.sgd_step(theta, grad, 0.2)
        p = M.predict_proba(theta, TASK.x_eval)
        q = M.predict_proba(ref_theta, TASK.x_eval)
        return float((q * (np.log(q) - np.log(p))).sum(axis=1).mean())

    assert run(0.5) < 0.6 * run(0.0)  # the scenario's coefficient


# -------------------------------------------------------------------------------- the registry


def test_registry_publish_find_latest(tmp_path: Path) -> None:
    reg_a, reg_b = CohortRegistry(tmp_path), CohortRegistry(tmp_path)
    assert reg_b.find("a-10") is None and reg_b.latest("a") is None and reg_b.jobs() == []
    reg_a.publish({"checkpoint_id": "a-10", "job_id": "a", "path": "/x/a-10.npy", "step": 10})
    reg_a.publish({"checkpoint_id": "a-20", "job_id": "a", "path": "/x/a-20.npy", "step": 20})
    reg_b.publish({"checkpoint_id": "ab-10", "job_id": "ab", "path": "/x/ab-10.npy", "step": 10})
    reader = CohortRegistry(tmp_path)
    assert reader.jobs() == ["a", "ab"]
    assert reader.latest("a")["checkpoint_id"] == "a-20"
    assert reader.find("a-10")["path"] == "/x/a-10.npy" and reader.find("ab-10")["job_id"] == "ab"
    assert [e["checkpoint_id"] for e in reader.entries()] == ["a-10", "a-20", "ab-10"]
    assert not list((tmp_path / "registry").glob(".*"))  # no temporary file left


# ------------------------------------------------------------------------------------ one job


def test_single_job_records_everything(tmp_path: Path) -> None:
    bus = FakeBus()
    factory = Factory(bus)
    spec = JobSpec("solo", "c", seed=1, lr=0.2, steps=95, progress_every=5, checkpoint_every=20)
    res = run_job(spec, factory, cohort_dir=tmp_path, task=TASK)
    client = factory.clients["solo"]
    assert client.closed and res.status == "SUCCEEDED" and res.step == 95
    assert client.calls[0] == "JobStarted" and client.calls[-1] == "JobFinished"
    prog = bus.of("solo", "Progress")
    assert [e["step"] for e in prog] == list(range(5, 96, 5))
    assert prog[-1]["loss"] < 0.6 * prog[0]["loss"] and all(e["lr"] == 0.2 for e in prog)
    cks = bus.of("solo", "CheckpointWritten")
    assert [e["checkpoint_id"] for e in cks] == ["solo-20", "solo-40", "solo-60", "solo-80", "solo-95"]
    assert bus.of("solo", "JobFinished")[0]["final_checkpoint_id"] == "solo-95"
    assert bus.of("solo", "JobStarted")[0]["config_hash"] == spec.config_hash()
    for e in cks:  # the recorded hash is the file's, the file is in the job's directory
        path = tmp_path / "jobs" / "solo" / f"{e['checkpoint_id']}.npy"
        assert e["content_hash"] == M.content_hash(path) and e["uri"] == path.resolve().as_uri()
    assert CohortRegistry(tmp_path).latest("solo")["checkpoint_id"] == "solo-95"
    assert res.steps_computed == 95 and res.eval_loss < 1.2
    assert final_state(bus.events)["incidents"] == []


def test_rollback_restores_exact_weights_and_training_goes_on(tmp_path: Path) -> None:
    bus = FakeBus()

    def setup(c: FakeClient) -> None:
        c.inject(FakeCommand("cmd-1", "ROLLBACK", "r-100", 100, incarnation=0), on_divergence=True)

    factory = Factory(bus, setup=setup)
    spec = JobSpec("r", "c", seed=4, lr=0.2, steps=150, lr_blowup_step=109)
    res = run_job(spec, factory, cohort_dir=tmp_path, task=TASK, nan_wait_s=10)
    assert res.status == "SUCCEEDED" and res.step == 150 and res.incarnation == 1
    div = bus.of("r", "DivergenceReported")
    assert [(e["onset_step"], e["detector"]) for e in div] == [(110, "spike-guard")]
    spike = [e for e in bus.of("r", "Progress") if e["step"] == 110 and e["incarnation"] == 0][0]
    assert spike["loss"] > 100 and spike["lr"] == 200.0
    # the job stopped at the spike: nothing after step 110 in incarnation 0 but its checkpoint
    inc0 = [e for e in bus.of("r") if e["incarnation"] == 0]
    assert inc0[-2:] == [dict(inc0[-2], type="CheckpointWritten", checkpoint_id="r-110"),
                         dict(inc0[-1], type="DivergenceReported")]
    rb = bus.of("r", "RolledBack")
    assert rb == [dict(rb[0], restored_checkpoint_id="r-100", resumed_step=100, command_id="cmd-1",
                       incarnation=1)]
    assert res.commands[0]["action"] == "ROLLBACK"
    # same weights at step 100 + same batches + normal lr: steps 101..108 repeat bit for bit
    p0 = {e["step"]: e["loss"] for e in bus.of("r", "Progress") if e["incarnation"] == 0}
    p1 = {e["step"]: e["loss"] for e in bus.of("r", "Progress") if e["incarnation"] == 1}
    assert p1[105] == p0[105] and p1[110] < 2.0
    # and the next checkpoint is exactly the restored weights trained 10 more steps
    restored = M.load_checkpoint(tmp_path / "jobs" / "r" / "r-100.npy")
    theta, _ = train(restored, range(101, 111), lambda s: 0.2, seed=4)
    assert (tmp_path / "jobs" / "r" / "r-110-i1.npy").read_bytes() == M.checkpoint_bytes(theta)
    ids = [e["checkpoint_id"] for e in bus.of("r", "CheckpointWritten")]
    assert len(ids) == len(set(ids)) and "r-110" in ids and "r-150-i1" in ids
    assert bus.of("r", "JobFinished")[0]["final_checkpoint_id"] == "r-150-i1"
    state = final_state(bus.events)
    assert [i["root"] for i in state["incidents"]] == [{"job_id": "r", "incarnation": 0, "onset_step": 110}]
    assert state["plans"] == [] and "r-110" in state["tainted_checkpoints"]
    assert "r-100" not in state["tainted_checkpoints"]


def test_restart_from_scratch_and_diverged_job_without_command_fails(tmp_path: Path) -> None:
    bus = FakeBus()

    def setup(c: FakeClient) -> None:
        if c.job_id == "s":
            c.inject(FakeCommand("cmd-s", "RESTART_FROM_SCRATCH", None, None), at_step=30)

    factory = Factory(bus, setup=setup)
    res = run_job(JobSpec("s", "c", seed=2, lr=0.2, steps=40), factory, cohort_dir=tmp_path, task=TASK)
    assert res.status == "SUCCEEDED" and res.incarnation == 1 and res.steps_computed == 30 + 40
    assert bus.of("s", "RolledBack")[0]["resumed_step"] == 0
    assert bus.of("s", "RolledBack")[0]["from_scratch"] is True  # SPEC §4 revision 2
    assert "s-10-i1" in res.checkpoints
    # the same first step from the base model: identical loss
    first = [e["loss"] for e in bus.of("s", "Progress") if e["step"] == 5]
    assert len(first) == 2 and first[0] == first[1]

    res = run_job(JobSpec("f", "c", seed=3, lr=0.2, steps=200, lr_blowup_step=50), factory,
                  cohort_dir=tmp_path, task=TASK, nan_wait_s=0.2)
    assert res.status == "FAILED" and res.final_checkpoint_id is None and res.step == 51
    assert bus.of("f", "JobFinished")[0]["status"] == "FAILED"
    div = bus.of("f", "DivergenceReported")
    assert [(e["onset_step"], e["detector"]) for e in div] == [(51, "spike-guard")]


def test_nan_guard_stops_at_the_first_non_finite_loss(tmp_path: Path) -> None:
    """With the spike rule out of play (a window longer than the run), the blow-up runs on until
    float32 overflows; the NaN step is logged and reported, no update is applied from it, and a
    RESTART_FROM_BASE command brings the job back to the base model."""
    bus = FakeBus()

    def setup(c: FakeClient) -> None:
        c.inject(FakeCommand("cmd-n", "RESTART_FROM_BASE", None, None, incarnation=0), on_divergence=True)

    factory = Factory(bus, setup=setup)
    spec = JobSpec("n", "c", seed=5, lr=0.2, steps=60, lr_blowup_step=20)
    res = run_job(spec, factory, cohort_dir=tmp_path, task=TASK, window=10_000)
    div = bus.of("n", "DivergenceReported")
    assert len(div) == 1 and div[0]["detector"] == "nan-guard"
    nan_step = div[0]["onset_step"]
    assert 21 < nan_step <= 21 + 20
    bad = [e for e in bus.of("n", "Progress")
           if not math.isfinite(e["loss"]) or not math.isfinite(e["grad_norm"])]
    assert [e["step"] for e in bad] == [nan_step]
    assert res.status == "SUCCEEDED" and res.incarnation == 1 and res.step == 60
    assert bus.of("n", "RolledBack")[0]["restored_checkpoint_id"] is None
    p5 = [e["loss"] for e in bus.of("n", "Progress") if e["step"] == 5]
    assert len(p5) == 2 and p5[0] == p5[1]  # back on the base model, the same first steps


def test_rollback_restores_the_reference_in_force_at_the_target(tmp_path: Path) -> None:
    """x trains with p-20 as its reference model from step 20. Rolled back to x-30 (reference in
    force) it replays steps 31..40 bit for bit; rolled back again to x-10 (before the reference)
    it replays 11..20 bit for bit and then, the reference gone and the share not redone, differs."""
    bus = FakeBus()

    def setup(c: FakeClient) -> None:
        if c.job_id == "x":
            c.inject(FakeCommand("to-30", "ROLLBACK", "x-30", 30, incarnation=0), at_step=40)
            c.inject(FakeCommand("to-10", "ROLLBACK", "x-10", 10, incarnation=1), at_step=50)

    factory = Factory(bus, setup=setup)
    run_job(JobSpec("p", "c", seed=9, lr=0.2, steps=20), factory, cohort_dir=tmp_path, task=TASK)
    res = run_job(JobSpec("x", "c", seed=8, lr=0.1, steps=60,
                          shares=(Share(20, "REFERENCE", "p", peer_step=20, weight=0.5),)),
                  factory, cohort_dir=tmp_path, task=TASK)
    assert res.status == "SUCCEEDED" and res.incarnation == 2
    assert [c["command_id"] for c in res.commands] == ["to-30", "to-10"]
    consumed = [(e["source_checkpoint_id"], e["mode"]) for e in bus.of("x", "CheckpointConsumed")]
    assert consumed == [("p-20", "REFERENCE")]
    loss = {(e["incarnation"], e["step"]): e["loss"] for e in bus.of("x", "Progress")}
    assert loss[(1, 35)] == loss[(0, 35)] and loss[(1, 40)] == loss[(0, 40)]
    assert loss[(2, 15)] == loss[(0, 15)] and loss[(2, 20)] == loss[(0, 20)]
    assert loss[(2, 25)] != loss[(0, 25)]
    assert "x-30-i1" not in res.checkpoints and "x-40-i1" in res.checkpoints and "x-60-i2" in res.checkpoints


def test_a_halt_that_outlasts_its_wait_cancels_the_job(tmp_path: Path) -> None:
    bus = FakeBus()

    def setup(c: FakeClient) -> None:
        c.halt_at = 25

    res = run_job(JobSpec("h", "c", seed=1, lr=0.2, steps=60), Factory(bus, setup=setup),
                  cohort_dir=tmp_path, task=TASK, halt_wait_s=0.1)
    assert res.status == "CANCELLED" and res.step == 25 and res.final_checkpoint_id is None
    assert bus.of("h", "JobFinished")[0]["status"] == "CANCELLED"


def test_gate_refusal_skips_the_share(tmp_path: Path) -> None:
    bus = FakeBus()
    factory = Factory(bus, refuse=frozenset({"p-20"}))
    run_job(JobSpec("p", "c", seed=1, lr=0.2, steps=20), factory, cohort_dir=tmp_path, task=TASK)
    spec = JobSpec("q", "c", seed=2, lr=0.2, steps=30, shares=(Share(10, "MERGE", "p", peer_step=20),
                                                              Share(20, "PBT_EXPLOIT", "p")))
    res = run_job(spec, factory, cohort_dir=tmp_path, task=TASK)
    assert res.status == "SUCCEEDED"
    assert [r["checkpoint_id"] for r in res.refused] == ["p-20", "p-20"]
    assert bus.of("q", "CheckpointConsumed") == []


# ----------------------------------------------------------------------------- the scenario


def test_scenario_facts_are_consistent() -> None:
    specs = default_cohort()
    facts = expected(specs)
    assert len(specs) == 6 and len({s.job_id for s in specs}) == 6
    assert ONSET == BLOWUP_UPDATE + 1 and ONSET % specs[0].checkpoint_every == 0
    by_id = {j.job_id: j for j in specs}
    for j in specs:  # every share names a checkpoint its peer surely writes in incarnation 0
        for sh in j.shares:
            peer = by_id[sh.peer]
            assert sh.peer_step is not None and sh.peer_step % peer.checkpoint_every == 0
            assert sh.peer_step <= min(peer.steps, (peer.lr_blowup_step or peer.steps) + 1)
    consumed_by = {(j.job_id, sh.checkpoint_id) for j in specs for sh in j.shares}
    assert ("j2", f"j1-{ONSET}") in consumed_by and ("j3", "j1-80") in consumed_by
    touched = {j.job_id for j in specs if j.shares} | {sh.peer for j in specs for sh in j.shares}
    assert set(facts["untouched"]) == {j.job_id for j in specs} - touched
    text = describe(specs)
    assert "j1" in text and "PBT_EXPLOIT j1-110" in text and "clean j3, j4, j5, j6" in text


SCENARIO_STEPS = 200  # the default is 300; 200 keeps every sharing action and saves test time


def _check_scenario_log(bus: FakeBus, results: dict[str, Any]) -> dict[str, Any]:
    facts = expected()
    assert all(r.status == "SUCCEEDED" for r in results.values()), {j: r.status for j, r in results.items()}
    # j1's loss spiked in Progress 110 (incarnation 0) and j1-110 was written right after it
    p110 = [e for e in bus.of("j1", "Progress") if e["step"] == ONSET and e["incarnation"] == 0][0]
    earlier = [e["loss"] for e in bus.of("j1", "Progress") if e["step"] < ONSET and e["incarnation"] == 0]
    assert p110["loss"] > 100 * statistics.median(earlier[-10:])
    # j2 consumed j1-110, a checkpoint written after the onset; j3 only j1-80
    j2c = bus.of("j2", "CheckpointConsumed")
    assert [(e["source_checkpoint_id"], e["mode"], e["step"]) for e in j2c] == \
        [(f"j1-{ONSET}", "PBT_EXPLOIT", 120)]
    assert [e["source_checkpoint_id"] for e in bus.of("j3", "CheckpointConsumed")] == ["j1-80"]
    assert bus.of("j6", "CheckpointConsumed") == []
    # rollbacks: exactly j1 and j2, to the expected checkpoints
    for job in ("j1", "j2"):
        rb = bus.of(job, "RolledBack")
        want = facts["rollbacks"][job]
        assert [(e["restored_checkpoint_id"], e["resumed_step"]) for e in rb] == \
            [(want["target_checkpoint_id"], want["target_step"])]
        # the rolled-back job trained on in incarnation 1 and finished there
        assert results[job].incarnation == 1 and results[job].step == SCENARIO_STEPS
        assert results[job].final_checkpoint_id == f"{job}-{SCENARIO_STEPS}-i1"
        assert results[job].eval_loss < 1.2
    for job in facts["clean"]:
        assert bus.of(job, "RolledBack") == [] and results[job].incarnation == 0
        assert results[job].step == SCENARIO_STEPS and results[job].eval_loss < 1.2
    # what the real core concludes from the whole log
    state = final_state(bus.events)
    roots = [i for i in state["incidents"]]
    assert len(roots) == 1, roots
    inc = roots[0]
    assert inc["root"] == {k: facts["root"][k] for k in ("job_id", "incarnation", "onset_step")}
    assert inc["verdict"] == "INTERNAL"
    assert [(c["job_id"], c["incarnation"], c["via_checkpoint_id"]) for c in inc["contaminated"]] == \
        [(c["job_id"], c["incarnation"], c["via_checkpoint_id"]) for c in facts["contaminated"]]
    assert state["plans"] == [] and state["halts"] == []  # everyone affected was rolled back
    assert set(facts["tainted_include"]) <= set(state["tainted_checkpoints"])
    assert all(ck.split("-")[0] in ("j1", "j2") for ck in state["tainted_checkpoints"])
    assert "j1-100" not in state["tainted_checkpoints"] and "j2-120" not in state["tainted_checkpoints"]
    return inc


def test_scenario_with_injected_rollbacks(tmp_path: Path) -> None:
    """No referee: the test answers each job's own divergence report with the expected rollback,
    so both the root's and the consumer's divergences are seen (live, commands come earlier)."""
    bus = FakeBus()
    facts = expected()

    def setup(c: FakeClient) -> None:
        want = facts["rollbacks"].get(c.job_id)
        if want:
            c.inject(FakeCommand(f"rb-{c.job_id}", want["action"], want["target_checkpoint_id"],
                                 want["target_step"], incarnation=0), on_divergence=True)

    results = run_cohort(default_cohort(steps=SCENARIO_STEPS), Factory(bus, setup=setup), tmp_path,
                         nan_wait_s=30)
    inc = _check_scenario_log(bus, results)
    d1 = bus.of("j1", "DivergenceReported")
    assert [(e["onset_step"], e["detector"]) for e in d1] == [(ONSET, "spike-guard")]
    d2 = bus.of("j2", "DivergenceReported")
    assert [(e["onset_step"], e["detector"]) for e in d2] == [(121, "spike-guard")]
    assert inc["secondary_divergences"] == [{"job_id": "j2", "incarnation": 0, "onset_step": 121}]
    # j4 evaluated the exploded j1-110 only: recorded, clean, and its loss there was enormous
    assert results["j4"].evaluations[0]["checkpoint_id"] == f"j1-{ONSET}"
    assert not results["j4"].evaluations[0]["eval_loss"] < 10


def test_scenario_with_the_core_as_live_referee(tmp_path: Path) -> None:
    """The real lineage core decides as events arrive; its commands reach the jobs' next poll."""
    bus = FakeBus(referee=True)
    results = run_cohort(default_cohort(steps=SCENARIO_STEPS), Factory(bus), tmp_path, nan_wait_s=30)
    _check_scenario_log(bus, results)
    facts = expected()
    issued = {(c.action, c.target_checkpoint_id, c.target_step) for c in bus.issued}
    assert issued == {(p["action"], p["target_checkpoint_id"], p["target_step"])
                      for p in facts["rollbacks"].values()}
