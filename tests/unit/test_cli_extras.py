"""A command whose extra is not installed (issue 22): one line naming the extra, exit 2, no
traceback, before anything starts; ``--help`` still works. The processor's packages are the
``worker`` extra; a training environment has only the default install."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from streams.cli import extras
from streams.cli.main import cli


@pytest.fixture
def without(monkeypatch):
    """``without(*modules)``: those modules look uninstalled to the extras check."""

    def hide(*modules: str) -> None:
        real = extras._installed
        monkeypatch.setattr(extras, "_installed", lambda m: m not in modules and real(m))

    return hide


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("argv, line", [
    (["worker"], "error: traintrace worker needs the processor's packages (not installed: faust, aiokafka, "
                 "prometheus_client): pip install 'traintrace[worker]'"),
    (["demo"], "error: traintrace demo needs the processor's packages (not installed: faust, aiokafka, "
               "prometheus_client, matplotlib, numpy): pip install 'traintrace[worker]'"),
    (["report", "events.jsonl"], "error: traintrace report needs the processor's packages (not installed: "
                                 "matplotlib): pip install 'traintrace[worker]'"),
    (["ui"], "error: traintrace ui needs the processor's packages (not installed: matplotlib): "
             "pip install 'traintrace[worker]'"),
    (["smoke"], "error: traintrace smoke --live needs the processor's packages (not installed: faust, aiokafka, "
                "prometheus_client): pip install 'traintrace[worker]' (or traintrace smoke --no-live)"),
    (["openlineage"], "error: traintrace openlineage needs the OpenLineage client (not installed: "
                      "openlineage.client): pip install 'traintrace[openlineage]'"),
])
def test_a_command_without_its_extra_says_which_one_in_one_line(without, argv, line):
    without("faust", "aiokafka", "prometheus_client", "matplotlib", "numpy", "rocksdict", "openlineage.client")
    r = _invoke(*argv)
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [line]
    assert r.stdout == ""


def test_help_works_without_the_extra(without):
    without("faust", "aiokafka", "prometheus_client")
    r = _invoke("worker", "--help")
    assert r.exit_code == 0 and r.stdout.startswith("Usage:")


def test_the_worker_default_store_needs_rocksdict(without, tmp_path):
    without("rocksdict")
    r = _invoke("worker", "--bootstrap", "127.0.0.1:1", "--data-dir", str(tmp_path))
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "error: traintrace worker --store rocksdb needs the processor's packages (not installed: rocksdict): "
        "pip install 'traintrace[worker]' (or --store memory)"]


def test_a_light_command_needs_no_extra(without, tmp_path):
    without("faust", "aiokafka", "prometheus_client", "matplotlib", "numpy", "rocksdict")
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    r = _invoke("analyze", str(log), "--json")
    assert r.exit_code == 0, r.stderr


def test_an_extras_module_missing_deep_in_a_command_is_the_same_one_line(monkeypatch, capsys):
    from streams.cli import main as main_module

    def boom(*_a, **_k):
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")

    monkeypatch.setattr(main_module, "cli", boom)
    monkeypatch.setattr("sys.argv", ["traintrace", "report", "x.jsonl"])
    with pytest.raises(SystemExit) as exc:
        main_module.main()
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: traintrace report needs the processor's packages (not installed: matplotlib): "
        "pip install 'traintrace[worker]'"]


def test_any_other_missing_module_is_not_hidden(monkeypatch):
    from streams.cli import main as main_module

    def boom(*_a, **_k):
        raise ModuleNotFoundError("No module named 'nothing_of_ours'", name="nothing_of_ours")

    monkeypatch.setattr(main_module, "cli", boom)
    with pytest.raises(ModuleNotFoundError):
        main_module.main()
