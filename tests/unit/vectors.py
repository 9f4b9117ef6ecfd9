"""Locating and comparing the shared test vectors (../shared/scenarios)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def scenarios_dir() -> Path:
    """The shared vectors: ``$TRAINTRACE_SCENARIOS`` (or ``$TRAINTRACE_SCENARIOS_DIR``), else
    ``../shared/scenarios`` beside the checkout. Every test finds them here."""
    env = os.environ.get("TRAINTRACE_SCENARIOS") or os.environ.get("TRAINTRACE_SCENARIOS_DIR")
    return Path(env) if env else REPO.parent / "shared" / "scenarios"


def vector_names() -> list[str]:
    d = scenarios_dir()
    if not d.is_dir():
        raise RuntimeError(f"test vectors not found at {d}; set TRAINTRACE_SCENARIOS")
    return sorted(p.stem for p in d.glob("*.jsonl"))


def load_lines(name: str) -> list[dict[str, Any]]:
    with open(scenarios_dir() / f"{name}.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_expected(name: str) -> dict[str, Any]:
    with open(scenarios_dir() / f"{name}.expected.json", encoding="utf-8") as fh:
        return json.load(fh)


def mismatches(expected: Any, got: Any, path: str = "$") -> list[str]:
    """Every field of ``expected`` must be equal in ``got``; ``got`` may hold more keys.

    Lists must have the same length and match element by element (they are sorted).
    """
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [f"{path}: expected an object, got {got!r}"]
        out: list[str] = []
        for k, v in expected.items():
            if k not in got:
                out.append(f"{path}.{k}: missing")
            else:
                out.extend(mismatches(v, got[k], f"{path}.{k}"))
        return out
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return [f"{path}: expected {json.dumps(expected)}, got {json.dumps(got)}"]
        out = []
        for i, (a, b) in enumerate(zip(expected, got)):
            out.extend(mismatches(a, b, f"{path}[{i}]"))
        return out
    return [] if expected == got else [f"{path}: expected {expected!r}, got {got!r}"]


def comparable(output: dict[str, Any]) -> dict[str, Any]:
    """The vectors list only UNRECORDED_SHARING alerts; other kinds may be in the output."""
    out = dict(output)
    out["alerts"] = [a for a in output.get("alerts", []) if a.get("kind") == "UNRECORDED_SHARING"]
    return out
