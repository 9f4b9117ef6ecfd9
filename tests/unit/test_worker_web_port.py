"""The worker's web port (its HTTP views and /metrics): a port another process holds, or an
address not of this machine, is one line before anything starts; and the test harness's
:class:`WorkerProcess` starts a worker again on another port when its port was taken between
the pick and the bind (the CI failure of 0793825: a Ray test's worker lost its port)."""

from __future__ import annotations

import socket
import sys
import textwrap

import pytest
from click.testing import CliRunner

from streams.cli.main import cli
from streams.devtools import broker as broker_module
from streams.devtools.worker_process import WorkerProcess


@pytest.fixture
def held_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _worker(*args: str):
    # --bootstrap 127.0.0.1:1: a broker that is not there; the check comes before any broker call
    return CliRunner().invoke(cli, ["worker", "--bootstrap", "127.0.0.1:1", "--store", "memory", *args])


def test_a_web_port_in_use_is_one_line(held_port, tmp_path):
    r = _worker("--web-port", str(held_port), "--data-dir", str(tmp_path))
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        f"error: --web-port {held_port}: 127.0.0.1:{held_port} is already in use (another worker on this "
        "machine?); give each worker its own --web-port (TRAINTRACE_WEB_PORT)"]


def test_a_web_port_in_use_from_the_environment_is_the_same_line(held_port, tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINTRACE_WEB_PORT", str(held_port))
    r = _worker("--data-dir", str(tmp_path))
    assert r.exit_code == 2 and f"--web-port {held_port}: " in r.stderr and len(r.stderr.splitlines()) == 1


def test_a_web_host_that_is_no_address_is_one_line(tmp_path):
    r = _worker("--web-host", "no-such-host.invalid", "--data-dir", str(tmp_path))
    assert r.exit_code == 2
    [line] = r.stderr.splitlines()
    assert line.startswith("error: --web-host no-such-host.invalid: ") and line.endswith("(TRAINTRACE_WEB_HOST)")


def test_picked_ports_are_free_and_outside_the_ephemeral_range(held_port):
    picked = {broker_module.pick_free_port(exclude={held_port}) for _ in range(50)}
    assert held_port not in picked
    assert all(p in broker_module.SERVER_PORTS for p in picked), "nothing holds the server range here"
    assert all(broker_module.port_is_free(p) for p in picked)
    assert len(picked) > 1, "a fixed sequence would collide across test processes"


def test_picking_falls_back_to_the_os_when_the_range_is_full(monkeypatch):
    monkeypatch.setattr(broker_module, "port_is_free", lambda port, host="": False)
    assert broker_module.pick_free_port() > 0


# a stand-in for ``traintrace worker``: the first run finds its web port taken (the line the
# real check prints) and exits 2; the next serves /health on the port it is given
FAKE_WORKER = textwrap.dedent('''
    import http.server, json, pathlib, sys
    port = int(sys.argv[sys.argv.index("--web-port") + 1])
    marker = pathlib.Path(sys.argv[sys.argv.index("--data-dir") + 1]) / "tried"
    if not marker.exists():
        marker.touch()
        print(f"error: --web-port {port}: 127.0.0.1:{port} is already in use (another worker on this machine?)")
        sys.exit(2)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"ok": True}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
''')


def _fake(tmp_path, script: str) -> WorkerProcess:
    path = tmp_path / "fake_worker.py"
    path.write_text(script)
    return WorkerProcess("127.0.0.1:1", "p.", "app", tmp_path / "w", command=[sys.executable, str(path)])


def test_a_worker_that_lost_its_web_port_is_started_again_on_another(tmp_path):
    w = _fake(tmp_path, FAKE_WORKER)
    first = w.web_port
    try:
        w.start().wait_ready(timeout=30)
        assert w.web_port != first
        assert w.get("/health") == {"ok": True}
    finally:
        w.kill()


def test_a_worker_that_exits_for_another_reason_is_not_restarted(tmp_path):
    w = _fake(tmp_path, "import sys; print('error: --signing-key k: no such file'); sys.exit(2)\n")
    first = w.web_port
    with pytest.raises(RuntimeError, match="worker exited with 2:\nerror: --signing-key k: no such file"):
        w.start().wait_ready(timeout=30)
    assert w.web_port == first


def test_a_worker_that_keeps_losing_its_port_fails_after_the_retries(tmp_path):
    always = ("import sys; port = sys.argv[sys.argv.index('--web-port') + 1]\n"
              "print(f'error: --web-port {port}: 127.0.0.1:{port} is already in use'); sys.exit(2)\n")
    w = _fake(tmp_path, always)
    with pytest.raises(RuntimeError, match="already in use"):
        w.start().wait_ready(timeout=30)
