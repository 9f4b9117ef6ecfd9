"""The options and helpers the ``traintrace`` commands share (streams/cli/common.py): the one
``fail``, the bootstrap option with and without starting a broker, and the Kafka settings a
command builds from --bootstrap, --kafka-config and the environment."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from streams.cli import common
from streams.cli.main import _COMMANDS, cli
from streams.kafka.settings import CLIENT_ID_ENV, CONFIG_ENV

#: the commands that talk to Kafka and so take --kafka-config (the worker reads
#: TRAINTRACE_KAFKA_CONFIG through its settings)
KAFKA_COMMANDS = ("acl", "audit", "export", "plans", "prove", "publish", "release", "report", "watch")


def test_fail_is_one_escaped_line(capsys):
    with pytest.raises(SystemExit) as exc:
        common.fail("cannot read [bold]x[/bold] " + "y" * 200, 1)
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read [bold]x[/bold] yyy") and err.count("\n") == 1


def test_fail_names_the_command(capsys):
    with pytest.raises(SystemExit) as exc:
        common.fail("port 1 is taken", command="broker")
    assert exc.value.code == 2
    assert capsys.readouterr().err == "traintrace broker: error: port 1 is taken\n"


@pytest.mark.parametrize("start, says", [(True, "started if needed"), (False, "traintrace broker start")])
def test_bootstrap_option_says_whether_a_broker_is_started(start, says):
    @click.command()
    @common.bootstrap_option(start_broker=start)
    def cmd(bootstrap):
        click.echo(bootstrap)

    (param,) = cmd.params
    assert param.envvar == "KAFKA_BOOTSTRAP_SERVERS" and says in param.help
    assert CliRunner().invoke(cmd, [], env={"KAFKA_BOOTSTRAP_SERVERS": "h:1"}).output == "h:1\n"


def test_bare_bootstrap_option_starts_a_broker():
    @click.command()
    @common.bootstrap_option
    def cmd(bootstrap):
        pass

    assert "started if needed" in cmd.params[0].help


def test_kafka_settings_from_flag_and_environment(tmp_path, monkeypatch):
    flag = tmp_path / "flag.properties"
    flag.write_text("# the flag's\nsecurity.protocol=SASL_SSL\n")
    env = tmp_path / "env.properties"
    env.write_text("socket.timeout.ms=5000\n")
    monkeypatch.setenv(CONFIG_ENV, str(env))
    monkeypatch.setenv(CLIENT_ID_ENV, "me")
    k = common.kafka_settings("h:1", str(flag))
    assert (k.bootstrap, k.client_id, k.properties) == ("h:1", "me", (("security.protocol", "SASL_SSL"),))
    assert common.kafka_settings("h:1").properties == (("socket.timeout.ms", "5000"),)


def test_a_bad_kafka_config_fails_naming_the_file(tmp_path):
    bad = tmp_path / "bad.properties"
    bad.write_text("not a property\n")
    result = CliRunner().invoke(cli, ["plans", "--bootstrap", "127.0.0.1:1", "--kafka-config", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:1: not a property" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("name", sorted(_COMMANDS))
def test_every_command_has_help(name):
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    options = {o for p in cli.get_command(click.Context(cli), name).params for o in p.opts}
    if name in KAFKA_COMMANDS:
        assert {"--bootstrap", "--kafka-config", "--topic-prefix"} <= options
        assert "TRAINTRACE_KAFKA_CONFIG" in result.output
