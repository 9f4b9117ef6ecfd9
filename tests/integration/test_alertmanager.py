"""The referee's alerts page through a real Alertmanager (issue 26): Debian's
``prometheus-alertmanager`` on loopback with a route to a webhook receiver in this process, a
real worker, and ``traintrace alerts`` (the forwarder) between them.

A writes ``A-2``; B merges it; A reports a divergence at step 1: the referee opens an incident
(``INCIDENT_OPENED``) and rolls both back. The receiver gets the incident's page — labels
``alertname=TraintraceIncident``, ``severity=critical``, the cohort and the incident id, the
action to take — and, once both jobs rolled back (their plans cleared), the page resolved. A
forwarder restarted afterwards posts everything again and pages nobody twice. The time from the
divergence report to the page is measured (printed)."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest

from tests.integration.monitoring import alertmanager as run_alertmanager

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus-alertmanager") is None,
                                 reason="Debian's prometheus-alertmanager is not installed")]

WAIT = 90.0


@pytest.fixture
def alertmanager(tmp_path):
    with run_alertmanager(tmp_path) as am:
        yield am


def test_an_incident_pages_through_alertmanager_and_resolves_when_its_plans_end(lineage_cohort, alertmanager, tmp_path):
    from streams.alerting.forwarder import Forwarder, http_post

    url, rx = alertmanager
    run = lineage_cohort()
    a = run.client("A", on_rollback=lambda cmd: None)
    b = run.client("B", on_rollback=lambda cmd: None)
    a.start()
    b.start()
    ck = tmp_path / "A-2.bin"
    ck.write_bytes(b"weights of A at step 2")
    a.progress(1, 0, 1.0)
    a.progress(2, 0, 1.0)
    a.checkpoint_written("A-2", ck, 2, 0)
    assert a.flush(30) == 0
    run.wait_status("A-2", "clean")
    b.progress(1, 0, 1.0)
    b.consumed("A-2", 1, "MERGE")
    assert b.flush(30) == 0

    stop = threading.Event()
    fw = Forwarder(run.bootstrap, run.topics, http_post(url), page_url="http://ui.example:6070", resend_s=5)
    t = threading.Thread(target=fw.run, kwargs={"stop": stop.is_set, "interval": 0.2}, daemon=True)
    t.start()
    try:
        reported = time.monotonic()
        a.diverged(1, "test", "loss spike")
        assert a.flush(30) == 0

        def incident(x):
            return x["labels"].get("alertname") == "TraintraceIncident" and x["status"] == "firing"

        deadline = time.monotonic() + WAIT
        while rx.first(incident) is None:
            assert time.monotonic() < deadline, ("no page", rx.got, fw.failures, fw.book.alerts)
            time.sleep(0.2)
        paged_s = rx.first(incident) - reported
        (page,) = {json.dumps(x["labels"], sort_keys=True): x for x in rx.alerts("firing") if incident(x)}.values()
        assert page["labels"]["severity"] == "critical" and page["labels"]["cohort"] == run.cohort
        assert page["labels"]["incident"] and page["labels"]["source"] == "traintrace"
        assert "traintrace plans" in page["annotations"]["action"] and page["annotations"]["url"]

        # both jobs roll back: their plans clear, the page resolves
        for c in (a, b):
            deadline = time.monotonic() + WAIT
            while not any(x.outcome == "rollback" for x in c.poll(timeout=0.5)):
                assert time.monotonic() < deadline, f"no rollback for {c.job_id}"
        run.settle()
        deadline = time.monotonic() + WAIT
        while not any(x["labels"].get("alertname") == "TraintraceIncident" for x in rx.alerts("resolved")):
            assert time.monotonic() < deadline, ("not resolved", fw.book.last_plan, fw.book.manifests)
            time.sleep(0.2)
    finally:
        stop.set()
        t.join(10)
    pages = len([x for x in rx.alerts("firing") if incident(x)])

    # a restarted forwarder re-posts everything: no new page
    again = Forwarder(run.bootstrap, run.topics, http_post(url), page_url="http://ui.example:6070")
    assert again.once() > 0 and again.failures == 0
    time.sleep(3)  # a group_interval and more
    assert len([x for x in rx.alerts("firing") if incident(x)]) == pages
    print(f"\nalertmanager: divergence reported -> page at the webhook in {paged_s:.2f} s")
