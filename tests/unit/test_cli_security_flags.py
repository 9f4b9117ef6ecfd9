"""The security flags every Kafka-using command takes (streams/cli/common.py ``kafka_options``):
``--security-protocol``, ``--sasl-*``, ``--ssl-*``. A flag wins over its ``KAFKA_*`` variable,
which wins over the ``--kafka-config`` file; a secret given any way is never printed."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from streams.cli import common
from streams.cli.main import cli
from tests.unit.test_cli_options import KAFKA_COMMANDS

FLAGS = ("--security-protocol", "--sasl-mechanism", "--sasl-username", "--sasl-password", "--ssl-ca",
         "--ssl-cert", "--ssl-key")
SECRET = "s3cret-Pa55word"


@click.command()
@common.kafka_options()
def show(bootstrap, kafka_config):
    """Prints the settings' repr and the properties a client is built with (test only)."""
    k = common.kafka_settings(bootstrap, kafka_config)
    click.echo(repr(k))
    props = dict(k.properties)
    click.echo(" ".join(f"{key}={'<secret>' if key == 'sasl.password' else v}" for key, v in sorted(props.items())))
    click.echo(f"password-from={props.get('sasl.password', '')[:4]}")


def run(args, env=None):
    base = {"KAFKA_BOOTSTRAP_SERVERS": "h:1", "TRAINTRACE_KAFKA_CONFIG": "", **{
        v: "" for v in ("KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME",
                        "KAFKA_SASL_PASSWORD", "KAFKA_SSL_CA_LOCATION", "KAFKA_SSL_CERTIFICATE_LOCATION",
                        "KAFKA_SSL_KEY_LOCATION")}}
    return CliRunner().invoke(show, list(args), env={**base, **(env or {})})


@pytest.mark.parametrize("name", KAFKA_COMMANDS)
def test_every_kafka_command_takes_the_flags(name):
    out = CliRunner().invoke(cli, [name, "--help"], terminal_width=200).output
    for flag in FLAGS:
        assert flag in out, f"traintrace {name} lacks {flag}"
    assert "flag > KAFKA_* environment > --kafka-config file > default" in out
    assert "Prefer the environment variable" in out


def test_flags_make_the_settings():
    r = run(["--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "u",
             "--sasl-password", SECRET])
    assert r.exit_code == 0, r.output
    assert "sasl.mechanism=SCRAM-SHA-512 sasl.password=<secret> sasl.username=u security.protocol=SASL_SSL" in r.output
    assert "password-from=s3cr" in r.output


def test_flag_beats_environment_beats_file(tmp_path):
    cfg = tmp_path / "client.properties"
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=from-file\n"
                   "sasl.password=file-pw\n")
    env = {"KAFKA_SASL_USERNAME": "from-env", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"}
    r = run(["--kafka-config", str(cfg), "--sasl-username", "from-flag"], env)
    assert r.exit_code == 0, r.output
    assert "sasl.username=from-flag" in r.output  # flag > env > file
    assert "sasl.mechanism=SCRAM-SHA-256" in r.output  # env > file
    assert "security.protocol=SASL_PLAINTEXT" in r.output and "password-from=file" in r.output  # file > default
    r = run(["--kafka-config", str(cfg)], env)
    assert "sasl.username=from-env" in r.output


def test_no_flag_changes_nothing():
    r = run([])
    assert r.exit_code == 0, r.output
    assert "properties=()" in r.output


@pytest.mark.parametrize("how", ["flag", "env", "file"])
def test_the_password_is_never_shown(tmp_path, how):
    cfg = tmp_path / "client.properties"
    cfg.write_text(f"sasl.password={SECRET}\n" if how == "file" else "")
    args = ["--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN", "--sasl-username", "u",
            "--kafka-config", str(cfg)]
    if how == "flag":
        args += ["--sasl-password", SECRET]
    r = run(args, {"KAFKA_SASL_PASSWORD": SECRET} if how == "env" else {})
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("KafkaSettings(") and "'***'" in first and SECRET not in first


@pytest.mark.parametrize("args, says", [
    (["--security-protocol", "TLS"], "security.protocol='TLS': want one of"),
    (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "MD5"], "sasl.mechanism"),
    (["--ssl-ca", "/no/such/ca.pem"], "ssl.ca.location=/no/such/ca.pem: no such file"),
    (["--ssl-cert", __file__], "mutual TLS needs both"),
])
def test_a_bad_flag_is_one_line_naming_it(args, says):
    r = run([*args, "--sasl-password", SECRET])
    assert r.exit_code == 2, r.output
    assert says in r.output and r.output.count("\n") == 1 and SECRET not in r.output


def test_flags_outside_a_command_are_none():
    assert common._security_flags() == {}
