"""What the Helm chart's pods would run, run here (issue 26): the container command and the
environment ``helm template`` renders for the workers, the forwarder and the live page, with
the pod's paths mapped to temporary ones, against the real broker — each starts and answers
(the worker's and the page's ``/health``, the forwarder reads the topics through). No
Kubernetes here: this checks the chart's half of the contract with the commands."""

from __future__ import annotations

import json
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

from tests.unit.test_helm import CHART, helm, helm_binary  # noqa: F401 - a fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("helm_binary")]


def pods(*sets: str) -> dict[str, dict]:
    args = [helm(), "template", "tt", str(CHART)]
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


def test_the_charts_route_and_fold_pods_route_and_fold(kafka_bootstrap, tmp_path):
    """worker.routeReplicas: the route pod and the fold pod, each as the chart runs it (one web port
    per pod there; two here, on one host), fold what a job writes."""
    from streams.codec import Codec
    from streams.devtools.worker_process import free_port, produce_events
    from streams.testing.cohort import generate_cohorts

    prefix = f"helms{uuid.uuid4().hex[:6]}."
    web = free_port()
    spec = pods(f"kafka.bootstrap={kafka_bootstrap}", f"topicPrefix={prefix}", f"appId=tt-{prefix.rstrip('.')}",
                "partitions=2", "worker.replicas=1", "worker.routeReplicas=1", f"worker.webPort={web}",
                "worker.store=memory")
    assert {"worker", "worker-route"} <= set(spec)
    procs, ports = [], {"worker": web, "worker-route": free_port()}
    try:
        for component in ("worker-route", "worker"):
            c = spec[component]
            env = environment(c, {"/data": str(tmp_path / component)})
            env["TRAINTRACE_WEB_PORT"] = str(ports[component])  # a pod's own address in Kubernetes
            log = tmp_path / f"{component}.log"
            p = subprocess.Popen([sys.executable, "-m", "streams", *c["args"][1:]], env=env, stdout=log.open("w"),
                                 stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
            procs.append((p, log))
            wait_health(f"http://127.0.0.1:{ports[component]}", p, log)
        events = list(generate_cohorts(jobs=4, cohort_size=4, steps=100, seed=5))
        produce_events(kafka_bootstrap, f"{prefix}lineage.events", events, Codec())
        deadline = time.monotonic() + 90
        folded = 0.0
        while time.monotonic() < deadline and folded < len(events):
            time.sleep(0.5)
            with urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=5) as r:
                folded = sum(float(ln.rsplit(" ", 1)[1]) for ln in r.read().decode().splitlines()
                             if ln.startswith("traintrace_events_folded_total"))
        assert folded == len(events), (folded, len(events), procs[1][1].read_text()[-2000:])
        for component in ("worker-route", "worker"):
            with urllib.request.urlopen(f"http://127.0.0.1:{ports[component]}/health", timeout=5) as r:
                owned = json.loads(r.read())["partitions"]
            assert owned == ({"events": [0, 1], "by_cohort": []} if component == "worker-route"
                             else {"events": [], "by_cohort": [0, 1]}), (component, owned)
    finally:
        for p, _log in procs:
            p.terminate()
        for p, _log in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
