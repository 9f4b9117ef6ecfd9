"""The package as a user installs it (issue 22): built into an sdist and a wheel, installed with
the ``worker`` extra into a fresh virtual environment outside the checkout, and run from there
(cwd outside the checkout, no PYTHONPATH) against the test broker.

- the sdist carries ``schemas/`` (every ``.avsc`` and golden file), ``setup.py``, ``MANIFEST.in``;
  the wheel built from it carries every ``schemas/v<N>/*.avsc`` (as ``streams/_schemas/``),
  ``py.typed``, the live page's static files and the OpenLineage facet schemas; its default
  requirements hold none of the processor's packages;
- from the venv: ``traintrace keygen``, a ``traintrace worker``, a job client script
  (``traintrace.JobClient``: start, progress, a checkpoint, finish; the gate then answers for it),
  ``traintrace publish`` of a shared vector, ``traintrace plans --json`` (the vector's plans),
  ``traintrace export`` + ``traintrace audit`` (every check passes, signatures included),
  ``traintrace analyze --json`` (the vector's expected output);
- with the processor's packages removed (what a default install lacks), ``traintrace worker``
  prints one line naming the extra and exits 2.

One venv, one ``pip install`` (pip may use its cache; the machine reaches PyPI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import uuid
import zipfile
from pathlib import Path

import pytest

from streams.kafka.topics import TopicNames
from streams.devtools.worker_process import WorkerProcess, wait_quiescent
from tests.integration.waits import until
from tests.unit.vectors import load_expected, mismatches, scenarios_dir

REPO = Path(__file__).resolve().parents[2]
VECTOR = "01_seed_example"
#: what only the processor needs: never a default requirement (distributions), never imported by
#: ``import traintrace`` (modules; nor rich, only the commands print with it)
PROCESSOR_DISTRIBUTIONS = ("faust-streaming", "aiokafka", "matplotlib", "numpy", "prometheus-client", "uvloop",
                           "rocksdict")
NOT_IMPORTED = ("faust", "aiokafka", "matplotlib", "numpy", "prometheus_client", "uvloop", "rocksdict", "rich")
#: what the build reads (the layout is setup.py's; schemas/ stays at the top level)
SOURCE = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "streams", "traintrace", "schemas")


def _clean_env() -> dict[str, str]:
    """The environment of a shell outside the checkout: no PYTHONPATH, no active venv, no
    traintrace settings of this session (topics, schemas, keys come from flags)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "KAFKA_BOOTSTRAP_SERVERS")
           and not k.startswith("TRAINTRACE_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(cmd: list[str], cwd: Path, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=_clean_env(), capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {r.returncode}\n"
                             f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}")
    return r


def _copy_source(dest: Path) -> Path:
    """The files the build reads, copied (the checkout keeps no build/ of this test)."""
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in SOURCE:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory):
    """(venv, wheel, sdist, src, outside): sdist and wheel built from ``src``, a copy of the
    source, the wheel installed with the worker extra into a fresh venv; ``outside``: a working
    directory outside the checkout."""
    base = tmp_path_factory.mktemp("wheel-install")
    assert REPO not in base.resolve().parents, f"{base} must be outside the checkout"
    src = _copy_source(base / "src")
    dist = base / "dist"
    # the sdist through setuptools' PEP 517 hook, then pip builds the wheel from it (as `python -m build`)
    _run([sys.executable, "-c", f"import setuptools.build_meta as b; b.build_sdist({str(dist)!r})"], cwd=src)
    (sdist,) = dist.glob("traintrace-*.tar.gz")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=base)
    pip = [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "--quiet", "--no-deps", "-w", dist, sdist], cwd=base)
    (wheel,) = dist.glob("traintrace-*.whl")
    _run([*pip, "install", "--quiet", f"{wheel}[worker]"], cwd=base)
    outside = base / "run"
    outside.mkdir()
    return venv, wheel, sdist, src, outside


