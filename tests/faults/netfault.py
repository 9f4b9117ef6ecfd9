"""A network-level stall of one broker on loopback: every packet to or from its ports dropped.

The cluster's nodes all listen on 127.0.0.1, each on its own client and controller port, so a
stall of one node is a ``tc`` filter on ``lo`` sending the packets of those ports to a class
that drops them all: connections stay established and silent (no reset, no refusal), the
process runs on — a switch dropping a host's traffic, or a stalled VM's network, as the clients,
the other brokers and the controller quorum see it. Removing the qdisc lets TCP's retransmits
through again.

How: an ``htb`` root qdisc whose default class passes everything at 10 Gbit/s, a second class
whose leaf is a ``tbf`` with a 10-byte burst (a packet larger than the burst is dropped), and
``u32`` filters matching the ports (source and destination) into it. Neither ``nft`` nor
``iptables`` is installed on these machines, and their kernels have neither ``netem`` nor the
``prio`` qdisc nor the ``gact`` drop action; ``htb``, ``tbf`` and ``u32`` they have. Needs
iproute2's ``tc`` and CAP_NET_ADMIN (root, as the CI machines run): :func:`available` tries it
in a network namespace of its own first and says why not, and the case skips.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from typing import Iterator, Sequence

DEV = "lo"


def _tc(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", *args], capture_output=True, text=True, check=check, timeout=10)


def _commands(ports: Sequence[int]) -> list[list[str]]:
    cmds = [["qdisc", "add", "dev", DEV, "root", "handle", "1:", "htb", "default", "1", "r2q", "100000"],
            ["class", "add", "dev", DEV, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit"],
            ["class", "add", "dev", DEV, "parent", "1:", "classid", "1:2", "htb", "rate", "8bit", "ceil", "8bit"],
            ["qdisc", "add", "dev", DEV, "parent", "1:2", "handle", "20:", "tbf", "rate", "8bit", "burst", "10",
             "limit", "1"]]
    for port in ports:
        for direction in ("sport", "dport"):
            cmds.append(["filter", "add", "dev", DEV, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                         "match", "ip", direction, str(port), "0xffff", "flowid", "1:2"])
    return cmds


_PROBE = """
import socket, subprocess, sys
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
for cmd in CMDS:
    r = subprocess.run(["tc", *cmd], capture_output=True, text=True)
    if r.returncode:
        sys.exit("tc " + " ".join(cmd) + ": " + (r.stderr.strip() or r.stdout.strip()))
s = socket.socket(); s.bind(("127.0.0.1", 7777)); s.listen()
c = socket.socket(); c.settimeout(1.5)
try:
    c.connect(("127.0.0.1", 7777))
except OSError:
    sys.exit(0)
sys.exit("the filter did not drop the port's packets")
"""


def available() -> str | None:
    """None when a blackhole can be made here (tried in a network namespace of its own), else why not."""
    import sys

    for tool in ("tc", "unshare", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    shown = _tc("qdisc", "show", "dev", DEV, check=False)
    if shown.returncode != 0 or "htb 1:" in shown.stdout:
        return f"{DEV} has a qdisc of ours already, or tc cannot read it: {shown.stdout.strip()} {shown.stderr.strip()}"
    code = _PROBE.replace("CMDS", repr(_commands([7777])))
    r = subprocess.run(["unshare", "-n", sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
    return None


@contextlib.contextmanager
def blackhole(ports: Sequence[int]) -> Iterator[None]:
    """Drop every packet from or to ``ports`` on loopback while in the block."""
    try:
        for cmd in _commands(ports):
            _tc(*cmd)
        yield
    finally:
        _tc("qdisc", "del", "dev", DEV, "root", check=False)
