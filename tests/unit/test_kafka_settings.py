"""KafkaSettings: the one place every Kafka client's configuration comes from."""

from __future__ import annotations

import pytest

from streams.kafka.errors import KafkaAdapterError
from streams.kafka.settings import KafkaSettings, read_properties


def test_from_env_reads_every_setting(tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("# a secured cluster\nsecurity.protocol=SASL_SSL\n\nsasl.mechanism = SCRAM-SHA-512\n")
    k = KafkaSettings.from_env(env={"KAFKA_BOOTSTRAP_SERVERS": "b1:9093,b2:9093", "TRAINTRACE_CLIENT_ID": "tt-1",
                                    "TRAINTRACE_KAFKA_CONFIG": str(props),
                                    "TRAINTRACE_REPLICATION_FACTOR": "3"})
    assert k.bootstrap == "b1:9093,b2:9093" and k.client_id == "tt-1" and k.replication_factor == 3
    assert dict(k.properties) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}


def test_every_client_config_carries_the_common_settings():
    k = KafkaSettings("b:9092", "tt-1", (("security.protocol", "SSL"),))
    for conf in (k.producer_config(), k.consumer_config("g"), k.admin_config()):
        assert conf["bootstrap.servers"] == "b:9092"
        assert conf["client.id"] == "tt-1"
        assert conf["security.protocol"] == "SSL"
    p = k.producer_config(**{"linger.ms": 0})
    # keys land where Faust puts them; idempotent; acknowledged by every in-sync replica
    assert p["partitioner"] == "murmur2_random" and p["enable.idempotence"] is True and p["acks"] == "all"
    assert p["linger.ms"] == 0
    c = k.consumer_config("g")
    assert c["group.id"] == "g" and c["enable.auto.commit"] is False and c["isolation.level"] == "read_committed"


def test_explicit_values_win_over_the_environment():
    k = KafkaSettings.from_env("given:1", "mine", env={"KAFKA_BOOTSTRAP_SERVERS": "env:2",
                                                       "TRAINTRACE_CLIENT_ID": "theirs"})
    assert (k.bootstrap, k.client_id) == ("given:1", "mine")
    assert KafkaSettings.of(k) is k
    assert k.with_client_id("other").client_id == "other"


def test_faust_gets_the_same_cluster_and_client_id():
    opts = KafkaSettings("b1:9092, b2:9092", "tt-1").faust_options()
    assert opts == {"broker": ["kafka://b1:9092", "kafka://b2:9092"], "broker_client_id": "tt-1"}


@pytest.mark.parametrize("env, message", [
    ({}, "KAFKA_BOOTSTRAP_SERVERS"),
    ({"KAFKA_BOOTSTRAP_SERVERS": "b:1", "TRAINTRACE_REPLICATION_FACTOR": "0"}, "TRAINTRACE_REPLICATION_FACTOR"),
    ({"KAFKA_BOOTSTRAP_SERVERS": "b:1", "TRAINTRACE_KAFKA_CONFIG": "/nonexistent/x.properties"}, "x.properties"),
])
def test_bad_settings_are_named(env, message):
    with pytest.raises(KafkaAdapterError, match=message):
        KafkaSettings.from_env(env=env)


def test_a_bad_properties_line_names_file_and_line(tmp_path):
    f = tmp_path / "p.properties"
    f.write_text("acks=all\nnot a property\n")
    with pytest.raises(KafkaAdapterError, match=r"p.properties:2"):
        read_properties(f)
