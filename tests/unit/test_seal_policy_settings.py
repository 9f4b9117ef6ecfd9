"""The seal policy reaches every command that folds (worker, audit, analyze, report) the same way."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from streams.cli.common import core_config
from streams.cli.main import cli
from streams.core.seals import public_key_hex
from streams.signing import SigningError, generate_key, issued_job_keys, save_public_key
from streams.worker.settings import WorkerSettings


def test_issued_job_keys_reads_a_file_a_directory_or_a_keyrings_trainer_subdirectory(tmp_path):
    a, b, proc = generate_key(), generate_key(), generate_key()
    save_public_key(a, tmp_path / "one.pub")
    assert issued_job_keys(tmp_path / "one.pub") == {public_key_hex(a)}
    ring = tmp_path / "ring"
    save_public_key(proc, ring / "processor" / "p.pub")
    save_public_key(a, ring / "trainer" / "a.pub")
    save_public_key(b, ring / "trainer" / "b.pub")
    assert issued_job_keys(ring) == {public_key_hex(a), public_key_hex(b)}
    with pytest.raises(SigningError, match="do not exist"):
        issued_job_keys(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SigningError, match="no public key"):
        issued_job_keys(tmp_path / "empty")


def test_core_config_and_the_worker_environment_build_the_same_policy(tmp_path, monkeypatch):
    key = generate_key()
    save_public_key(key, tmp_path / "trainer" / "job.pub")
    cfg = core_config(10, 3.0, 0, True, tmp_path)
    assert cfg.seals.require_sealed and cfg.seals.issued_keys == {public_key_hex(key)}
    monkeypatch.setenv("TRAINTRACE_REQUIRE_SEALED_EVENTS", "true")
    monkeypatch.setenv("TRAINTRACE_JOB_KEYS", str(tmp_path))
    assert WorkerSettings.from_env().core == cfg
    monkeypatch.setenv("TRAINTRACE_REQUIRE_SEALED_EVENTS", "perhaps")
    with pytest.raises(ValueError, match="TRAINTRACE_REQUIRE_SEALED_EVENTS"):
        WorkerSettings.from_env()


@pytest.mark.parametrize("command", ["worker", "audit", "analyze", "report"])
def test_every_folding_command_takes_the_policy(command):
    out = CliRunner().invoke(cli, [command, "--help"]).output
    assert "--require-sealed-events" in out and "--job-keys" in out


def test_a_bad_job_keys_path_is_one_line(tmp_path):
    (tmp_path / "k").mkdir()
    (tmp_path / "x.jsonl").write_text("")
    r = CliRunner().invoke(cli, ["analyze", str(tmp_path / "x.jsonl"), "--job-keys", str(tmp_path / "k")])
    assert r.exit_code == 2 and "--job-keys" in r.output and "no public key" in r.output
    assert len(r.output.strip().splitlines()) == 1
