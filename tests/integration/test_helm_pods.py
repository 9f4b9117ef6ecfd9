"""What the Helm chart's pods would run, run here (issue 26): the container command and the
environment ``helm template`` renders for the workers, the forwarder and the live page, with
the pod's paths mapped to temporary ones, against the real broker — each starts and answers
(the worker's and the page's ``/health``, the forwarder reads the topics through). No
Kubernetes here: this checks the chart's half of the contract with the commands."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.unit.test_helm import CHART, HELM

pytestmark = [pytest.mark.integration, pytest.mark.skipif(HELM is None, reason="helm is not built")]


def pods(*sets: str) -> dict[str, dict]:
    args = [HELM, "template", "tt", str(CHART)]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"]["spec"]["containers"][0]
            for d in yaml.safe_load_all(out) if d and d["kind"] in ("StatefulSet", "Deployment")}


def environment(container: dict, paths: dict[str, str]) -> dict[str, str]:
    """The pod's environment, its paths replaced, over this process's (without its Kafka or
    traintrace settings: the pod has only what the chart gives it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "TRAINTRACE_"))}
    for e in container["env"]:
        value = e["value"]
        for pod_path, here in paths.items():
            value = value.replace(pod_path, here)
        env[e["name"]] = value
    return env


def wait_health(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                return {"status": r.status}
        except OSError:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)


def test_the_charts_pods_start_with_what_it_gives_them(kafka_bootstrap, tmp_path):
    from streams.cli.main import cli
    from streams.devtools.worker_process import free_port

    keys = tmp_path / "keys"
    assert CliRunner().invoke(cli, ["keygen", "--out", str(keys)]).exit_code == 0
    prefix = f"helm{uuid.uuid4().hex[:6]}."
    web, ui = free_port(), free_port()
    spec = pods(f"kafka.bootstrap={kafka_bootstrap}", f"topicPrefix={prefix}", f"appId=tt-{prefix.rstrip('.')}",
                "partitions=2", "worker.replicas=1", f"worker.webPort={web}", f"ui.port={ui}",
                "signingKey.existingSecret=processor-key", "alerts.alertmanagerUrl=http://127.0.0.1:9",
                "worker.store=memory")
    assert set(spec) == {"worker", "alerts", "ui"}
    paths = {"/data": str(tmp_path / "data"), "/etc/traintrace/signing": str(keys)}
    procs = []
    try:
        for component, port in (("worker", web), ("ui", ui)):
            c = spec[component]
            log = tmp_path / f"{component}.log"
            assert c["args"][0] == "traintrace"
            p = subprocess.Popen([sys.executable, "-m", "streams", *c["args"][1:]], env=environment(c, paths),
                                 stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
            procs.append(p)
            wait_health(f"http://127.0.0.1:{port}", p, log)
        # the forwarder: through the topics once (its Alertmanager is away: it says so, it does not crash)
        c = spec["alerts"]
        r = subprocess.run([sys.executable, "-m", "streams", *c["args"][1:], "--once"], env=environment(c, paths),
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert "Traceback" not in r.stderr, r.stderr
        assert r.returncode == 0 and "alert(s) posted to http://127.0.0.1:9" in r.stdout + r.stderr, r.stdout + r.stderr
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
