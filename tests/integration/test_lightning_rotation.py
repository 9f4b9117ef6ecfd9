"""Lightning's own ``BoringModel`` (``pytorch_lightning.demos.boring_classes``), as a user fits
it (issue 22), on a real broker and a real worker: the user's own
``ModelCheckpoint(save_top_k=2, monitor="val_score", mode="max")`` next to the integration, and
the integration's ``LineageCheckpoint`` rotating its store too (``save_top_k=2``: the newest two),
through the referee (SPEC §13: the worker runs with a settle horizon of 1 s).

B checkpoints every 4 steps and exploits ``S-4`` (a checkpoint of job S, a plain job client) at
step 6. At step 13 B waits until the referee marks ``B-4`` deletable (superseded by the settled
``B-8``) and the rotation deletes it; then S reports a divergence with onset 3 — the horizon
broken on purpose, seconds after its onset: the referee rolls B back to ``B-4``, its last
checkpoint before the exploit — which is gone, and nothing older survives. B restarts from its start state (its base), records ``RolledBack``
naming that, refits through Lightning and finishes; nothing is raised out of
``fit_under_control``; the user's monitored score, which Lightning maximises, is never recorded
as a loss; the log audits clean.
"""

from __future__ import annotations

import os
import time

import pytest

pl = pytest.importorskip("pytorch_lightning")
torch = pytest.importorskip("torch")

from pytorch_lightning.callbacks import ModelCheckpoint  # noqa: E402
from pytorch_lightning.demos.boring_classes import BoringModel  # noqa: E402

from streams.client.restored import Restored  # noqa: E402
from streams.integrations.lightning import LineageCheckpoint, TraintraceCallback, fit_under_control  # noqa: E402
from tests.integration.frameworks import assert_checkpoints_hold_what_was_recorded  # noqa: E402

pytestmark = pytest.mark.integration
os.environ.setdefault("HF_HUB_OFFLINE", "1")

STEPS = 20
WAIT = 90.0


class Scored(BoringModel):
    """The user's BoringModel: it logs a validation score to maximise (``val_score``), and the
    test's story runs at the start of each training step."""

    story = None

    def training_step(self, batch, batch_idx):
        if self.story is not None:
            self.story(self, self.trainer.global_step)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        out = super().validation_step(batch, batch_idx)
        self.log("val_score", -out["x"])
        return out


def record_s4(store, source) -> None:
    """S's checkpoint S-4: a BoringModel's weights in Lightning's format, written and recorded."""
    torch.manual_seed(9)
    torch.save({"state_dict": BoringModel().state_dict(), "global_step": 4}, store / "S-4.pt")
    source.progress(4, 0, 1.0)
    source.checkpoint_written("S-4", store / "S-4.pt", 4, 0)


def wait_pruned(lineage, checkpoint_id: str) -> None:
    """Obey and rotate until the rotation deleted ``checkpoint_id`` (the referee allowed it)."""
    deadline = time.monotonic() + WAIT
    while checkpoint_id not in lineage.pruned:
        assert time.monotonic() < deadline, f"{checkpoint_id} never deleted: {lineage.client.retention}"
        lineage.control(timeout=0.2)
        lineage.rotate()


def test_boring_model_with_the_users_model_checkpoint_and_rotation(lineage_cohort, tmp_path):
    from streams.core.state import Config

    torch.set_num_threads(1)
    # BoringModel's loss (random inputs, a fixed target) is noisy: a spike factor of 50 keeps the
    # processor's spike rule from rolling B back a second time on its own noise
    run = lineage_cohort(extra_args=["--spike-factor", "50", "--settle-horizon", "1", "--retention-interval", "0.2"])
    store = tmp_path / "ckpts"
    store.mkdir()
    source = run.client("S", base_model="boring", on_rollback=lambda cmd: None)
    source.start()
    record_s4(store, source)

    lineage = TraintraceCallback(run.client("B", base_model="boring"), store, halt_wait=30)
    seen = {}

    def story(module, step):
        if lineage.client.incarnation:
            return
        if step == 6 and "exploit" not in seen:
            seen["exploit"] = lineage.consume("S-4", "PBT_EXPLOIT")
        if step == 13 and "report" not in seen:
            wait_pruned(lineage, "B-4")  # Lightning dropped it at B-12; the referee allows it once B-8 settles
            seen["report"] = sorted(p.name for p in store.glob("B-*.pt"))
            source.diverged(3, "late-detector", "found by an offline evaluation, after the fact")
            assert source.flush(30) == 0
            run.wait_status("S-4", "tainted")
            assert lineage.wait_for_command(WAIT), "no command for B"
            module.trainer.should_stop = True

    user_checkpoints = []

    def make():
        user = ModelCheckpoint(dirpath=str(tmp_path / "user" / str(len(user_checkpoints))), save_top_k=2,
                               monitor="val_score", mode="max")
        user_checkpoints.append(user)
        return pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                          enable_model_summary=False, val_check_interval=4, limit_val_batches=2,
                          default_root_dir=str(tmp_path),
                          callbacks=[lineage, LineageCheckpoint(lineage, every_n_train_steps=4, save_top_k=2), user])

    torch.manual_seed(2)
    model = Scored()
    model.story = story
    trainer = fit_under_control(make, model, lineage, command_wait=WAIT)  # nothing raised
    source.poll(5)
    source.finished("FAILED")
    run.settle(grace_s=1)

    assert "B-4.pt" not in seen["report"] and seen["report"] == ["B-12.pt", "B-8.pt"]  # rotated
    assert run.rollbacks()["B"] == ("ROLLBACK", "B-4")
    assert lineage.restores[0][:3] == (None, 0, False) and lineage.errors == 1, lineage.outcomes
    assert "B-4" in lineage.outcomes[0] and "base" in lineage.outcomes[0]
    assert trainer.global_step == STEPS
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # the user's own ModelCheckpoint kept its two best, by a score Lightning maximises
    last = user_checkpoints[-1]
    assert len(last.best_k_models) == 2 and os.path.exists(last.best_model_path)

    events = run.events()
    mine = [e for e in events if e["job_id"] == "B"]
    rb = [e for e in mine if e["type"] == "RolledBack"]
    assert [(e["restored_checkpoint_id"], e["resumed_step"], e["from_scratch"]) for e in rb] == [(None, 0, False)]
    assert Restored(None, 0) == Restored(rb[0]["restored_checkpoint_id"], rb[0]["resumed_step"])
    progress = [e for e in mine if e["type"] == "Progress"]
    assert progress and all(e["loss"] is not None for e in progress)  # the training loss only
    assert not [e for e in mine if e["type"] == "DivergenceReported"]
    assert mine[-1]["type"] == "JobFinished" and mine[-1]["status"] == "SUCCEEDED"
    assert run.plans()["plans"] == []
    assert_checkpoints_hold_what_was_recorded(events, finals=False)
    run.assert_audits_clean(Config(spike_factor=50.0))


