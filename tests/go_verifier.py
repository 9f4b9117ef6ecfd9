"""The independent Go verifier of the transparency-log artefacts (``tests/go/tlogverify``): built
once from the Go module proxy (``golang.org/x/mod/sumdb/note``,
``github.com/transparency-dev/formats``, ``github.com/transparency-dev/merkle``) into the cache,
keyed by its sources, and run as an outside auditor would."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "go" / "tlogverify"


def go() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    local = Path("/usr/local/go/bin/go")
    return str(local) if local.is_file() else None


def build() -> Path:
    """The verifier's binary, built if its sources changed; raises ``RuntimeError`` with Go's
    output when the build fails."""
    digest = hashlib.sha256()
    for f in sorted(SOURCE.iterdir()):
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    from streams.devtools.broker import cache_root

    binary = cache_root() / "go" / f"tlogverify-{digest.hexdigest()[:16]}"
    if binary.is_file():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_suffix(f".tmp{os.getpid()}")
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    p = subprocess.run([go() or "go", "build", "-o", str(tmp), "."], cwd=SOURCE, env=env, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"go build of {SOURCE} failed:\n{p.stdout}\n{p.stderr}")
    tmp.replace(binary)
    return binary


def run(binary: Path, *args: str) -> tuple[int, str]:
    p = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60)
    return p.returncode, (p.stdout + p.stderr).strip()
