"""The documentation (issue 24): the README fits on a few screens and opens with the two commands
a fresh machine needs; every link of it resolves in the checkout; ``docs/`` builds as a site
with ``mkdocs build --strict`` (a broken link or anchor, or a page missing from the nav, fails)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_is_short_and_opens_with_the_two_commands():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move detail to docs/"
    first_block = text.split("```bash", 1)[1].split("```", 1)[0]
    assert [ln.split()[0] for ln in first_block.strip().splitlines()] == ["scripts/demo", "scripts/test"]
    for script in ("scripts/demo", "scripts/test"):
        assert (REPO / script).is_file()


def test_every_link_of_the_readme_resolves():
    missing = [m.group(1) for m in LINK.finditer(README.read_text())
               if not m.group(1).startswith(("http://", "https://")) and not (REPO / m.group(1)).exists()]
    assert not missing, missing


def test_every_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert [p for p in pages if p not in nav] == []


def test_the_docs_build_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stdout + r.stderr  # (--quiet would hide them)
    assert (tmp_path / "site" / "index.html").is_file()
