"""Secure by default on a secure cluster (issue 23): a job client connected with SASL or TLS and no
trusted keyring refuses to start unless told ``allow_unsigned_control``; on a PLAINTEXT broker
the demo's behaviour (a loud warning) stays. No broker needed."""

from __future__ import annotations

import logging

import pytest

import streams.client.job as job
from streams.client import ClientError, JobClient
from streams.kafka.settings import KafkaSettings
from streams.signing import TRUSTED_KEYS_ENV, generate_key, save_public_key

SASL = KafkaSettings("127.0.0.1:1").with_security("SASL_SSL", mechanism="SCRAM-SHA-512", username="trainer",
                                                  password="pw")
TLS = KafkaSettings("127.0.0.1:1").with_security("SSL")


class NoFetcher:
    """The control fetcher, without a broker to fetch from."""

    def __init__(self, *args, **kwargs) -> None:
        import threading

        self.caught_up = threading.Event()
        self.records_seen = 0
        self.last_error = None

    def start(self) -> None:
        pass

    def stop(self, timeout: float = 0) -> None:
        pass


@pytest.fixture(autouse=True)
def no_keyring_in_the_environment(monkeypatch):
    monkeypatch.delenv(TRUSTED_KEYS_ENV, raising=False)
    monkeypatch.delenv(job.ALLOW_UNSIGNED_ENV, raising=False)
    monkeypatch.setattr(job, "_warned_unauthenticated", False)
    monkeypatch.setattr(job, "ControlFetcher", NoFetcher)


def _client(tmp_path, name="j", **kw) -> JobClient:
    return JobClient("A", "c1", "m", journal_dir=tmp_path / name, fsync=False, **kw)


@pytest.mark.parametrize("kafka", [SASL, TLS], ids=["SASL_SSL", "SSL"])
def test_a_secured_client_without_a_keyring_refuses_to_start(tmp_path, kafka):
    with pytest.raises(ClientError) as info:
        _client(tmp_path, bootstrap=kafka)
    text = str(info.value)
    assert "\n" not in text and kafka.protocol in text
    for fix in ("trusted_keys=", TRUSTED_KEYS_ENV, "allow_unsigned_control=True",
                "TRAINTRACE_ALLOW_UNSIGNED_CONTROL=1"):
        assert fix in text, text
    assert "pw" not in text
    assert not (tmp_path / "j").exists() or not any((tmp_path / "j").iterdir())  # nothing opened nor written


def test_allowed_unsigned_control_by_keyword_or_environment_starts_with_the_warning(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, "traintrace.client")
    c = _client(tmp_path, "a", bootstrap=SASL, allow_unsigned_control=True)
    try:
        assert c.trusted_keys is None and not c.stats()["control_authenticated"]
    finally:
        c.close(timeout=0)
    assert "UNAUTHENTICATED" in caplog.text
    monkeypatch.setenv(job.ALLOW_UNSIGNED_ENV, "1")
    c = _client(tmp_path, "b", bootstrap=TLS)
    c.close(timeout=0)
    with pytest.raises(ClientError, match="no trusted keys"):  # the keyword wins over the environment
        _client(tmp_path, "c", bootstrap=TLS, allow_unsigned_control=False)


def test_a_secured_client_with_a_keyring_or_without_control_starts(tmp_path, monkeypatch):
    keys = tmp_path / "keys"
    keys.mkdir()
    save_public_key(generate_key(), keys / "p.pub")
    c = _client(tmp_path, "a", bootstrap=SASL, trusted_keys=keys)
    c.close(timeout=0)
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(keys))
    c = _client(tmp_path, "b", bootstrap=SASL)
    assert c.trusted_keys is not None
    c.close(timeout=0)
    monkeypatch.delenv(TRUSTED_KEYS_ENV)
    c = _client(tmp_path, "c", bootstrap=SASL, follow_control=False)  # it obeys nothing: nothing to forge
    c.close(timeout=0)


def test_on_a_plaintext_broker_the_demo_behaviour_stays(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "traintrace.client")
    c = _client(tmp_path, bootstrap="127.0.0.1:1")
    try:
        assert c.trusted_keys is None
    finally:
        c.close(timeout=0)
    assert "NO TRUSTED KEYS" in caplog.text and "UNAUTHENTICATED" in caplog.text