def test_save_top_k_through_the_referee_keeps_the_rollback_target(lineage_cohort, tmp_path):
    """``LineageCheckpoint(save_top_k=2)`` with the horizon kept: B rotates (B-4 deleted once
    B-8 settles), exploits ``S-4`` at step 13 after saving B-12, and S reports its divergence at
    B's step 14, well within the horizon. B's rotation goes on (B-16, B-20: Lightning drops B-12)
    but the referee keeps B-12, the target, which B restores with no substitution."""
    from streams.core.state import Config

    torch.set_num_threads(1)
    run = lineage_cohort(extra_args=["--spike-factor", "50", "--settle-horizon", "2", "--retention-interval", "0.2"])
    store = tmp_path / "ckpts"
    store.mkdir()
    source = run.client("S", base_model="boring", on_rollback=lambda cmd: None)
    source.start()
    lineage = TraintraceCallback(run.client("B", base_model="boring"), store, halt_wait=30)
    seen = {}

    def story(module, step):
        if lineage.client.incarnation:
            return
        if step == 13 and "exploit" not in seen:
            wait_pruned(lineage, "B-4")
            record_s4(store, source)
            assert source.flush(30) == 0
            run.wait_status("S-4", "clean")
            seen["exploit"] = lineage.consume("S-4", "PBT_EXPLOIT")
        if step == 14 and "report" not in seen:
            seen["report"] = True
            source.diverged(3, "detector", "loss spike")  # within the horizon of S's step 4
            assert source.flush(30) == 0
        if step == 18 and "command" not in seen:
            seen["command"] = True
            assert lineage.wait_for_command(WAIT), "no command for B"
            module.trainer.should_stop = True

    def make():
        return pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                          enable_model_summary=False, limit_val_batches=0, default_root_dir=str(tmp_path),
                          callbacks=[lineage, LineageCheckpoint(lineage, every_n_train_steps=4, save_top_k=2)])

    torch.manual_seed(2)
    model = Scored()
    model.story = story
    trainer = fit_under_control(make, model, lineage, command_wait=WAIT)
    source.poll(5)
    source.finished("FAILED")
    run.settle(grace_s=1)

    assert run.rollbacks()["B"] == ("ROLLBACK", "B-12")
    assert lineage.restores[0][:2] == ("B-12", 12) and lineage.errors == 0, (lineage.restores, lineage.outcomes)
    assert "B-4" in lineage.pruned and "B-12" not in lineage.pruned
    assert trainer.global_step == STEPS
    events = run.events()
    deleted = [e["checkpoint_id"] for e in events if e["type"] == "CheckpointDeleted" and e["job_id"] == "B"]
    written = [e["checkpoint_id"] for e in events if e["type"] == "CheckpointWritten" and e["job_id"] == "B"]
    print(f"\nretention (Lightning, save_top_k=2, H=2s): {len(written)} checkpoint(s) written, {len(deleted)} deleted, "
          f"{len(list(store.glob('B-*.pt')))} on disk at the end")
    from streams.testing.invariants import alert_records

    kinds = [a["kind"] for a in alert_records(run.bootstrap, run.topics)]
    assert "DELETED_PINNED" not in kinds and "RESTORE_SUBSTITUTED" not in kinds, kinds
    assert_checkpoints_hold_what_was_recorded(events, finals=False)
    run.assert_audits_clean(Config(spike_factor=50.0))
