"""How the Ray tests start Ray (``ray_env.init``) holds when Ray's own agents start slowly, as on a
machine loaded by the rest of the suite: Ray 2.60's raylet gives its dashboard agent a fixed 15 s
to write its ports and then aborts, which failed two CI runs ("The current node timed out during
startup"). Here the dashboard agent is made to sleep 20 s before it starts (a ``sitecustomize``
on its path: no load on the machine, the same slow agent every time); the cluster must start and
run a task. With a plain ``ray.init`` the same start fails (checked by hand when written: the
raylet's "Timed out waiting for file .../dashboard_agent_listen_port")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

from tests.integration.frameworks import exclusive  # noqa: E402

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

SLOW_AGENT = """import os, sys, time
if sys.argv and sys.argv[0].endswith(os.path.join("dashboard", "agent.py")):
    time.sleep(20)
"""

START = """import sys
from tests.integration import ray_env
ray_env.apply()
ray_env.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
import ray

@ray.remote
def one():
    return 1

print("task:", ray.get(one.remote(), timeout=240))
ray.shutdown()
"""


def test_a_local_cluster_starts_when_its_dashboard_agent_is_slower_than_the_raylets_wait(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_AGENT)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]),
           "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    with exclusive("ray"):
        p = subprocess.run([sys.executable, "-c", START], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=600)
    assert p.returncode == 0 and "task: 1" in p.stdout, p.stdout[-3000:] + p.stderr[-6000:]
