"""The fault suite's fixtures: one three-node cluster for the whole session, every broker back
after every case, and the table of recovery times at the end.

The cluster (:class:`streams.devtools.cluster.LocalCluster`, combined KRaft nodes) is started here
whatever ``KAFKA_BOOTSTRAP_SERVERS`` says: the cases kill, pause and restart its nodes. Its JVMs
die with this process (``die_with_parent``); the parent of a node is the *thread* that launched
it, so nodes are only ever (re)started from the test's main thread. Without Java 17+ (or, on the
very first run, Maven) the suite is skipped with the reason.

Every test collected under ``tests/faults`` is marked ``faults`` (and ``integration``). After the session the recovery
times of the cases (``tests.faults.harness``) are printed as a table and, when
``TRAINTRACE_FAULTS_REPORT`` names a file, written there as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.devtools.broker import BrokerError, JavaMissing, MavenMissing
from streams.devtools.cluster import LocalCluster
from tests.faults.harness import RESULTS, Case

_HERE = Path(__file__).resolve().parent
COLUMNS = ("case", "fault", "events", "routed_s", "recovery_s", "produce_blocked_s", "produce_wait_before_s",
           "quiescent_after_feed_s", "case_s")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items, so only touch the ones under this directory.
    # ``integration`` too: they need Kafka, so ``-m "not integration"`` (the unit run) skips
    # them; ``-m "not faults"`` leaves them out of an integration run.
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A running three-node cluster of its own, stopped after the fault suite's module."""
    cluster = LocalCluster(tmp_path_factory.mktemp("faults-cluster"), 3, die_with_parent=True)
    try:
        cluster.start(timeout=float(os.environ.get("TRAINTRACE_BROKER_TIMEOUT", "120")))
    except (JavaMissing, MavenMissing) as exc:
        pytest.skip(f"no Kafka cluster for the fault suite: {exc}")
    except BrokerError as exc:
        pytest.fail(f"could not start the fault suite's cluster: {exc}\n{exc.detail or ''}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop(timeout=30)


def _every_broker_back(cluster: LocalCluster, timeout: float = 90.0) -> None:
    """Resume a paused node, start a stopped one, wait until the metadata lists every node."""
    for node in cluster.nodes:
        pid = node.pid
        if pid is not None:
            os.kill(pid, signal.SIGCONT)  # harmless unless it was paused
        else:
            cluster.start_node(node.node_id, timeout=timeout)
    admin = cluster._settings(cluster.bootstrap).admin()
    deadline = time.monotonic() + timeout
    while len(admin.list_topics(timeout=10).brokers) < len(cluster.nodes):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster did not list its {len(cluster.nodes)} nodes after {timeout:.0f}s")
        time.sleep(0.5)


@pytest.fixture
def case(fault_cluster: LocalCluster, tmp_path: Path) -> Iterator:
    """``make(name, **sizes) -> Case`` (tests.faults.harness); after the test its workers are
    killed and every broker runs again, pass or fail."""
    made: list[Case] = []

    def make(name: str, **kwargs) -> Case:
        c = Case(fault_cluster, tmp_path, name, **kwargs)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.kill_workers()
            if c.watch.is_alive():
                c.watch.stop()
        _every_broker_back(fault_cluster)


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not RESULTS:
        return
    rows = [[_cell(r.get(c)) for c in COLUMNS] for r in RESULTS]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(COLUMNS)]
    terminalreporter.write_sep("=", "fault suite: recovery times (seconds; see tests/faults/harness.py)")
    terminalreporter.write_line("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)))
    for row in rows:
        terminalreporter.write_line("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    extra = [r for r in RESULTS if set(r) - set(COLUMNS)]
    for r in extra:
        terminalreporter.write_line(f"  {r['case']}: " + ", ".join(
            f"{k}={_cell(v)}" for k, v in r.items() if k not in COLUMNS))
    path = os.environ.get("TRAINTRACE_FAULTS_REPORT", "").strip()
    if path:
        Path(path).write_text(json.dumps(RESULTS, indent=2) + "\n", encoding="utf-8")
        terminalreporter.write_line(f"written to {path}")
