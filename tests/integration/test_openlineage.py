"""``traintrace openlineage --once --transport http`` against a real pipeline (issue 16's first
"done when"): the seed vector goes through real workers, then the follower posts its events to a
local HTTP endpoint that records them (a stand-in for Marquez, which needs Docker and
PostgreSQL), and what it received validates and tells the story."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from streams.cli.main import cli
from streams.operator_commands.publish import publish_file
from streams.openlineage.mapping import run_id
from streams.devtools.worker_process import wait_quiescent
from tests.unit.test_openlineage import SPEC, assert_valid
from tests.unit.vectors import scenarios_dir

pytestmark = pytest.mark.integration

SEED = scenarios_dir() / "01_seed_example.jsonl"


@pytest.fixture
def lineage_endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(base URL, events received): POST /api/v1/lineage records the JSON body and answers 201."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/api/v1/lineage":
                self.send_response(404)
            else:
                received.append(json.loads(body))
                self.send_response(201)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def test_openlineage_once_posts_the_story_over_http(pipeline, kafka_bootstrap, lineage_endpoint):
    topics, app_id, _workers = pipeline(workers=1, partitions=2)
    publish_file(str(SEED), kafka_bootstrap, topics)
    wait_quiescent(kafka_bootstrap, app_id, topics)
    time.sleep(5)  # the unresolved-source grace period (4 s) runs on the processor's clock
    wait_quiescent(kafka_bootstrap, app_id, topics)

    url, received = lineage_endpoint
    prefix = topics.events[: -len("lineage.events")]
    result = CliRunner().invoke(cli, ["openlineage", "--once", "--transport", "http", "--url", url, "--json",
                                      "--bootstrap", kafka_bootstrap, "--topic-prefix", prefix],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    counts = json.loads(result.output.strip().splitlines()[-1])
    assert counts["emitted"] == len(received) > 0 and counts["skipped"] == 0

    assert_valid(received, spec=SPEC is not None)
    a = [e for e in received if e["run"]["runId"] == run_id("traintrace", "A", 0)]
    b = [e for e in received if e["run"]["runId"] == run_id("traintrace", "B", 0)]
    assert a[0]["eventType"] == "START" and a[0]["job"]["name"] == "A"
    # the diverged job's run: the referee's divergence
    divergence = [e["run"]["facets"]["traintrace_divergence"] for e in a if "traintrace_divergence" in e["run"]["facets"]]
    assert divergence and divergence[-1]["onsetStep"] == 500 and divergence[-1]["source"] == "REFEREE"
    # the contaminated job's run: its incident, its rollback plan, and what it consumed
    incidents = [e["run"]["facets"]["traintrace_incidents"]["incidents"] for e in b
                 if "traintrace_incidents" in e["run"]["facets"]][-1]
    assert [(i["role"], i["viaCheckpointId"]) for i in incidents] == [("CONTAMINATED", "A-520")]
    plan = [e["run"]["facets"]["traintrace_plan"] for e in b if "traintrace_plan" in e["run"]["facets"]][-1]
    assert (plan["action"], plan["targetCheckpointId"], plan["targetStep"]) == ("ROLLBACK", "B-500", 500)
    hashes = {json.loads(line)["checkpoint_id"]: json.loads(line)["content_hash"]
              for line in SEED.read_text().splitlines() if '"CheckpointWritten"' in line}
    inputs = [(d["namespace"], d["name"], d["inputFacets"]["traintrace_consumption"]["mode"],
               d["facets"]["version"]["datasetVersion"]) for e in b for d in e["inputs"]]
    assert inputs == [("s3://ckpts", "A-480", "MERGE", hashes["A-480"]),
                      ("s3://ckpts", "A-520", "REFERENCE", hashes["A-520"])]
    outputs = {d["name"] for e in b for d in e["outputs"]}
    assert {"B-500", "B-540", "B-560"} <= outputs
    tainted = {d["name"] for e in received for d in e["outputs"]
               if d["facets"].get("traintrace_taint", {}).get("status") == "TAINTED"}
    assert tainted == {"A-500", "A-520", "B-540", "B-560"}
