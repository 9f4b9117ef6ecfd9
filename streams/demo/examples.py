"""The worked example of SPEC §12 as events (every event type appears once at least)."""

from __future__ import annotations

import hashlib
from typing import Any

T0 = 1_760_000_000_000


def worked_example() -> list[dict[str, Any]]:
    """Cohort c1: A diverges at step 500 (NaN loss); B consumed A-520 after the onset and later
    reports its own divergence (EXTERNAL); C consumed only A-480 and finishes clean."""
    events: list[dict[str, Any]] = []
    seqs: dict[str, int] = {}
    incs: dict[str, int] = {}
    clock = [T0]

    def emit(job: str, etype: str, **fields: Any) -> None:
        clock[0] += 1000
        seq = seqs.get(job, 0)
        seqs[job] = seq + 1
        if etype == "RolledBack":
            incs[job] = incs.get(job, 0) + 1
        events.append({"type": etype, "job_id": job, "seq": seq, "incarnation": incs.get(job, 0),
                       "ts": clock[0], **fields})

    for job in ("A", "B", "C"):
        emit(job, "JobStarted", cohort_id="c1", base_model="base-7b", base_checkpoint_id=None,
             config_hash=None)

    def progress(job: str, step: int, loss: float) -> None:
        emit(job, "Progress", step=step, epoch=step // 100, loss=loss, grad_norm=1.0, lr=1e-4)

    def ckpt(job: str, step: int) -> None:
        emit(job, "CheckpointWritten", checkpoint_id=f"{job}-{step}", step=step, epoch=step // 100,
             content_hash=hashlib.sha256(f"{job}-{step}".encode()).hexdigest(),
             uri=f"s3://ckpts/{job}-{step}")

    for step in range(20, 561, 20):
        if step <= 520:
            progress("A", step, float("nan") if step == 500 else 2.0 - step / 1000)
            if step in (480, 500, 520):
                ckpt("A", step)
        progress("B", step, 2.0 - step / 1100)
        if step == 400:
            emit("B", "CheckpointConsumed", source_checkpoint_id="A-480", step=400, mode="MERGE")
        if step == 500:
            ckpt("B", 500)
        if step == 520:
            emit("B", "CheckpointConsumed", source_checkpoint_id="A-520", step=520, mode="PBT_EXPLOIT")
        if step in (540, 560):
            ckpt("B", step)
        if step == 540:
            emit("B", "DivergenceReported", onset_step=545, detector="loss-spike", reason="loss x4")
        if step <= 500:
            progress("C", step + 100, 2.0 - step / 1200)
        if step == 500:
            emit("C", "CheckpointConsumed", source_checkpoint_id="A-480", step=600, mode="DISTILL")
            ckpt("C", 600)
    emit("A", "RolledBack", restored_checkpoint_id="A-480", resumed_step=480, command_id=None)
    progress("A", 490, 1.52)
    emit("C", "JobFinished", status="SUCCEEDED", final_checkpoint_id="C-600")
    return events
