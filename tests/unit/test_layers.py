"""The package layering of ``streams/`` (docs/architecture.md, "Layout"): a package imports only packages of
its own rank or below, never one above it, and the pure packages import no I/O library.

Checked on the source (every ``import``/``from ... import`` anywhere in a module, also inside
functions), so a lazy import cannot hide an upward dependency."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

STREAMS = Path(__file__).resolve().parents[2] / "streams"

#: rank of each top-level package (or module) of ``streams``: lower ranks never import higher ones
RANKS: dict[str, int] = {
    "errors": 0,
    "core": 1,          # the lineage fold: events in, decisions out
    "records": 1,       # the published records, typed (frozen dataclasses)
    "codec": 2,         # Avro contract
    "control": 2,       # the fold of lineage.control
    "referee": 2,       # decisions -> records, Kafka-free
    "files": 2,         # JSON Lines, archives, atomic writes
    "signing": 3,       # Ed25519 keys and commitment signatures
    "options": 3,       # settings declared once: flag, variable, type, bounds, default, help
    "kafka": 3,         # every Kafka client, from one settings object; topics; ACLs
    "worker": 4,        # the Faust worker
    "audit": 4,         # the log an auditor reads, the audit, proofs, export, as-of
    "operator_commands": 4,  # the human operators: publish, plans, release, alerts
    "alerting": 4,      # the referee's alerts to an Alertmanager: mapping, book (pure), the forwarder
    "client": 4,        # the job client
    "witness": 4,       # the C2SP tlog-witness client: checkpoints cosigned by independent witnesses
    "integrations": 5,  # the job client inside PyTorch, HF Trainer, Lightning, Ray Tune
    "report": 5,        # the incident report (HTML/SVG/PNG)
    "demo": 5,          # the numpy demo, the smoke test, the worked example
    "devtools": 5,      # the laptop's and the tests': local broker and cluster, a worker subprocess
    "openlineage": 5,   # OpenLineage RunEvents out: mapping, facets, the client's transports, the follower
    "testing": 6,       # generators and invariants for tests and benchmarks
    "ui": 5,            # the live lineage page: a follower of the topics, served over HTTP
    "cli": 7,           # entry points
    "__main__": 8,
    "__init__": 8,
}

#: packages that must stay pure: no Kafka, Faust, Avro or other I/O library
PURE = {"core", "control", "referee", "records"}
IO_LIBS = {"confluent_kafka", "faust", "aiokafka", "fastavro", "mode", "socket", "requests", "urllib"}


@functools.lru_cache(maxsize=1)
def _parsed() -> tuple[tuple[str, Path, tuple[tuple[str, int, tuple[str, ...]], ...]], ...]:
    """Every module of ``streams`` as (package, path, its imports), parsed once for all the tests
    of this file (a parse and a walk of every module took about 5 s a test)."""
    out = []
    for path in sorted(STREAMS.rglob("*.py")):
        rel = path.relative_to(STREAMS)
        top = rel.parts[0].removesuffix(".py")
        tree = ast.parse(path.read_text(), str(path))
        imports = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imports.append((node.module, node.lineno, tuple(a.name for a in node.names)))
            elif isinstance(node, ast.Import):
                imports.extend((a.name, node.lineno, ()) for a in node.names)
        out.append((top, rel, tuple(imports)))
    return tuple(out)


def test_every_package_has_a_rank():
    tops = {top for top, _rel, _tree in _parsed()}
    assert tops <= set(RANKS), f"rank these packages in RANKS: {sorted(tops - set(RANKS))}"


def test_no_package_imports_one_above_it():
    bad = []
    for top, rel, imports in _parsed():
        for module, line, names in imports:
            parts = module.split(".")
            if parts[0] != "streams":
                continue
            targets = [parts[1]] if len(parts) > 1 else names
            for target in targets:
                if target in RANKS and target != top and RANKS[target] > RANKS[top]:
                    bad.append(f"streams/{rel}:{line} ({top}, rank {RANKS[top]}) imports "
                               f"streams.{target} (rank {RANKS[target]})")
    assert not bad, "\n".join(bad)


def test_no_cycles_between_packages():
    edges: dict[str, set[str]] = {}
    for top, _rel, imports in _parsed():
        for module, _line, names in imports:
            parts = module.split(".")
            if parts[0] == "streams":
                for target in ([parts[1]] if len(parts) > 1 else names):
                    if target in RANKS and target != top:
                        edges.setdefault(top, set()).add(target)
    seen: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        if seen.get(node) == 1:
            pytest.fail("package import cycle: " + " -> ".join(stack[stack.index(node):] + [node]))
        if seen.get(node) == 2:
            return
        seen[node] = 1
        for nxt in sorted(edges.get(node, ())):
            visit(nxt, stack + [node])
        seen[node] = 2

    for node in sorted(edges):
        visit(node, [])


@pytest.mark.parametrize("package", sorted(PURE))
def test_pure_packages_import_no_io(package):
    bad = []
    for top, rel, imports in _parsed():
        if top != package:
            continue
        for module, line, _names in imports:
            if module.split(".")[0] in IO_LIBS:
                bad.append(f"streams/{rel}:{line} imports {module}")
    assert not bad, "\n".join(bad)


#: who may import the development tooling (``streams/devtools``): the command line, the demo,
#: the test and benchmark helpers, and itself; never the worker, the client, the audit...
DEVTOOLS_USERS = {"devtools", "cli", "demo", "testing"}


def test_dev_tooling_is_imported_only_by_the_cli_the_demo_and_the_tests():
    bad = []
    for top, rel, imports in _parsed():
        if top in DEVTOOLS_USERS:
            continue
        for module, line, names in imports:
            parts = module.split(".")
            if parts[:2] == ["streams", "devtools"] or (parts == ["streams"] and "devtools" in names):
                bad.append(f"streams/{rel}:{line} ({top}) imports {module}")
    assert not bad, "\n".join(bad)
