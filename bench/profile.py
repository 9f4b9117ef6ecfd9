"""py-spy on a live worker (issue 27): record a worker process while a bench runs, then say where
its time went.

``Profiler(pid, out)`` starts ``py-spy record`` on the process (collapsed stacks, ``--format
raw``, plus a flame graph SVG when ``flame=True``, a second recorder); ``stop()`` ends it;
``summary(path)`` reads the collapsed stacks of the event loop's thread (the stacks through
``_run_once``: the stages, Faust and the web views all run there; the executor's threads only
wait on the producer's flush) and gives the share of its samples under each of the frames in
:data:`PARTS` (inclusive: a sample counts for every part on its stack) and the top functions by
self time. py-spy ships as a wheel (``pip install py-spy``); without it the
bench runs unprofiled and says so.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

#: (label, a substring of a frame "function (file:line)"[, a substring no frame of the stack may
#: have]) of the worker's parts
PARTS = (
    ("route stage: RouteStage.take (decode, validate, route)", "RouteStage.take (streams/worker/stages.py"),
    ("  of which Router.route_one", "route_one (streams/worker/router.py"),
    ("route stage: finish (EventBatch encode, outbox)", "RouteStage.finish (streams/worker/stages.py"),
    ("fold stage: finish (publish, outbox)", "FoldStage.finish (streams/worker/stages.py"),
    ("fold stage: fold_batch", "fold_batch (streams/referee/input.py"),
    ("  of which read_batch (decode of the EventBatch and its events)", "read_batch (streams/referee/input.py"),
    ("  of which Referee.handle (the pure core)", "handle (streams/referee/referee.py"),
    ("outbox: emit / send / flush", "streams/worker/outbox.py"),
    ("codec: decode", "decode"),
    ("codec: encode", "encode"),
    ("Faust's own machinery (fetch, conductor, streams, events; not in a stage)", "(faust/", "(streams/worker/"),
    ("aiokafka (record parsing, client)", "(aiokafka/"),
    ("the web views (/metrics, /health)", "(aiohttp/"),
    ("asyncio event loop (select, handles)", "asyncio/"),
    ("idle (epoll / select wait)", "select ("),
    ("housekeeping", "streams/worker/housekeeping.py"),
    ("snapshots", "streams/worker/snapshots.py"),
    ("positions / commits", "streams/worker/assignment.py"),
)


class Profiler:
    def __init__(self, pid: int, out: Path, rate: int = 100, flame: bool = False) -> None:
        self.out = out
        self.procs: list[subprocess.Popen] = []
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(exe).exists():
            print("py-spy is not installed (pip install py-spy): no profile", file=sys.stderr)
            return
        out.parent.mkdir(parents=True, exist_ok=True)  # (py-spy writes nothing into a missing directory)
        formats = [("raw", out.with_suffix(".txt"))] + ([("flamegraph", out.with_suffix(".svg"))] if flame else [])
        for fmt, path in formats:
            self.procs.append(subprocess.Popen(
                [exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", fmt, "--output", str(path),
                 "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop(self) -> Path | None:
        for p in self.procs:
            p.send_signal(signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        path = self.out.with_suffix(".txt")
        return path if self.procs and path.exists() else None


def summary(path: Path, top: int = 25) -> dict:
    """The parts' inclusive shares and the top functions by self time, of collapsed stacks."""
    total = 0
    parts: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        k = int(n)
        frames = stack.split(";")
        if not any("_run_once" in f for f in frames):
            continue
        total += k
        self_time[frames[-1]] += k
        for label, needle, *unless in PARTS:
            if any(needle in f for f in frames) and not (unless and any(unless[0] in f for f in frames)):
                parts[label] += k
    return {"samples": total,
            "parts": {part[0]: parts[part[0]] / total for part in PARTS if total},
            "self": [(f, k / total) for f, k in self_time.most_common(top)] if total else []}


def print_summary(s: dict, title: str) -> None:
    print(f"\n{title}: {s['samples']} samples of the event loop's thread", flush=True)
    for label, share in s["parts"].items():
        print(f"  {100 * share:5.1f} %  {label}")
    print("  top self time:")
    for frame, share in s["self"]:
        print(f"  {100 * share:5.1f} %  {frame}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Where a profiled worker's event loop spent its time: the "
                                 "collapsed stacks ``bench_pipeline.py --profile DIR`` wrote (DIR/worker0.txt).")
    ap.add_argument("stacks", type=Path, help="a collapsed-stacks file of py-spy (--format raw)")
    args = ap.parse_args(argv)
    if not args.stacks.is_file():
        print(f"profile: {args.stacks}: no such file (bench_pipeline.py --profile DIR writes DIR/worker0.txt)",
              file=sys.stderr)
        return 2
    print_summary(summary(args.stacks), str(args.stacks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
