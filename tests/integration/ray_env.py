"""The environment the Ray tests run Ray in, set before ``ray`` is imported (``test_ray.py`` in the
test process, ``ray_example_driver.py`` in its own): the classic Tune output, logs not
deduplicated, and no workers prestarted for the first driver (two a cluster, which the trials'
actors never used here: 22 of 62 Ray workers of a suite run stayed idle, ~5 s of CPU each); and
:func:`init`, ``ray.init`` with its agents' ports chosen up front, so that a loaded machine cannot
make the raylet abort at startup (below).

Why the ports. Ray 2.60's raylet, started by ``ray.init``, waits for its Python agents (the
dashboard agent, the runtime-env agent) to write their ports to files, and aborts after a fixed
15 s (``NodeManager::WaitForDashboardAgentPorts``: "Check failed ... Timed out waiting for file
.../dashboard_agent_listen_port"). On two cores loaded by the rest of the suite (the fault tests'
brokers, the churn tests' workers) the agents' imports can take longer than that. The driver then
waits 30 s more for a raylet that is already gone and fails with "The current node timed out
during startup" (two CI runs lost a Ray test to it; 14 busy processes on this machine reproduce it
every time, and retrying ``ray.init`` under the same load fails again). Ray reads no setting for
that wait, but it skips it for every port it is given: ``ray.init`` passes four of them to the
raylet when set on its parameters, and the dashboard agent's listen port reaches the raylet only
through its ``--dashboard_agent_listen_port`` flag, which ``ray.init`` does not pass. So
:func:`init` picks free ports and passes them, under the same load: started in 24 s, a task run.
The example itself is not touched: only how the cluster it runs on is started."""

from __future__ import annotations

import os
import subprocess

RAY_ENV = {"RAY_AIR_NEW_OUTPUT": "0", "RAY_DEDUP_LOGS": "0", "RAY_prestart_worker_first_driver": "0",
           # the driver's own wait for the raylet to register (30 s by default): a loaded machine
           # can take longer even when nothing aborts (and a raylet that did abort costs this much)
           "RAY_raylet_start_wait_time_s": "60"}

# the head's parameters the raylet would otherwise wait for as files, and its flag for the last
_AGENT_PORTS = ("metrics_agent_port", "metrics_export_port", "runtime_env_agent_port",
                "dashboard_agent_listen_port")
_LISTEN_FLAG = "--dashboard_agent_listen_port"


def apply() -> None:
    for k, v in RAY_ENV.items():
        os.environ.setdefault(k, v)


def _raylet_takes(flag: str) -> bool:
    """Whether this Ray's raylet has ``flag`` (its gflags ``--helpfull`` lists it): an unknown
    flag would stop the raylet from starting at all."""
    import ray._private.services as services

    try:
        p = subprocess.run([services.RAYLET_EXECUTABLE, "--helpfull"], capture_output=True, text=True,
                           timeout=30)
    except (AttributeError, OSError, subprocess.SubprocessError):
        return False
    return f"-{flag.lstrip('-')} " in p.stdout + p.stderr


def _give_agent_ports() -> bool:
    """Make every local cluster this process starts get its agents' ports up front. Returns
    False, changing nothing, where this Ray has not the parts it changes (another version)."""
    import ray._private.node as node
    import ray._private.services as services

    if getattr(node.Node, "_traintrace_ports", False):
        return True
    if not hasattr(services, "start_ray_process"):
        return False
    node_init = node.Node.__init__
    start_process = services.start_ray_process
    listen: list[int] = []
    flag = _raylet_takes(_LISTEN_FLAG)

    def init_node(self, ray_params, *args, head: bool = False, **kwargs):  # type: ignore[no-untyped-def]
        if head and all(hasattr(ray_params, name) for name in _AGENT_PORTS):
            from streams.devtools.broker import pick_free_port  # outside the ephemeral range

            taken: set[int] = set()
            for name in _AGENT_PORTS:
                port = pick_free_port(exclude=taken)
                taken.add(port)
                setattr(ray_params, name, port)
            listen[:] = [ray_params.dashboard_agent_listen_port]
        node_init(self, ray_params, *args, head=head, **kwargs)

    def start(command, process_type, *args, **kwargs):  # type: ignore[no-untyped-def]
        if flag and process_type == "raylet" and listen and not any(c.startswith(_LISTEN_FLAG) for c in command):
            command = [*command, f"{_LISTEN_FLAG}={listen[0]}"]
        return start_process(command, process_type, *args, **kwargs)

    node.Node.__init__ = init_node  # type: ignore[method-assign]
    node.Node._traintrace_ports = True  # type: ignore[attr-defined]
    services.start_ray_process = start
    return True


def init(**kwargs: object) -> None:
    """``ray.init(**kwargs)`` starting a local cluster whose agents' ports are given (above), tried
    three times still: an abort for another reason should not cost the test on its first try."""
    import ray

    _give_agent_ports()
    for attempt in range(3):
        try:
            ray.init(**kwargs)
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for it
            if "timed out during startup" not in str(exc) or attempt == 2:
                raise
            ray.shutdown()
