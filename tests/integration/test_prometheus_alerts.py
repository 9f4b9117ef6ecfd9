"""The whole alerting path against the real servers (issue 26): a real worker, Debian's
Prometheus scraping its /metrics with the shipped rules, Debian's Alertmanager, the forwarder
(``traintrace alerts``) and a webhook receiver.

- **Incident pages, measured.** Twenty divergences, one after another, each contaminating a
  merger: the time from each divergence report to its incident page at the webhook (p50 / p99
  / max, printed).
- **A halt pages.** A job consumes a checkpoint nobody recorded: after the grace period the
  referee halts it, and the page names the job and the command that releases it.
- **A killed worker pages and resolves.** ``kill -9`` of the worker: the shipped
  ``TraintraceWorkerDown`` fires through Prometheus and reaches the webhook; the worker
  restarted, it resolves. No other rule fires during the run.
- **No query on a metric that is not there.** Every metric the shipped dashboard's panels and
  the shipped rules query is one Prometheus scraped from the worker.

The only change to the shipped rules: each ``for:`` is 2 s instead of minutes."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.integration.monitoring import REPO, RULES, alertmanager, prometheus, screenshot

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus-alertmanager") is None or shutil.which("prometheus") is None,
                                 reason="Debian's prometheus and prometheus-alertmanager are not installed")]

WAIT = 90.0
INCIDENTS = 20
#: labelled by the error met: its first series appears with the first failure (its rule's
#: increase() is then over an absent series: no alert, rightly)
FIRST_FAILURE = {"traintrace_timer_rounds_failed_total"}


def queried_metrics() -> set[str]:
    """The metric names the shipped dashboard's panels and the shipped rules query."""
    dash = json.loads((REPO / "deploy" / "grafana" / "traintrace-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets") or ()]
    exprs += [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    names = {m for e in exprs for m in re.findall(r"\b(traintrace_[a-z_]+|up)\b(?=\{|\[|\)|\s)", e)}
    return {n[:-len("_bucket")] + "_bucket" if n.endswith("_bucket") else n for n in names}


def incident_page(x: dict) -> bool:
    return x["labels"].get("alertname") == "TraintraceIncident" and x["status"] == "firing"


def test_pages_for_incidents_a_halt_and_a_killed_worker_through_prometheus_and_alertmanager(lineage_cohort, tmp_path):
    from streams.alerting.forwarder import Forwarder, http_post

    run = lineage_cohort()
    pairs = []
    for i in range(INCIDENTS):
        a = run.client(f"A{i}", on_rollback=lambda cmd: None)
        b = run.client(f"B{i}", on_rollback=lambda cmd: None)
        a.start()
        b.start()
        ck = tmp_path / f"A{i}-2.bin"
        ck.write_bytes(f"weights of A{i}".encode())
        a.progress(1, 0, 1.0)
        a.progress(2, 0, 1.0)
        a.checkpoint_written(f"A{i}-2", ck, 2, 0)
        pairs.append((a, b))
    for a, _b in pairs:
        assert a.flush(30) == 0
    for i, (_a, b) in enumerate(pairs):
        run.wait_status(f"A{i}-2", "clean")
        b.progress(1, 0, 1.0)
        b.consumed(f"A{i}-2", 1, "MERGE")
        assert b.flush(30) == 0

    with alertmanager(tmp_path) as (am_url, rx), \
            prometheus(tmp_path, [f"127.0.0.1:{run.worker.web_port}"], am_url) as prom_url:
        stop = threading.Event()
        fw = Forwarder(run.bootstrap, run.topics, http_post(am_url), page_url="http://ui.example:6070", resend_s=5)
        t = threading.Thread(target=fw.run, kwargs={"stop": stop.is_set, "interval": 0.1}, daemon=True)
        t.start()
        try:
            # incidents, one at a time: divergence report -> its page at the webhook
            latencies = []
            for a, _b in pairs:
                seen = {x["labels"]["incident"] for x in rx.alerts("firing") if incident_page(x)}
                reported = time.monotonic()
                a.diverged(1, "test", "loss spike")
                assert a.flush(30) == 0
                paged = rx.wait(lambda x, seen=seen: incident_page(x) and x["labels"]["incident"] not in seen,
                                WAIT, "incident page")
                latencies.append(paged - reported)
            pages = {x["labels"]["incident"]: x for x in rx.alerts("firing") if incident_page(x)}
            assert len(pages) == INCIDENTS
            assert all(p["labels"]["cohort"] == run.cohort and p["labels"]["severity"] == "critical"
                       for p in pages.values())

            # a halt: a consumption of a checkpoint nobody wrote, past the grace period
            ghost = run.client("G", worker_url=None)
            ghost.start()
            ghost.progress(1, 0, 1.0)
            ghost.consumed("nobody-wrote-this", 1, "MERGE")
            assert ghost.flush(30) == 0
            rx.wait(lambda x: x["labels"].get("alertname") == "TraintraceHalt" and x["labels"].get("job") == "G"
                    and x["status"] == "firing", WAIT, "halt page")
            (halt,) = [x for x in rx.alerts("firing") if x["labels"].get("alertname") == "TraintraceHalt"][:1]
            assert halt["labels"]["severity"] == "critical" and "traintrace release G" in halt["annotations"]["action"]

            # kill -9 the worker: Prometheus' TraintraceWorkerDown pages, then resolves after a restart
            run.worker.kill()
            killed = time.monotonic()

            def worker_down(status):
                return lambda x: x["labels"].get("alertname") == "TraintraceWorkerDown" and x["status"] == status

            fired = rx.wait(worker_down("firing"), WAIT, "TraintraceWorkerDown")
            down = next(x for x in rx.alerts("firing") if worker_down("firing")(x))
            assert down["labels"]["severity"] == "critical" and down["labels"]["instance"].endswith(
                f":{run.worker.web_port}")
            assert down["annotations"]["runbook"].startswith("docs/alerting.md#")
            shots = os.environ.get("TRAINTRACE_SCREENSHOTS")
            if shots:  # what the on-call engineer sees (the docs' screenshots; see docs/alerting.md)
                screenshot(f"{am_url}/#/alerts", Path(shots) / "alertmanager-pages.png")
                screenshot(f'{am_url}/#/alerts?filter=%7Balertname!%3D%22TraintraceIncident%22%7D',
                           Path(shots) / "alertmanager-halt-and-worker-down.png")
            run.worker.start()
            run.worker.wait_ready()
            resolved = rx.wait(worker_down("resolved"), WAIT, "TraintraceWorkerDown resolved")
        finally:
            stop.set()
            t.join(10)
            # every metric the dashboard and the rules query is one Prometheus scraped from the worker
            with urllib.request.urlopen(f"{prom_url}/api/v1/label/__name__/values", timeout=10) as r:
                scraped = set(json.load(r)["data"])
            assert queried_metrics() - FIRST_FAILURE <= scraped, queried_metrics() - FIRST_FAILURE - scraped
        from_prometheus = {x["labels"]["alertname"] for x in rx.alerts("firing") if "instance" in x["labels"]}
        assert from_prometheus == {"TraintraceWorkerDown"}, from_prometheus
    lat = sorted(latencies)
    p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
    print(f"\nalerting: divergence -> incident page at the webhook over {len(lat)} incidents: "
          f"p50 {statistics.median(lat):.2f} s, p99 {p99:.2f} s, max {lat[-1]:.2f} s; "
          f"kill -9 -> WorkerDown page {fired - killed:.1f} s (for: 2s, scrape 1s), "
          f"restart -> resolved {resolved - fired:.1f} s")
