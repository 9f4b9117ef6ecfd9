"""Real monitoring servers for the alerting tests (issue 26): Debian's Alertmanager and
Prometheus on loopback, and a webhook receiver in the test process that records every
notification Alertmanager posts (with when it arrived)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import yaml

from streams.devtools.worker_process import free_port

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "traintrace-rules.yml"


class Receiver:
    """A webhook receiver: every notification Alertmanager posts, with when it came."""

    def __init__(self) -> None:
        self.got: list[tuple[float, dict]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.got.append((time.monotonic(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, status: str | None = None) -> list[dict]:
        return [a for _t, n in self.got for a in n["alerts"] if status is None or a["status"] == status]

    def first(self, pred: Callable[[dict], bool]) -> float | None:
        for t, n in self.got:
            if any(pred(a) for a in n["alerts"]):
                return t
        return None

    def wait(self, pred: Callable[[dict], bool], timeout: float, what: str = "") -> float:
        """When the first notification holding an alert ``pred`` accepts arrived (waits for it)."""
        deadline = time.monotonic() + timeout
        while (t := self.first(pred)) is None:
            assert time.monotonic() < deadline, (f"no {what or 'such alert'} at the webhook", self.got[-5:])
            time.sleep(0.1)
        return t


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=1).read()
            return
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@contextmanager
def alertmanager(tmp_path: Path) -> Iterator[tuple[str, Receiver]]:
    """Alertmanager routing every alert to a :class:`Receiver` at once (group_wait 0 s, by
    alertname, cohort, incident, job, instance), resolved ones too: ``(url, receiver)``."""
    rx = Receiver()
    port = free_port()
    cfg = tmp_path / "am.yml"
    cfg.write_text(f"""
route:
  receiver: hook
  group_by: [alertname, cohort, incident, job, instance]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 4h
receivers:
  - name: hook
    webhook_configs:
      - url: http://127.0.0.1:{rx.port}/alerts
        send_resolved: true
""")
    log = tmp_path / "am.log"
    # Debian's Alertmanager ships no web UI; TRAINTRACE_ALERTMANAGER_UI names one (for the docs'
    # screenshot: the upstream module's compiled assets, see docs/alerting.md)
    ui = os.environ.get("TRAINTRACE_ALERTMANAGER_UI")
    proc = subprocess.Popen(["prometheus-alertmanager", f"--config.file={cfg}", f"--storage.path={tmp_path / 'am'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                             *([f"--web.ui-path={ui}"] if ui else [])],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, log)
        yield url, rx
    finally:
        _stop(proc)


def fast_rules(for_: str = "2s") -> dict[str, Any]:
    """The shipped rules with each ``for:`` shortened to ``for_`` (a test cannot wait a minute
    for a worker to count as down); every expression, label and annotation as shipped."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = for_
    return rules


@contextmanager
def prometheus(tmp_path: Path, targets: list[str], alertmanager_url: str,
               rules: dict[str, Any] | None = None) -> Iterator[str]:
    """Prometheus scraping ``targets`` (host:port of workers' /metrics) as job="traintrace"
    every second, evaluating ``rules`` (default :func:`fast_rules`) every second, alerting
    ``alertmanager_url``: its base URL."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules or fast_rules()))
    am = alertmanager_url.split("://", 1)[1]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
        "rule_files": [str(tmp_path / "rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am]}]}]},
        "scrape_configs": [{"job_name": "traintrace", "static_configs": [{"targets": targets}]}],
    }))
    port = free_port()
    log = tmp_path / "prometheus.log"
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--rules.alert.resend-delay=1s"],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc, log)
        yield url
    finally:
        _stop(proc)


def screenshot(url: str, path: Path, wait_ms: int = 4000) -> bool:
    """A PNG of ``url`` in Debian's headless Chromium; False when there is none."""
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return False
    p = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1400,900", f"--virtual-time-budget={wait_ms}", f"--screenshot={path}", url],
                       capture_output=True, timeout=90)
    return p.returncode == 0 and path.exists()
