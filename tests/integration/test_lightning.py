"""PyTorch Lightning integration (issue 15) on a real broker and a real worker: three tiny
LightningModules of one cohort, each fitted in its own thread by ``fit_under_control`` with a
TraintraceCallback and a LineageCheckpoint (every 4 steps).

- A's optimizer step 11 blows its weights up (x1e20): ``A-12``, written at the end of that
  batch, holds them; the loss of step 12 is infinite and A's guard reports the onset at 12.
- B exploits ``A-12`` (PBT_EXPLOIT) at its step 13, after A wrote it and before A computed the
  loss of step 12 (A waits for B): the referee had no reason to refuse it. B's own loss goes
  non-finite at 13.
- C merged ``A-4`` (clean) at step 6 and is refused ``A-12`` by the load-time gate at step 16.

The referee rolls A back to ``A-8`` and B to ``B-12``; each restore goes through Lightning's own
``ckpt_path`` (the global step and weights after it are the target's); everyone finishes; C is
untouched; the log audits clean.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

pl = pytest.importorskip("pytorch_lightning")
torch = pytest.importorskip("torch")

from streams.client import GateRefused  # noqa: E402
from streams.integrations.lightning import (  # noqa: E402
    LineageCheckpoint,
    TraintraceCallback,
    fit_under_control,
    read_lightning_checkpoint,
)
from tests.integration.frameworks import assert_checkpoints_hold_what_was_recorded  # noqa: E402

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")

STEPS = 20
BLOWUP = 12


class Tiny(pl.LightningModule):
    def __init__(self, seed: int, story=None) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.story = story  # story(module, step): what the test does at each step

    def training_step(self, batch, batch_idx):
        if self.story is not None:
            self.story(self, self.trainer.global_step)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        step = self.trainer.global_step
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        if getattr(self, "blow_at", None) == step:
            self.blow_at = None  # once: not again after the rollback
            with torch.no_grad():
                for p in self.parameters():
                    p.mul_(1e20)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 5, 0.9), "interval": "step"}}


def loader(seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8 * STEPS, 8, generator=g)
    y = x.sum(dim=1, keepdim=True).tanh()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=False)


class Job:
    def __init__(self, run, name: str, seed: int, store) -> None:
        self.name, self.seed = name, seed
        self.model = Tiny(seed)
        self.client = run.client(name)
        self.lineage = TraintraceCallback(self.client, store, grad_norm=True, on_restored=self._restored)
        self.checks: list[str] = []
        self.error: BaseException | None = None

    def _restored(self, r, trainer, module) -> None:
        """What Lightning restored is exactly the target: step, weights, optimizer, scheduler."""
        ck, _ = read_lightning_checkpoint(self.lineage.store.locate(r.checkpoint_id))
        assert trainer.global_step == r.step == ck["global_step"], (self.name, r, trainer.global_step)
        for k, v in module.state_dict().items():
            assert torch.equal(v, ck["state_dict"][k]), (self.name, r, k)
        assert trainer.optimizers[0].state_dict()["param_groups"][0]["lr"] == \
            ck["optimizer_states"][0]["param_groups"][0]["lr"]
        assert trainer.lr_scheduler_configs[0].scheduler.state_dict() == ck["lr_schedulers"][0]
        self.checks.append(r.checkpoint_id)

    def trainer(self):
        return pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                          enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=True,
                          callbacks=[self.lineage, LineageCheckpoint(self.lineage, every_n_train_steps=4)])

    def fit(self) -> None:
        try:
            torch.set_num_threads(1)
            fit_under_control(self.trainer, self.model, self.lineage, command_wait=90,
                              train_dataloaders=loader(self.seed))
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test thread
            self.error = exc


def test_lightning_cohort_rollback_through_ckpt_path(lineage_cohort, tmp_path):
    torch.set_num_threads(1)
    run = lineage_cohort()
    store = tmp_path / "ckpts"
    jobs = {n: Job(run, n, seed, store) for n, seed in (("A", 1), ("B", 2), ("C", 3))}
    a_written, b_consumed = threading.Event(), threading.Event()
    refused: list[GateRefused] = []
    done: set[str] = set()

    def story_a(m, step):
        if step == BLOWUP and "A" not in done:  # A-12 is written: let B take it, then go on
            done.add("A")
            assert jobs["A"].client.flush(30) == 0
            a_written.set()
            assert b_consumed.wait(90)

    def story_b(m, step):
        if step == BLOWUP + 1 and "B" not in done:  # after its step 12 (B-12 is clean)
            done.add("B")
            assert a_written.wait(90)
            jobs["B"].lineage.consume("A-12", "PBT_EXPLOIT")
            b_consumed.set()

    def story_c(m, step):
        if step == 6 and "C6" not in done:
            done.add("C6")
            deadline = time.monotonic() + 90
            while "A-4" not in jobs["A"].lineage.written:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            jobs["C"].lineage.consume("A-4", "MERGE", weight=0.5)
        if step == 16 and "C16" not in done:
            done.add("C16")
            run.wait_status("A-12", "tainted", timeout=90)
            try:
                jobs["C"].lineage.consume("A-12", "PBT_EXPLOIT")
            except GateRefused as exc:
                refused.append(exc)

    jobs["A"].model.story, jobs["A"].model.blow_at = story_a, BLOWUP - 1
    jobs["B"].model.story = story_b
    jobs["C"].model.story = story_c
    threads = [threading.Thread(target=j.fit, name=f"fit-{n}", daemon=True) for n, j in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
        assert not t.is_alive(), f"{t.name} did not finish"
    for j in jobs.values():
        if j.error is not None:
            raise j.error
    run.settle(grace_s=1)

    assert [e.status for e in refused] == ["tainted"]
    assert run.rollbacks() == {"A": ("ROLLBACK", "A-8"), "B": ("ROLLBACK", "B-12")}
    assert jobs["A"].lineage.restores == [("A-8", 8, False, 8)]
    assert jobs["B"].lineage.restores == [("B-12", 12, False, 12)]
    assert jobs["C"].lineage.restores == []
    assert jobs["A"].checks == ["A-8"] and jobs["B"].checks == ["B-12"]
    for j in jobs.values():  # everyone trained to the end on finite weights
        assert all(torch.isfinite(p).all() for p in j.model.parameters()), j.name
    events = run.events()
    kinds = [(e["job_id"], e["type"]) for e in events]
    assert kinds.count(("A", "RolledBack")) == 1 and kinds.count(("B", "RolledBack")) == 1
    assert {(e["job_id"], e["status"]) for e in events if e["type"] == "JobFinished"} == \
        {("A", "SUCCEEDED"), ("B", "SUCCEEDED"), ("C", "SUCCEEDED")}
    reported = sorted((e["job_id"], e["onset_step"]) for e in events if e["type"] == "DivergenceReported")
    assert reported == [("A", BLOWUP), ("B", BLOWUP + 1)]
    consumed = sorted((e["job_id"], e["source_checkpoint_id"], e["mode"], e["step"]) for e in events
                      if e["type"] == "CheckpointConsumed")
    assert consumed == [("B", "A-12", "PBT_EXPLOIT", 13), ("C", "A-4", "MERGE", 6)]
    written = {e["checkpoint_id"] for e in events if e["type"] == "CheckpointWritten"}
    assert {"A-8", "A-12", "A-12-i1", "A-20-i1", "B-12", "B-16-i1", "C-16", "C-20"} <= written
    assert not {"A-16", "B-16"} & written  # nothing saved after a divergence
    progress = [e for e in events if e["type"] == "Progress" and e["job_id"] == "C"]
    assert all(e["lr"] is not None and e["grad_norm"] is not None for e in progress)
    assert_checkpoints_hold_what_was_recorded(events, finals=False)
    run.assert_audits_clean()
