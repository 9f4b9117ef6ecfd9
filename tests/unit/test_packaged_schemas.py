"""Where the Avro schemas are read from (issue 22): ``$TRAINTRACE_SCHEMAS_DIR``, else the copy
installed with the package (``streams._schemas``, read through importlib.resources), else the
top-level ``schemas/`` of the source tree. The wheel itself is built, installed and run outside
the checkout by tests/integration/test_wheel_install.py."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from streams.codec import schemas as schemas_module
from streams.codec.schemas import SchemaSet, default_schema_set, default_schemas_dir

REPO = Path(__file__).resolve().parents[2]


def test_in_the_source_tree_the_top_level_schemas_are_read(monkeypatch):
    monkeypatch.delenv("TRAINTRACE_SCHEMAS_DIR", raising=False)
    root = default_schemas_dir()
    assert Path(str(root)).resolve() == (REPO / "schemas").resolve()
    assert default_schema_set().current_version == max(int(p.name[1:]) for p in (REPO / "schemas").glob("v*"))


def test_the_environment_overrides(monkeypatch, tmp_path):
    shutil.copytree(REPO / "schemas" / "v1", tmp_path / "v1")
    monkeypatch.setenv("TRAINTRACE_SCHEMAS_DIR", str(tmp_path))
    assert default_schemas_dir() == tmp_path
    assert default_schema_set().versions == (1,)


def test_an_installed_copy_is_read_through_importlib_resources(monkeypatch, tmp_path):
    """A package laid out as the wheel lays it out (``<pkg>/_schemas/v<N>/*.avsc``, no
    ``__init__.py``): found by its import name, read as a traversable, the same schema set."""
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for vdir in (REPO / "schemas").glob("v*"):
        (pkg / "_schemas" / vdir.name).mkdir(parents=True)
        for avsc in vdir.glob("*.avsc"):
            shutil.copy2(avsc, pkg / "_schemas" / vdir.name / avsc.name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TRAINTRACE_SCHEMAS_DIR", raising=False)
    monkeypatch.setattr(schemas_module, "SCHEMAS_PACKAGE", "fakepkg._schemas")
    try:
        root = default_schemas_dir()
        assert not isinstance(root, Path)  # a namespace package: importlib.resources' MultiplexedPath
        assert str(pkg / "_schemas") in str(root)
        packaged = SchemaSet.from_directory(root)
        checkout = SchemaSet.from_directory(REPO / "schemas")
        assert {i.fingerprint for i in packaged} == {i.fingerprint for i in checkout}
        assert packaged.versions == checkout.versions
        assert default_schema_set() is default_schema_set()  # parsed once per location
    finally:
        for name in [m for m in sys.modules if m == "fakepkg" or m.startswith("fakepkg.")]:
            del sys.modules[name]


def test_a_package_without_its_schemas_falls_back_to_the_source_tree(monkeypatch):
    monkeypatch.delenv("TRAINTRACE_SCHEMAS_DIR", raising=False)
    monkeypatch.setattr(schemas_module, "SCHEMAS_PACKAGE", "streams._no_such_package")
    assert schemas_module.packaged_schemas() is None
    assert Path(str(default_schemas_dir())).resolve() == (REPO / "schemas").resolve()


def test_the_golden_writer_needs_a_checkout(monkeypatch, tmp_path):
    from streams.codec import golden

    monkeypatch.setenv("TRAINTRACE_SCENARIOS", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit) as exc:
        golden.seed_vector()
    assert "source checkout" in str(exc.value) and str(tmp_path / "nowhere") in str(exc.value)
