"""The linter (issue 24): ``ruff check`` over ``streams/``, ``tests/`` and ``bench/`` with the
rules of ``pyproject.toml`` (pyflakes and pycodestyle's statement errors) passes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_ruff_passes():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (the dev extra has it)")
    r = subprocess.run([ruff, "check", "--config", str(REPO / "pyproject.toml"), "--output-format", "concise",
                        "streams", "tests", "bench"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