def test_the_sdist_and_the_wheel_carry_the_run_time_files(installed):
    _venv, wheel, sdist, src, _outside = installed
    schemas = {p.relative_to(src / "schemas").as_posix() for p in (src / "schemas").glob("v*/*.avsc")}
    assert len({s.split("/")[0] for s in schemas}) >= 7, schemas  # v1 ... the current version
    with tarfile.open(sdist) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {f"schemas/{a}" for a in schemas} <= in_sdist
    assert {p.relative_to(src).as_posix() for p in (src / "schemas").glob("v*/golden.jsonl")} <= in_sdist
    assert {"setup.py", "MANIFEST.in", "pyproject.toml", "streams/py.typed"} <= in_sdist

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    avsc = {n.removeprefix("streams/_schemas/") for n in names if n.endswith(".avsc")}
    assert avsc == schemas, "every schemas/v<N>/*.avsc, under streams/_schemas/"
    assert all(n.startswith("streams/_schemas/") for n in names if n.endswith(".avsc"))
    assert "streams/py.typed" in names
    static = {f"streams/ui/static/{p.name}" for p in (src / "streams/ui/static").iterdir() if p.is_file()}
    facets = {f"streams/openlineage/facets/{p.name}" for p in (src / "streams/openlineage/facets").glob("*.json")}
    assert static and static <= names
    assert facets and facets <= names
    sources = {p.relative_to(src).as_posix() for d in ("streams", "traintrace") for p in (src / d).rglob("*.py")}
    assert sources <= names, sorted(sources - names)[:10]
    assert not [n for n in names if n.startswith(("tests/", "schemas/", "build/")) or "__pycache__" in n]
    # what `pip install traintrace` brings: none of the processor's packages
    default = {re.split(r"[\s\[<>=!~;(]", line.split(":", 1)[1].strip(), maxsplit=1)[0].lower().replace("_", "-")
               for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert "confluent-kafka" in default and "fastavro" in default, default
    assert not default & set(PROCESSOR_DISTRIBUTIONS), default
    print(f"\nwheel {wheel.name}: {len(names)} files: {len(avsc)} .avsc, "
          f"{sum(n.endswith('.py') for n in names)} .py, {len(static)} static, {len(facets)} facet schemas, "
          f"py.typed, {sum('.dist-info/' in n for n in names)} dist-info")


JOB_SCRIPT = textwrap.dedent('''
    """A training job's side, as a user writes it: the public name only."""
    import json, sys, time
    from pathlib import Path

    import traintrace
    from traintrace import JobClient, TopicNames, checkpoint_status

    bootstrap, prefix, worker_url, keys, work = sys.argv[1:6]
    work = Path(work)
    client = JobClient("wheel-job", "wheel-cohort", "tiny-model", journal_dir=work / "journal",
                       bootstrap=bootstrap, topics=TopicNames.from_env(prefix), worker_url=worker_url,
                       trusted_keys=keys)
    client.start()
    for step in range(1, 11):
        client.progress(step, 0, 2.0 / step)
    ckpt = work / "wheel-job-10.bin"
    ckpt.write_bytes(b"tiny weights at step 10" * 256)
    client.checkpoint_written("wheel-job-10", ckpt, 10, 0)
    client.finished("SUCCEEDED", final_checkpoint_id="wheel-job-10")
    undelivered = client.close(timeout=60)
    status = {"status": "unknown"}
    deadline = time.monotonic() + 90
    while status["status"] == "unknown" and time.monotonic() < deadline:
        status = checkpoint_status(worker_url, "wheel-job-10")
        time.sleep(0.3)
    from streams.codec.schemas import default_schema_set
    print(json.dumps({
        "traintrace": traintrace.__file__, "version": traintrace.__version__,
        "schema": str(default_schema_set().reader("LineageEvent").path),
        "undelivered": undelivered, "gate": status,
        "imported": sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[6].split(","))),
    }))
''')


def test_from_the_installed_wheel_a_job_a_worker_and_the_commands(installed, kafka_bootstrap):
    venv, _wheel, _sdist, _src, outside = installed
    tt = venv / "bin" / "traintrace"
    py = venv / "bin" / "python"
    prefix = f"whl{uuid.uuid4().hex[:8]}."
    topics = TopicNames.from_env(prefix)
    app_id = f"tt-{prefix.rstrip('.')}"
    kafka = ["--bootstrap", kafka_bootstrap, "--topic-prefix", prefix]

    keys = outside / "keys"
    _run([tt, "keygen", "--out", keys], cwd=outside)
    worker = WorkerProcess(kafka_bootstrap, prefix, app_id, outside / "worker", 2,
                           extra_args=["--commit-interval", "0.2", "--grace-seconds", "3", "--commitment-interval", "1",
                                       "--loglevel", "warn", "--signing-key", str(keys / "processor.key")],
                           env={"PYTHONPATH": ""}, command=[str(tt)], cwd=outside)
    worker.start()  # the default store: RocksDB, from the worker extra
    try:
        worker.wait_ready()
        url = f"http://127.0.0.1:{worker.web_port}"

        # a job client, from the installed package
        script = outside / "job.py"
        script.write_text(JOB_SCRIPT)
        job = json.loads(_run([py, script, kafka_bootstrap, prefix, url, keys, outside / "job", ",".join(NOT_IMPORTED)],
                              cwd=outside, timeout=300).stdout.strip().splitlines()[-1])
        site = venv.resolve()
        assert site in Path(job["traintrace"]).resolve().parents, job
        schema = Path(job["schema"]).resolve()  # read from the installed package, not from a checkout
        assert site in schema.parents and schema.parent.parent.name == "_schemas", job
        assert job["undelivered"] == 0
        assert job["gate"]["status"] == "clean", job["gate"]
        assert job["imported"] == [], "import traintrace must not import the processor's packages (or rich)"

        # the vector through publish -> the worker -> plans
        vector = scenarios_dir() / f"{VECTOR}.jsonl"
        expected = load_expected(VECTOR)
        published = json.loads(_run([tt, "publish", vector, *kafka, "--json"], cwd=outside).stdout)
        assert published["produced"] == sum(1 for line in vector.open() if line.strip())
        wait_quiescent(kafka_bootstrap, app_id, topics)

        last: dict = {}

        def plans_in_force():  # `traintrace plans --json` until it shows the vector's plans
            last.update(json.loads(_run([tt, "plans", "--json", *kafka], cwd=outside).stdout))
            return not mismatches(expected["plans"], last["plans"]) and not mismatches(expected["halts"], last["halts"])

        try:
            until(plans_in_force, interval=1.0, what="the vector's plans on lineage.control")
        except TimeoutError:
            pytest.fail(f"plans --json: {mismatches(expected['plans'], last.get('plans'))}\n{worker.log_tail()}")
        wait_quiescent(kafka_bootstrap, app_id, topics)

        # export + audit, from the venv, the processor's signatures checked
        archive = outside / "log.avro"
        _run([tt, "export", "-o", archive, *kafka, "--json"], cwd=outside)
        audit = _run([tt, "audit", archive, "--trusted-keys", keys, "--json"], cwd=outside, check=False)
        assert audit.returncode == 0, audit.stdout[-4000:] + audit.stderr[-2000:]
        report = json.loads(audit.stdout)
        assert report["passed"] is True
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()

    # analyze, offline, from the venv: the exact output of the vector
    analyzed = json.loads(_run([tt, "analyze", scenarios_dir() / f"{VECTOR}.jsonl", "--json"], cwd=outside).stdout)
    assert mismatches(load_expected(VECTOR), analyzed) == []


def test_without_the_processor_packages_the_worker_says_which_extra(installed):
    """Last (module order): it removes the worker extra's packages from the venv, leaving what a
    default install has (and matplotlib's, which do not matter here)."""
    venv, _wheel, _sdist, _src, outside = installed
    _run([venv / "bin" / "python", "-m", "pip", "uninstall", "--quiet", "--yes",
          "faust-streaming", "aiokafka", "prometheus-client"], cwd=outside)
    r = _run([venv / "bin" / "traintrace", "worker", "--bootstrap", "127.0.0.1:1"], cwd=outside, check=False)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        "error: traintrace worker needs the processor's packages (not installed: faust, aiokafka, "
        "prometheus_client): pip install 'traintrace[worker]'"], r.stderr
    assert _run([venv / "bin" / "traintrace", "worker", "--help"], cwd=outside).stdout.startswith("Usage:")
