"""Processes the tooling starts end with the process that started them
(:mod:`streams.devtools.lifetime`): a test process that crashed left its ``traintrace worker``
running for 20 minutes (issue 27's thirty-first round)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from streams.devtools.lifetime import die_with_parent

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _parent_then_kill(script: str, tmp_path: Path) -> int:
    """Run ``script`` in a parent process until it prints its child's pid, kill the parent with
    SIGKILL (no cleanup of any kind) and return the child's pid."""
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE,
                              cwd=Path(__file__).resolve().parents[2], text=True)
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        assert line.strip().isdigit(), f"the parent printed {line!r}"
        child = int(line)
        assert _alive(child)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    return child


def test_a_child_started_from_the_main_thread_ends_with_its_parent(tmp_path):
    child = _parent_then_kill("""
        import subprocess, sys, time
        from streams.devtools.lifetime import die_with_parent
        p = subprocess.Popen(["sleep", "600"], start_new_session=True, preexec_fn=die_with_parent())
        print(p.pid, flush=True)
        time.sleep(600)
        """, tmp_path)
    assert _wait_gone(child), "the child outlived its parent"


def test_a_child_of_another_thread_is_not_tied_unless_asked():
    # the kernel's "parent" is the forking thread: tying a child to a thread that ends would stop it
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.extend([die_with_parent(), die_with_parent(any_thread=True)]))
    t.start()
    t.join()
    assert seen[0] is None and callable(seen[1])
    assert callable(die_with_parent())
