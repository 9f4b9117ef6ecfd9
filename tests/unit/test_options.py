"""Settings declared once (``streams.options``): the command line's options and the reading of
the environment are made from the same :class:`Setting` declarations, so they cannot disagree
on a name, a bound or a default (issue 24)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from streams.cli.common import click_options
from streams.options import CORE_SETTINGS, Setting, read_env
from streams.worker.settings import WORKER_SETTINGS, WorkerSettings

ALL = WORKER_SETTINGS + CORE_SETTINGS

#: a valid text of each setting's variable (besides its default)
SAMPLES = {int: "7", float: "2.5", str: "other", Path: "/tmp/elsewhere", bool: "true"}


def sample(s: Setting) -> str:
    if isinstance(s.kind, tuple):
        return next(v for v in s.kind if v != s.default)
    if s.name == "web_port":
        return "6077"
    return SAMPLES[s.kind]


def parsed_by_click(settings, env: dict[str, str]) -> dict:
    """What a command decorated with ``click_options(settings)`` receives under ``env``."""
    got: dict = {}

    @click.command()
    @click_options(settings)
    def cmd(**values) -> None:
        got.update(values)

    # existence checks are the command line's alone: give them a path that exists
    result = CliRunner().invoke(cmd, [], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return got


def test_the_worker_command_takes_every_setting_by_its_flag_and_variable():
    from streams.cli.worker import worker

    params = {p.name: p for p in worker.params}
    for s in ALL:
        assert s.name in params, s.flag
        assert params[s.name].envvar == s.env and params[s.name].default == s.default, s.flag
        assert s.env in params[s.name].help, s.flag


def test_defaults_agree():
    plain = [s for s in ALL if not (s.kind is Path and s.path)]
    assert parsed_by_click(plain, {}) == read_env(plain, {})


@pytest.mark.parametrize("s", [s for s in ALL if not (s.kind is Path and s.path)], ids=lambda s: s.flag)
def test_each_variable_is_read_the_same_by_both(s):
    env = {s.env: sample(s)}
    assert parsed_by_click([s], env) == read_env([s], env)


@pytest.mark.parametrize("s", [s for s in ALL if s.minimum is not None], ids=lambda s: s.flag)
def test_a_value_out_of_bounds_is_refused_by_both_and_the_variable_named(s):
    low = str(int(s.minimum) - 1 if s.kind is int else s.minimum - 0.5)
    with pytest.raises(ValueError, match=s.env):
        read_env([s], {s.env: low})

    @click.command()
    @click_options([s])
    def cmd(**values) -> None:
        pass

    result = CliRunner().invoke(cmd, [], env={s.env: low})
    assert result.exit_code == 2 and s.flag in result.output


def test_bad_booleans_and_choices_name_the_variable():
    with pytest.raises(ValueError, match="TRAINTRACE_EVICT_SETTLED='maybe': must be one of 1, true"):
        WorkerSettings.from_env({"TRAINTRACE_EVICT_SETTLED": "maybe"})
    with pytest.raises(ValueError, match="TRAINTRACE_STORE='disk': must be one of rocksdb, memory"):
        WorkerSettings.from_env({"TRAINTRACE_STORE": "disk"})
    with pytest.raises(ValueError, match="TRAINTRACE_WEB_PORT='70000': must be <= 65535"):
        WorkerSettings.from_env({"TRAINTRACE_WEB_PORT": "70000"})


def test_from_env_reads_only_the_environment_it_is_given(monkeypatch):
    monkeypatch.setenv("TRAINTRACE_PARTITIONS", "3")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "env:1")
    monkeypatch.setenv("TRAINTRACE_TOPIC_PREFIX", "proc.")
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    s = WorkerSettings.from_env({"TRAINTRACE_TOPIC_EVENTS": "ev"}, default_bootstrap="given:9")
    assert s.partitions == 8 and s.bootstrap == "given:9" and s.kafka.bootstrap == "given:9"
    assert s.topics.events == "ev" and s.topics.control == "lineage.control"
    assert dict(s.kafka.properties).get("security.protocol") is None
    own = WorkerSettings.from_env()  # the process's own by default
    assert own.partitions == 3 and own.topics.events == "proc.lineage.events"
    assert dict(own.kafka.properties)["security.protocol"] == "SASL_SSL"


def test_every_setting_is_declared_once():
    names = [s.flag for s in ALL] + [s.env for s in ALL]
    assert len(names) == len(set(names))
    src = {p: p.read_text() for p in (Path(__file__).resolve().parents[2] / "streams").rglob("*.py")}
    for s in ALL:  # the variable's name is written once: in its Setting, or a constant it takes
        where = sorted(str(p.relative_to(p.parents[1])) for p, text in src.items() if f'"{s.env}"' in text)
        assert len(where) == 1, f"{s.env} is written in {where}"
