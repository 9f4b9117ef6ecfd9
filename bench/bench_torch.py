"""Benchmark of the PyTorch integration (issue 15): its overhead per training step of a real
tiny torch model.

The model is an MLP (``--width`` hidden units, calibrated at start so one SGD step on a batch
of 128 takes about ``--step-ms`` ms on this machine, one torch thread). Four loops of ``--steps``
steps each, interleaved step by step (the machine is shared, so each sees it alike), each on its
own copy of the model:

1. ``bare``: forward, backward, optimizer step;
2. ``lineage``: the same plus ``TorchLineage.poll()`` every step and ``TorchLineage.progress()``
   every ``--progress-every`` steps (1: the worst case; a Progress event is chained, sealed when
   due, Avro-encoded, journaled with fsync — the bulk of its cost, ``--no-fsync`` shows it —
   and handed to the idempotent producer);
3. ``torch.save``: the bare step plus, every ``--ckpt-every`` steps, ``torch.save`` of model and
   optimizer to a file (what a job does without traintrace);
4. ``lineage+save``: loop 2 plus ``TorchLineage.save()`` every ``--ckpt-every`` steps (the same
   bytes written atomically, their SHA-256, a CheckpointWritten event).

Reported: ms per step (mean, median) of each loop and its ratio to ``bare``; the ms measured
inside ``poll()`` + ``progress()`` per step (less noisy than a difference of two loops); for checkpointing,
the ratio of loop 4 to loop 3 and the split of one ``save()`` into serialising + writing,
hashing, and the event. Events go to a real broker (``--bootstrap`` or
``KAFKA_BOOTSTRAP_SERVERS``, else a LocalBroker started for the run).

Usage: python bench/bench_torch.py [--steps 60] [--step-ms 30] [--ckpt-every 10] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from bench_client import _Broker  # noqa: E402
from streams.client import JobClient  # noqa: E402
from streams.integrations.torch import TorchLineage, checkpoint_bytes  # noqa: E402
from streams.kafka.topics import TopicNames, ensure_topics, standard_topics  # noqa: E402

BATCH = 128
DIM = 256


def build(width: int, seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 10))
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, DIM, generator=g), torch.randint(0, 10, (BATCH,), generator=g)


def train_step(model, opt, x, y) -> float:
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def calibrate(step_ms: float) -> int:
    x, y = data()
    width = 256
    while True:
        model, opt = build(width)
        train_step(model, opt, x, y)
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            train_step(model, opt, x, y)
            runs.append((time.perf_counter() - t) * 1000)
        if statistics.median(runs) >= step_ms or width >= 8192:
            return width
        width = int(width * 1.25)


def split_save(lineage: TorchLineage, step: int) -> dict[str, float]:
    """One save, by part (ms): serialising + writing, hashing, recording."""
    import hashlib

    from streams.files.atomic import atomic_write

    t0 = time.perf_counter()
    data_ = checkpoint_bytes(lineage.model, lineage.optimizer, step=step)
    path = lineage.store.file(f"split-{step}")
    atomic_write(path, data_)
    t1 = time.perf_counter()
    h = hashlib.sha256(data_).hexdigest()
    t2 = time.perf_counter()
    lineage.client.checkpoint_written(f"split-{step}", path, step, 0, content_hash=h)
    t3 = time.perf_counter()
    return {"serialise_write_ms": (t1 - t0) * 1000, "hash_ms": (t2 - t1) * 1000, "event_ms": (t3 - t2) * 1000,
            "mb": len(data_) / 1e6}


def run(args, bootstrap: str, tmp: Path) -> dict[str, Any]:
    torch.set_num_threads(1)
    prefix = f"bt{uuid.uuid4().hex[:6]}."
    topics = TopicNames.from_env(prefix)
    ensure_topics(bootstrap, standard_topics(topics, 1))
    width = args.width or calibrate(args.step_ms)
    x, y = data()
    loops = {name: build(width) for name in ("bare", "lineage", "torch.save", "lineage+save")}
    lineages = {}
    for name in ("lineage", "lineage+save"):
        client = JobClient(f"bench-{name}", "bench", "mlp", journal_dir=tmp / name, bootstrap=bootstrap,
                           topics=topics, fsync=not args.no_fsync)
        lineages[name] = TorchLineage(client, tmp / "ckpts", *loops[name])
        lineages[name].start()
    times: dict[str, list[float]] = {n: [] for n in loops}
    inside: list[float] = []  # ms inside poll() + progress() of loop 2, per step
    names = list(loops)
    for step in range(1, args.steps + 1):
        for name in names[step % 4:] + names[:step % 4]:  # each loop first in turn
            model, opt = loops[name]
            t = time.perf_counter()
            lin = lineages.get(name)
            if lin is not None:
                lin.poll(step)
            t_poll = time.perf_counter() - t
            loss = train_step(model, opt, x, y)
            if lin is not None:
                t1 = time.perf_counter()
                if step % args.progress_every == 0:
                    lin.progress(step, loss)
                if name == "lineage":
                    inside.append((t_poll + time.perf_counter() - t1) * 1000)
            if step % args.ckpt_every == 0:
                if name == "torch.save":
                    buf = io.BytesIO()
                    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buf)
                    (tmp / f"plain-{step}.pt").write_bytes(buf.getvalue())
                elif name == "lineage+save":
                    lin.save(step)
            times[name].append((time.perf_counter() - t) * 1000)
    parts = [split_save(lineages["lineage+save"], s) for s in range(3)]
    for lin in lineages.values():
        lin.client.flush(60)
        lin.client.close()
    mean = {n: statistics.fmean(v) for n, v in times.items()}
    return {
        "width": width, "params": sum(p.numel() for p in loops["bare"][0].parameters()),
        "steps": args.steps, "ckpt_every": args.ckpt_every, "broker": args.broker_note,
        "progress_every": args.progress_every, "journal_fsync": not args.no_fsync,
        "ms_per_step": {n: {"mean": round(mean[n], 3), "median": round(statistics.median(v), 3)}
                        for n, v in times.items()},
        "ratio_lineage_vs_bare": round(mean["lineage"] / mean["bare"], 4),
        "ratio_lineage_save_vs_torch_save": round(mean["lineage+save"] / mean["torch.save"], 4),
        "ratio_lineage_save_vs_bare": round(mean["lineage+save"] / mean["bare"], 4),
        "overhead_ms_per_step": round(mean["lineage"] - mean["bare"], 3),
        "inside_ms_per_step": {"mean": round(statistics.fmean(inside), 4), "median": round(statistics.median(inside), 4)},
        "ratio_inside_vs_bare": round((mean["bare"] + statistics.fmean(inside)) / mean["bare"], 4),
        "save_split_ms": {k: round(statistics.median(p[k] for p in parts), 3) for k in parts[0]},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--step-ms", type=float, default=30.0)
    ap.add_argument("--width", type=int, help="fix the hidden width instead of calibrating")
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--progress-every", type=int, default=1,
                    help="a Progress event every N steps (HF Trainer logs every logging_steps, Lightning "
                         "every log_every_n_steps=50 by default)")
    ap.add_argument("--no-fsync", action="store_true", help="journal without fsync (JobClient fsync=False)")
    ap.add_argument("--bootstrap")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with _Broker(args.bootstrap) as broker, tempfile.TemporaryDirectory(prefix="tt-bench-torch-") as tmp:
        args.broker_note = broker.note
        out = run(args, broker.bootstrap, Path(tmp))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"tiny torch MLP: width {out['width']}, {out['params']:,} parameters, {out['steps']} steps per loop, "
          f"checkpoint every {out['ckpt_every']} ({out['broker']})")
    for n, v in out["ms_per_step"].items():
        print(f"  {n:14s} {v['mean']:8.2f} ms/step mean  {v['median']:8.2f} median")
    print(f"lineage (poll every step, progress every {out['progress_every']}, journal fsync "
          f"{'on' if out['journal_fsync'] else 'off'}) / bare: x{out['ratio_lineage_vs_bare']:.4f} "
          f"(+{out['overhead_ms_per_step']:.3f} ms per step)")
    ins = out["inside_ms_per_step"]
    print(f"  measured inside poll()+progress(): {ins['mean']:.3f} ms/step mean ({ins['median']:.3f} median) "
          f"= x{out['ratio_inside_vs_bare']:.4f} of a bare step")
    print(f"lineage+save / torch.save: x{out['ratio_lineage_save_vs_torch_save']:.4f}; "
          f"lineage+save / bare: x{out['ratio_lineage_save_vs_bare']:.4f}")
    s = out["save_split_ms"]
    print(f"one save of {s['mb']:.1f} MB: serialise+write {s['serialise_write_ms']:.2f} ms, "
          f"hash {s['hash_ms']:.2f} ms, event {s['event_ms']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
