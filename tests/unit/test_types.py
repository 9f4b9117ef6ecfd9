"""The type checker: ``mypy`` in strict mode over the pure packages (``streams/core``,
``streams/control``) with the ``[tool.mypy]`` settings of ``pyproject.toml`` passes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_mypy_passes():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (the dev extra has it)")
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml")],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"mypy exited {r.returncode}:\n{r.stdout}{r.stderr}"
