"""Shared pytest configuration for traintrace.

No fixtures a test asks for: unit tests (``tests/unit``) need nothing, and the Kafka fixtures
(``kafka_bootstrap``, ``kafka_admin``, ``topic_factory``, ``pipeline``, ``group_id``,
``group_factory``) live in ``tests/integration/conftest.py``, which also marks every test there
``integration`` (deselect them with ``-m "not integration"``).

One autouse fixture: every test starts with the session's Kafka and traintrace settings. Two
hooks: the longest test files run first (``scripts/test`` runs the suite on several processes,
a file at a time each, in collection order: a long file collected last would run alone at the
end); and a unit run (``-m "not integration"``) does not import ``tests/integration`` and
``tests/faults`` at all (their conftests mark every test there ``integration``, so none would be
selected, and importing them costs each test process the training frameworks' imports).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent
#: where every test is marked ``integration`` (by the directory's own conftest)
_INTEGRATION_DIRS = frozenset({_TESTS / "integration", _TESTS / "faults"})


def excludes_integration(markexpr: str) -> bool:
    """Whether ``-m markexpr`` deselects every ``integration`` test: a conjunction (no ``or``, no
    parentheses) of which ``not integration`` is a term."""
    terms = " ".join(markexpr.split()).split(" and ")
    return "not integration" in terms and not any(" or " in t or "(" in t for t in terms)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip the integration and fault directories in a unit run: importing their modules (PyTorch,
    Ray, transformers, Lightning at module level) took each test process several seconds of CPU
    for tests that ``-m "not integration"`` then deselected, every one."""
    if collection_path in _INTEGRATION_DIRS and excludes_integration(config.getoption("markexpr") or ""):
        return True
    return None

#: the settings every traintrace command reads from the environment
_SETTINGS_PREFIXES = ("KAFKA_", "TRAINTRACE_")


def _settings_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k.startswith(_SETTINGS_PREFIXES)}


@pytest.fixture(autouse=True)
def _no_settings_leak(request: pytest.FixtureRequest):
    """Each test starts with the session's Kafka and traintrace settings: one that changes them
    (a library, an import-time default) has them put back and is named in a warning. Several
    test files share one process (all of them, or with ``TRAINTRACE_TEST_PROCESSES`` a share
    each), so a leaked setting would reach whichever file that process runs next."""
    import os
    import warnings

    before = _settings_env()
    yield
    after = _settings_env()
    if after != before:
        changed = sorted(set(before.items()) ^ set(after.items()))
        for k in after.keys() - before.keys():
            del os.environ[k]
        os.environ.update(before)
        warnings.warn(f"{request.node.nodeid} left the environment changed: {sorted({k for k, _ in changed})}",
                      stacklevel=1)


#: the files that take a quarter of a minute or more in a full run (measured, durations summed on
#: three processes sharing two cores), longest first. The Ray files are one unit of work
#: (:data:`SHARED_SCOPES`), first: ~8 minutes of one process while faults and churn run.
LONGEST_FIRST = (
    "tests/integration/test_ray_examples.py",  # with test_ray.py: 400-550 s
    "tests/integration/test_ray.py",
    "tests/integration/test_ray_env.py",  # 20 s
    "tests/faults/test_faults.py",  # 420-475 s
    "tests/integration/test_churn.py",  # 270 s
    "tests/integration/test_demo.py",  # 145 s
    "tests/integration/test_client.py",
    "tests/integration/test_wheel_install.py",
    "tests/integration/test_snapshots.py",
    "tests/integration/test_demo_secure.py",
    "tests/integration/test_cluster.py",
    "tests/integration/test_audit.py",
    "tests/integration/test_pipeline.py",
    "tests/integration/test_prometheus_alerts.py",
    "tests/integration/test_operators.py",
    "tests/integration/test_lightning_rotation.py",
    "tests/integration/test_hf_rotation.py",
    "tests/integration/test_torch.py",
    "tests/integration/test_secure_pipeline.py",
    "tests/integration/test_secure.py",
    "tests/integration/test_broker.py",
    "tests/integration/test_ui.py",
    "tests/integration/test_secure_refusals.py",
    # then the unit files of over 2 s (a unit run on two processes: about 58 s of tests each,
    # the tail is the last file's)
    "tests/unit/test_report.py",  # 12 s
    "tests/unit/test_retention_live.py",
    "tests/unit/test_retention.py",
    "tests/unit/test_properties.py",
    "tests/unit/test_audit.py",
    "tests/unit/test_codec.py",
    "tests/unit/test_record_writer.py",
    "tests/unit/test_public_api.py",
    "tests/unit/test_snapshot_property.py",
    "tests/unit/test_training.py",
    "tests/unit/test_openlineage.py",
    "tests/unit/test_schema_evolution.py",
    "tests/unit/test_event_reader.py",
    "tests/unit/test_memory.py",
    "tests/unit/test_analyze_parallel.py",
    "tests/unit/test_audit_witnesses.py",
    "tests/unit/test_worker_liveness.py",
)


#: test files that ``--dist loadfile`` hands out as one unit, to one process, one after the other:
#: the Ray tests take a lock (one Ray cluster on the machine at a time), so two processes given
#: one file each had one of them wait on the lock, idle, for the other's minutes (289 s seen)
SHARED_SCOPES = {
    "tests/integration/test_ray_examples.py": "ray",
    "tests/integration/test_ray.py": "ray",
    "tests/integration/test_ray_env.py": "ray",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201 - xdist's types
    """``--dist loadfile`` with the files of :data:`SHARED_SCOPES` as one unit each."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedScopes(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return SHARED_SCOPES.get(scope, scope)

    return SharedScopes(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """Keep the order above on several processes: pytest-xdist (3.7 on) hands out the files of
    ``--dist loadfile`` most-tests-first unless told not to, which ran the many-test unit files
    first and left the few-test, minutes-long integration files (Ray's examples, the faults) to
    the end, on one process each while the others had finished (a fresh-clone run: 17 minutes)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def key(item: pytest.Item) -> int:
        try:
            rel = item.path.relative_to(root).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(rel, len(rank))

    items.sort(key=key)  # stable: the other files (and every test within a file) keep their order


def _cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process, and of its children that have ended (the
    workers, jobs and commands a test starts and waits for; not the session's broker)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201 - pytest's
    """With ``TRAINTRACE_TEST_TIMELINE=<file>``: one JSON line a test (the pytest process, the test,
    its start and end in wall-clock seconds, the CPU seconds it took in the pytest process and in
    the child processes that ended meanwhile) appended to that file, to see how a parallel run's
    files share its processes, where each process waited at the end, and what costs CPU."""
    import os
    import time

    path = os.environ.get("TRAINTRACE_TEST_TIMELINE")
    start, cpu = time.time(), (_cpu() if path else (0.0, 0.0))
    try:
        return (yield)
    finally:
        if path:
            import json

            own, children = (round(b - a, 3) for a, b in zip(cpu, _cpu()))
            line = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid,
                    "start": round(start, 3), "end": round(time.time(), 3), "cpu": own, "cpu_children": children}
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
