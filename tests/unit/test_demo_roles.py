"""The demo's roles (streams/demo/roles.py): the plain demo gives every client one settings
object; ``--secure`` gives each role its own, from its properties file only, and the workers the
processor's file with none of this process's ``KAFKA_*`` security variables."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from streams.cli.main import cli
from streams.demo.errors import DemoError
from streams.demo.roles import ROLES, DemoKafka
from streams.kafka.settings import CONFIG_ENV, KafkaSettings

SECRET = "pw-of-the-role-0123456789"


def role_files(tmp_path):
    files = {}
    for r in ROLES:
        f = tmp_path / f"{r}.properties"
        f.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username={r}\n"
                     f"sasl.password={SECRET}-{r}\n")
        files[r] = str(f)
    return files


def test_plain_is_one_settings_object_for_every_role():
    k = DemoKafka.of("h:1")
    assert not k.secure and k.bootstrap == "h:1" and k.worker_env() == {}
    assert len({id(getattr(k, r)) for r in ROLES}) == 1
    assert k.describe() == {"secure": False, "protocol": "PLAINTEXT", "mechanism": None, "principals": {}}
    assert DemoKafka.of(k) is k and isinstance(k.trainer, KafkaSettings)


def test_secure_roles_come_from_their_files_only(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "someone-else")
    k = DemoKafka.from_files("h:1", role_files(tmp_path))
    assert k.secure and k.describe()["principals"] == {r: f"User:{r}" for r in ROLES}
    assert k.describe()["protocol"] == "SASL_SSL" and k.describe()["mechanism"] == "SCRAM-SHA-512"
    env = k.worker_env()
    assert env[CONFIG_ENV].endswith("processor.properties") and env["KAFKA_SASL_USERNAME"] == ""
    assert SECRET not in repr(k)


def test_a_missing_role_file_is_one_line(tmp_path):
    files = role_files(tmp_path)
    del files["auditor"]
    with pytest.raises(DemoError, match="no client properties for auditor"):
        DemoKafka.from_files("h:1", files)


def test_secure_demo_refuses_a_bootstrap_flag():
    r = CliRunner().invoke(cli, ["demo", "--secure", "--bootstrap", "h:1"])
    assert r.exit_code == 2 and "drop --bootstrap" in r.output and r.output.count("\n") == 1
