"""A real, independent C2SP witness on loopback: torchwood's ``litewitness`` (v0.6.1, built from
the Go module proxy into the cache), its key in a private ``ssh-agent`` as litewitness requires,
its database set up with ``witnessctl`` (``add-log``, ``add-key``)."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from streams.devtools.worker_process import free_port
from tests import go_verifier

VERSION = "v0.6.1"


def build() -> Path:
    """The directory holding ``litewitness`` and ``witnessctl``; RuntimeError with Go's output."""
    from streams.devtools.broker import cache_root

    bindir = cache_root() / "go" / f"torchwood-{VERSION}"
    if (bindir / "litewitness").is_file() and (bindir / "witnessctl").is_file():
        return bindir
    bindir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOBIN": str(bindir)}
    p = subprocess.run([go_verifier.go() or "go", "install", f"filippo.io/torchwood/cmd/litewitness@{VERSION}",
                        f"filippo.io/torchwood/cmd/witnessctl@{VERSION}"], env=env, capture_output=True, text=True,
                       timeout=900, cwd=tempfile.gettempdir())
    if p.returncode != 0:
        raise RuntimeError(f"go install of torchwood {VERSION} failed:\n{p.stdout}\n{p.stderr}")
    return bindir


def missing() -> str | None:
    """Why no litewitness can run here (None: it can)."""
    if go_verifier.go() is None:
        return "no Go toolchain"
    for tool in ("ssh-agent", "ssh-add", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"no {tool} (litewitness signs through an ssh-agent)"
    return None


class LiteWitness:
    """``with LiteWitness(bindir, name) as w:`` a running witness at ``w.url``; ``w.add_log(origin,
    vkey)`` trusts a log; ``w.vkey`` is its cosignature verifier key."""

    def __init__(self, bindir: Path, name: str) -> None:
        self.bindir, self.name = bindir, name
        self.dir = Path(tempfile.mkdtemp(prefix="lw-"))  # short: the agent's socket path is limited
        self.db = self.dir / "w.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._agent: subprocess.Popen | None = None
        self._proc: subprocess.Popen | None = None
        self.vkey = ""

    def __enter__(self) -> "LiteWitness":
        key = self.dir / "wkey"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "litewitness", "-f", str(key)],
                       check=True, capture_output=True, timeout=30)
        sock = self.dir / "s"
        self._agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        _wait(lambda: sock.exists(), 10, "ssh-agent's socket")
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", str(key)], env=env, check=True, capture_output=True, timeout=30)
        fp = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], check=True, capture_output=True, text=True,
                            timeout=30).stdout.split()[1]
        self.vkey = _cosignature_vkey(self.name, (key.parent / "wkey.pub").read_text())
        self._log = open(self.dir / "litewitness.log", "wb")
        self._proc = subprocess.Popen([str(self.bindir / "litewitness"), "-db", str(self.db), "-name", self.name,
                                       "-ssh-agent", str(sock), "-key", fp, "-listen", f"127.0.0.1:{self.port}"],
                                      stdout=self._log, stderr=subprocess.STDOUT)
        _wait(self._listening, 30, "litewitness to listen")
        return self

    def _listening(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(f"litewitness exited {self._proc.returncode}:\n{self.log()}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def log(self) -> str:
        return (self.dir / "litewitness.log").read_text(errors="replace")[-3000:]

    def ctl(self, *args: str) -> str:
        p = subprocess.run([str(self.bindir / "witnessctl"), *args, "-db", str(self.db)], capture_output=True,
                           text=True, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"witnessctl {' '.join(args)}: {p.stdout}{p.stderr}")
        return p.stdout

    def add_log(self, origin: str, log_vkey: str) -> None:
        self.ctl("add-log", "-origin", origin)
        self.ctl("add-key", "-origin", origin, "-key", log_vkey)

    def __exit__(self, *exc) -> None:
        for p in (self._proc, self._agent):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT if p is self._proc else signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _cosignature_vkey(name: str, ssh_pub: str) -> str:
    """The witness's cosignature/v1 verifier key from its OpenSSH public key line (the raw key
    is the last 32 bytes of the ``ssh-ed25519`` blob)."""
    from streams.signing.notes import COSIGNATURE_V1, NoteKey

    blob = base64.b64decode(ssh_pub.split()[1])
    return str(NoteKey(name, COSIGNATURE_V1, blob[-32:]))


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.1)
