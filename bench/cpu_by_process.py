"""Where a command's CPU goes, by kind of process: ``python bench/cpu_by_process.py -- bash .ci/run``.

The test suite starts hundreds of processes (Kafka JVMs, traintrace workers, Ray workers, pip,
the pytest processes themselves), most of them short-lived, so a sampler of ``/proc`` misses
what they spend. This runs the command under the kernel's process accounting (``accton``, from
Debian's ``acct``; root), which writes every process's CPU time when it exits, and samples
``/proc/*/cmdline`` every 0.2 s to name them (a process's accounting record has only its 16-byte
``comm``). At the end it prints the CPU seconds of each kind of process, and with ``--json`` writes
them as JSON. Issue 27 used it to find where the suite's time goes on two cores (docs/benchmarks.md).

Exit status: the command's.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time


def kind(cmd: str, comm: str) -> str:
    """A process's kind, from its command line (or its ``comm`` when none was seen)."""
    c = cmd
    if not c:
        return f"unnamed ({comm})"
    first = c.split(" ")[0]
    if first.endswith("java") or comm == "java":
        if "faults-cluster" in c:
            return "java: the fault suite's cluster"
        if "kafka" in c:
            return "java: other Kafka brokers"
        return "java: other"
    if "default_worker.py" in c or "setup_worker.py" in c or c.startswith("ray::"):
        return "ray: workers"
    if "/ray/" in c or "raylet" in first or "gcs_server" in c:
        return "ray: cluster processes"
    if "exec(eval(sys.stdin.readline()))" in c:
        return "pytest: test processes (xdist)"
    if "-m pytest" in c:
        return "pytest: main"
    if " -m streams worker" in c or "traintrace worker" in c:
        return "traintrace worker"
    if " -m streams " in c or "/bin/traintrace" in c:
        return "traintrace commands"
    if "multiprocessing.spawn" in c:
        return "python: multiprocessing children"
    if re.search(r"\b(uv|pip)\b", c):
        return "pip / uv"
    if "prometheus" in c or "alertmanager" in c:
        return "prometheus / alertmanager"
    if "chrom" in c:
        return "chromium"
    if first.endswith(("go", "compile", "link", "asm", "cgo")) or "go-build" in c:
        return "go toolchain"
    if "python" in first:
        return "python: other"
    return f"other ({os.path.basename(first)[:20]})"


class CmdlineSampler(threading.Thread):
    """Every ``every`` s: the command line of each process, with when it was first seen."""

    def __init__(self, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.seen: dict[str, list[tuple[float, str]]] = {}
        self._done = threading.Event()

    def run(self) -> None:
        current: dict[str, str] = {}
        while not self._done.is_set():
            now = time.time()
            for p in os.listdir("/proc"):
                if not p.isdigit():
                    continue
                try:
                    with open(f"/proc/{p}/cmdline", "rb") as f:
                        c = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
                except OSError:
                    continue
                if c and current.get(p) != c:
                    current[p] = c
                    self.seen.setdefault(p, []).append((now, c))
            self._done.wait(self.every)

    def stop(self) -> None:
        self._done.set()
        self.join(5)


def records(pacct: str) -> list[tuple[str, float, float, str, float]]:
    """(comm, cpu s, elapsed s, pid, exit time) of each accounting record (``dump-acct``)."""
    out = subprocess.run(["dump-acct", pacct], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 15:
            continue
        end = datetime.datetime.strptime(f[14], "%a %b %d %H:%M:%S %Y").timestamp()
        rows.append((f[0], (float(f[2]) + float(f[3])) / 100, float(f[4]) / 100, f[9], end))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="FILE", help="also write the totals here")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command to run (after --)")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given (python bench/cpu_by_process.py -- CMD ...)")
    if os.geteuid() != 0 or not shutil.which("accton") or not shutil.which("dump-acct"):
        print("cpu_by_process: needs root and Debian's acct (accton, dump-acct): apt-get install acct",
              file=sys.stderr)
        return 2
    pacct = tempfile.NamedTemporaryFile(prefix="traintrace-pacct-", delete=False).name
    sampler = CmdlineSampler()
    sampler.start()
    subprocess.run(["accton", pacct], check=True, capture_output=True)
    t0 = time.monotonic()
    try:
        rc = subprocess.call(command)
    finally:
        wall = time.monotonic() - t0
        subprocess.run(["accton", "off"], capture_output=True)
        sampler.stop()
    totals: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for comm, cpu, elapsed, pid, end in records(pacct):
        start = end - elapsed
        cmd = next((c for t, c in sampler.seen.get(pid, []) if start - 1.5 <= t <= end + 1.5), "")
        k = kind(cmd, comm)
        totals[k] += cpu
        counts[k] += 1
    os.unlink(pacct)
    cpu = sum(totals.values())
    print(f"\n{wall:.0f} s wall, {cpu:.0f} s CPU in processes that exited ({cpu / max(wall, 1e-9):.2f} cores busy)")
    print(f"{'CPU s':>8} {'share':>6} {'processes':>9}  kind")
    for k, v in totals.most_common():
        print(f"{v:8.1f} {100 * v / max(cpu, 1e-9):5.1f}% {counts[k]:9d}  {k}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"wall_s": wall, "cpu_s": cpu, "kinds": {k: {"cpu_s": v, "processes": counts[k]}
                                                                 for k, v in totals.most_common()}}, fh, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
