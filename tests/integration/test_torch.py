"""PyTorch integration (issue 15) on a real broker and a real worker: three tiny torch jobs of one
cohort, stepped round-robin in this process, each through its own JobClient and TorchLineage.

- A blows up at step 12 (its weights scaled by 1e20 before the forward pass: an infinite loss).
  Its step writes ``A-12`` before it reports the loss, as a framework's end-of-step callback
  does; A's guard reports the divergence.
- B exploits ``A-12`` (PBT_EXPLOIT) in between, when the referee had no reason to refuse it: B is
  contaminated and its own loss goes non-finite.
- C merged ``A-4`` (clean) at step 6 and is refused ``A-12`` by the load-time gate at step 16.

The referee rolls A back to ``A-8`` and B to ``B-12``; each job restores model, optimizer and
scheduler through TorchLineage's restore path, trains on to the end and finishes; C is untouched;
the log audits clean.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from streams.client import GateRefused  # noqa: E402
from streams.integrations.torch import TorchLineage, read_checkpoint  # noqa: E402
from tests.integration.frameworks import assert_checkpoints_hold_what_was_recorded  # noqa: E402

pytestmark = pytest.mark.integration

STEPS = 20
BLOWUP = 12


def tiny(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.9)
    return model, opt, sched


class Job:
    def __init__(self, run, name: str, seed: int, store, **kw) -> None:
        self.name = name
        self.model, self.opt, self.sched = tiny(seed)
        self.restores: list[tuple[str | None, int, bool]] = []
        self.client = run.client(name)
        self.lineage = TorchLineage(self.client, store, self.model, self.opt, self.sched,
                                    on_restored=self._restored, **kw)
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(64, 8, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True).tanh()
        self.step = 0
        self.ok = True
        self.pending: tuple[int, float] | None = None

    def _restored(self, r) -> None:
        self.restores.append((r.checkpoint_id, r.step, r.from_scratch))
        if r.checkpoint_id:  # what was restored is exactly the target's state
            ck, _ = read_checkpoint(self.lineage.store.locate(r.checkpoint_id))
            for k, v in self.model.state_dict().items():
                assert torch.equal(v, ck.model[k]), (self.name, r, k)
            assert self.opt.state_dict()["param_groups"][0]["lr"] == ck.optimizer["param_groups"][0]["lr"]
            assert self.sched.state_dict() == ck.scheduler

    def train_step(self) -> float:
        """One update; returns the loss measured before it (A's weights blow up at BLOWUP)."""
        if self.name == "A" and self.step == BLOWUP and self.client.incarnation == 0:
            with torch.no_grad():
                for p in self.model.parameters():
                    p.mul_(1e20)
        self.opt.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        self.sched.step()
        return loss.item()


def step_job(run, j: Job, jobs: dict[str, Job], refused: list) -> None:
    """One turn of job ``j``: obey the referee, or train one step and do what the story says."""
    resumed = j.lineage.poll(j.step)
    if resumed != j.step:
        j.step, j.ok = resumed + 1, True  # the checkpoint of step s holds the update of step s
        return
    if j.pending is not None:  # A's end-of-step report, one turn late (see the module doc)
        s, loss = j.pending
        j.pending = None
        j.ok = j.lineage.progress(s, loss)
        j.step += j.ok
        return
    if not j.ok:
        time.sleep(0.05)  # diverged: waiting for the rollback
        return
    loss = j.train_step()
    if j.step % 4 == 0:
        j.lineage.save(j.step)
    first = j.client.incarnation == 0
    if j.name == "A" and j.step == BLOWUP and first:
        assert j.client.flush(30) == 0
        j.pending = (j.step, loss)
        return
    j.ok = j.lineage.progress(j.step, loss)
    if j.name == "B" and j.step == BLOWUP and first:
        j.lineage.load("A-12", BLOWUP, "PBT_EXPLOIT")  # written, not yet known to be bad
    if j.name == "C" and j.step == 6:
        j.lineage.load("A-4", 6, "MERGE", weight=0.5)
    if j.name == "C" and j.step == 16:
        run.wait_status("A-12", "tainted")
        try:
            j.lineage.load("A-12", 16, "PBT_EXPLOIT")
        except GateRefused as exc:
            refused.append(exc)
    j.step += j.ok


def test_torch_cohort_rollback_through_the_restore_path(lineage_cohort, tmp_path):
    run = lineage_cohort()
    store = tmp_path / "ckpts"
    jobs = {n: Job(run, n, seed, store) for n, seed in (("A", 1), ("B", 2), ("C", 3))}
    for j in jobs.values():
        j.lineage.start()
    refused: list[GateRefused] = []
    deadline = time.monotonic() + 180
    while any(j.step < STEPS for j in jobs.values()):
        assert time.monotonic() < deadline, {n: (j.step, j.ok, j.restores) for n, j in jobs.items()}
        for j in jobs.values():
            if j.step < STEPS:
                step_job(run, j, jobs, refused)
    for j in jobs.values():
        j.lineage.finish()
    run.settle(grace_s=1)

    assert [e.status for e in refused] == ["tainted"]
    assert run.rollbacks() == {"A": ("ROLLBACK", "A-8"), "B": ("ROLLBACK", "B-12")}
    assert jobs["A"].restores == [("A-8", 8, False)]
    assert jobs["B"].restores == [("B-12", 12, False)]
    assert jobs["C"].restores == []
    for j in jobs.values():  # everyone trained to the end on finite weights
        assert all(torch.isfinite(p).all() for p in j.model.parameters()), j.name
    events = run.events()
    kinds = [(e["job_id"], e["type"]) for e in events]
    assert kinds.count(("A", "RolledBack")) == 1 and kinds.count(("B", "RolledBack")) == 1
    consumed = sorted((e["job_id"], e["source_checkpoint_id"], e["mode"]) for e in events
                      if e["type"] == "CheckpointConsumed")
    assert consumed == [("B", "A-12", "PBT_EXPLOIT"), ("C", "A-4", "MERGE")]
    written = {e["checkpoint_id"] for e in events if e["type"] == "CheckpointWritten"}
    assert {"A-12", "A-12-i1", "B-16-i1", "C-16"} <= written
    assert_checkpoints_hold_what_was_recorded(events, finals=False)
    run.assert_audits_clean()


def test_a_halt_pauses_the_torch_job_in_poll_until_released(lineage_cohort, tmp_path):
    """A job that consumed a checkpoint nobody recorded (gate warn) is halted UNTRACEABLE_SOURCE
    after the grace period: TorchLineage.poll blocks until an operator releases it."""
    import threading

    from streams.client import checkpoint_status
    from streams.integrations.torch import checkpoint_bytes
    from streams.operator_commands.release import release_job

    run = lineage_cohort()
    model, opt, sched = tiny(5)
    client = run.client("H", gate="warn", trusted_keys=None, gate_unknown_wait=0)  # the release is unsigned
    lineage = TorchLineage(client, tmp_path / "ckpts", model, opt, sched)
    lineage.start()
    ghost = lineage.store.file("ghost-1")
    ghost.parent.mkdir(parents=True, exist_ok=True)
    ghost.write_bytes(checkpoint_bytes(*tiny(6)[:2]))  # a file in the store that no job recorded
    assert checkpoint_status(run.worker_url, "ghost-1")["status"] == "unknown"
    lineage.load("ghost-1", 1, "PBT_EXPLOIT")
    lineage.progress(1, 0.5)
    assert client.flush(30) == 0
    deadline = time.monotonic() + 60
    while not client.halted:  # the grace period (4 s) on the worker's input watermark
        assert time.monotonic() < deadline, "no HaltCommand"
        client.poll(timeout=0.5)
    assert client.halt["reason"] == "UNTRACEABLE_SOURCE"
    returned: list[int | None] = []
    waiter = threading.Thread(target=lambda: returned.append(lineage.poll(2)), daemon=True)
    waiter.start()
    waiter.join(2.0)
    assert waiter.is_alive() and not returned, "poll returned while the job is halted"
    release_job(run.bootstrap, run.topics, "H", operator="test")
    waiter.join(60)
    assert returned == [2] and not client.halted
    lineage.progress(2, 0.4)
    lineage.save(2)
    lineage.finish()
    run.settle()
    assert run.plans()["halts"] == []


def test_safetensors_checkpoints_are_recorded_and_loaded_through_the_gate(lineage_cohort, tmp_path):
    """format="safetensors": a folder (model.safetensors + training_state.pt) hashed as a tree;
    another job merges it through the gate, and a tampered folder is refused."""
    from streams.client.hashing import hash_directory

    run = lineage_cohort()
    store = tmp_path / "ckpts"
    wm, wo, ws = tiny(7)
    writer = TorchLineage(run.client("W"), store, wm, wo, ws, format="safetensors")
    writer.start()
    writer.progress(4, 0.5)
    ck_id = writer.save(4)
    folder = writer.store.folder(ck_id)
    assert (folder / "model.safetensors").is_file() and (folder / "training_state.pt").is_file()
    assert writer.last_saved.content_hash == hash_directory(folder)
    ck, content = read_checkpoint(folder)
    assert all(torch.equal(v, ck.model[k]) for k, v in wm.state_dict().items())
    assert ck.step == 4 and ck.scheduler == ws.state_dict()
    assert writer.client.flush(30) == 0

    rm, ro, rs = tiny(8)
    before = {k: v.clone() for k, v in rm.state_dict().items()}
    reader = TorchLineage(run.client("R"), store, rm, ro, rs)
    reader.start()
    reader.load(ck_id, 2, "MERGE", weight=0.25)
    for k, v in rm.state_dict().items():  # (1 - w) * own + w * source
        assert torch.allclose(v, 0.75 * before[k] + 0.25 * wm.state_dict()[k], atol=1e-6), k
    # the folder changed after it was recorded: the gate's hash check refuses it
    (folder / "training_state.pt").write_bytes((folder / "training_state.pt").read_bytes() + b"x")
    with pytest.raises(GateRefused) as refused:
        reader.load(ck_id, 3, "PBT_EXPLOIT")
    assert refused.value.status == "mismatch"
    writer.finish()
    reader.finish()
    run.settle()
    consumed = [(e["job_id"], e["source_checkpoint_id"], e["mode"]) for e in run.events()
                if e["type"] == "CheckpointConsumed"]
    assert consumed == [("R", ck_id, "MERGE")]
