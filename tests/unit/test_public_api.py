"""The public import name (issue 15): ``import traintrace`` gives the job client and its errors
without importing any training framework; each integration module imports only its own."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_traintrace_is_light():
    mods = _modules_after("import traintrace; import traintrace.integrations")
    assert not {"torch", "transformers", "pytorch_lightning", "ray"} & mods


def test_the_public_names():
    import traintrace

    for name in traintrace.__all__:
        assert getattr(traintrace, name) is not None, name
    assert issubclass(traintrace.GateRefused, traintrace.TraintraceError)
    assert issubclass(traintrace.IntegrationError, traintrace.TraintraceError)


def test_the_torch_integration_imports_no_other_framework():
    import importlib.util

    import pytest

    if importlib.util.find_spec("torch") is None:  # not imported here: the subprocess does
        pytest.skip("torch is not installed")
    mods = _modules_after("import traintrace.integrations.torch")
    assert "torch" in mods and not {"transformers", "pytorch_lightning", "ray"} & mods


def test_import_traintrace_imports_none_of_the_processor_packages():
    """A training environment installs only the job side (issue 22): importing the public name
    (and the job client's whole surface) must not need Faust, the report's drawing, /metrics or
    the commands' tables, even where they are installed."""
    mods = _modules_after("import traintrace; from traintrace import JobClient; import traintrace.integrations")
    processor = {"faust", "mode", "aiokafka", "matplotlib", "numpy", "prometheus_client", "uvloop", "rocksdict",
                 "rich", "click"}
    assert not processor & {m.split(".")[0] for m in mods}
