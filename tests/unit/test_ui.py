"""The live page's fold, drawing and HTTP routes, fed with a simulated pipeline's records (no Kafka)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from streams.codec import Codec
from streams.referee.input import fold_batch
from streams.records import Alert
from streams.referee.referee import Referee
from streams.testing.simulate import simulate_pipeline
from streams.ui.drawing import Drawings
from streams.ui.server import _Handler, _Server, static_file
from streams.ui.state import UIState
from tests.unit.vectors import scenarios_dir

SCENARIO = Path(scenarios_dir()) / "08_rollback_incarnations.jsonl"


@pytest.fixture(scope="module")
def log():
    return simulate_pipeline(str(SCENARIO))


def fed(log, with_alert: bool = True) -> UIState:
    state = UIState()
    for rec in log.topic("input"):
        state.add_input(rec)
    for rec in log.topic("control"):
        state.add_control(rec)
    if with_alert:
        state.add_alert(Alert(alert_id="a1", kind="INCIDENT_OPENED", job_id="A", message="hello", ts=1))
    return state


def test_the_view_is_the_workers_fold(log) -> None:
    state = fed(log)
    view = state.view()
    # the same records through the worker's referee directly
    referee, codec = Referee(), Codec()
    for rec in log.topic("input"):
        fold_batch(codec, referee, rec.value, rec.partition, rec.offset, rec.timestamp, False)
    want = [x for lin in referee.engines.values() for x in lin.incidents.values()]
    assert [x["incident_id"] for x in view["incidents"]] == sorted(x["incident_id"] for x in want)
    assert view["incidents"][0]["root"]["job_id"] == "A"
    assert {j["job_id"]: j["state"] for j in view["jobs"]}["A"] == "rolled back"
    assert [c["cohort_id"] for c in view["cohorts"]] == ["c1"]
    assert {t["checkpoint_id"] for t in view["tainted"]} == {"A-520", "B-560", "C-600-i1"}
    plans = view["plans"]
    assert [p["job_id"] for p in plans] == ["A", "B", "A", "C"]
    assert [p["in_force"] for p in plans] == [False, True, False, True]
    assert view["alerts"][0]["kind"] == "INCIDENT_OPENED" and view["records"]["alerts"] == 1
    json.dumps(view)  # what the server sends


def test_a_plan_is_acknowledged_by_its_rolled_back(log) -> None:
    state = fed(log, with_alert=False)
    cid = state.view()["plans"][1]["command_id"]
    lin = state.referee.engines["c1"]
    lin.state.acknowledged[cid] = ("B", 42)  # what folding a RolledBack with that command_id records
    plan = state.view()["plans"][1]
    assert plan["acknowledged"] and plan["acknowledged_by_seq"] == 42


def test_checkpoint_answers_like_the_worker(log) -> None:
    state = fed(log)
    tainted = state.checkpoint("B-560")
    assert tainted["status"] == "tainted" and tainted["incident_ids"] and tainted["job_id"] == "B"
    assert state.checkpoint("B-510")["status"] == "clean"
    assert state.checkpoint("nope") == {"checkpoint_id": "nope", "status": "unknown"}


def test_undecodable_records_are_counted_not_fatal(log) -> None:
    state = UIState()
    bad = log.topic("input")[0]
    state.add_input(type(bad)("input", 0, 0, 0, None, b"junk"))
    state.add_control(type(bad)("control", 0, 0, 0, None, b"junk"))
    assert state.view()["records"]["undecodable"] == 2


def wait_for(cond, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_the_drawing_is_the_reports_and_is_cached(log) -> None:
    state = fed(log)
    drawings = Drawings(state)
    try:
        first = drawings.get("c1")
        assert first["svg"] is None and first["stale"]
        done = wait_for(lambda: (d := drawings.get("c1"))["svg"] and not d["stale"] and d)
        assert done["svg"].startswith("<svg") and done["error"] is None
        assert drawings.get("c1")["svg"] is done["svg"]  # no change, no redraw
        state.add_control(log.topic("control")[0])
        assert drawings.get("c1")["stale"]
    finally:
        drawings.stop()


class _FakeUI:
    def __init__(self, state: UIState) -> None:
        from streams.kafka.topics import TopicNames

        self.state = state
        self.drawings = Drawings(state)
        self.topics = TopicNames()


def test_routes(log) -> None:
    import threading

    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.ui = _FakeUI(fed(log))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"

    def get(path: str):
        with urllib.request.urlopen(base + path, timeout=10) as r:
            return r.headers.get("Content-Type"), r.read()

    try:
        ctype, body = get("/")
        assert ctype.startswith("text/html") and b'data-testid="incidents"' in body
        assert get("/static/app.js")[1] == static_file("app.js")
        assert json.loads(get("/api/state")[1])["incidents"][0]["root"]["job_id"] == "A"
        assert json.loads(get("/checkpoints/A-520")[1])["status"] == "tainted"
        assert json.loads(get("/api/lineage/c1")[1])["cohort_id"] == "c1"
        with pytest.raises(urllib.error.HTTPError) as err:
            get("/static/../../errors.py")
        assert err.value.code == 404
    finally:
        httpd.ui.drawings.stop()
        httpd.shutdown()
        httpd.server_close()


def test_the_page_loads_nothing_from_elsewhere() -> None:
    for name in ("index.html", "app.js", "app.css"):
        text = static_file(name).decode()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, name


def test_ui_help() -> None:
    from click.testing import CliRunner

    from streams.cli.ui import ui

    out = CliRunner().invoke(ui, ["--help"])
    assert out.exit_code == 0 and "--port" in out.output and "TRAINTRACE_UI_PORT" in out.output
