"""Client security settings (streams.kafka.security), the secure broker's pieces and the ACL table:
no broker needed."""

from __future__ import annotations

import ssl

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.devtools import secure
from streams.kafka import acls, security
from streams.devtools.broker import server_properties
from streams.kafka.errors import KafkaAdapterError, KafkaAuthenticationError, KafkaAuthorizationError, KafkaTlsError
from streams.kafka.settings import KafkaSettings
from streams.kafka.topics import TopicNames

SASL = {"KAFKA_BOOTSTRAP_SERVERS": "b:9093", "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "trainer",
        "KAFKA_SASL_PASSWORD": "s3cret-pw"}


def test_the_environment_sets_security_and_wins_over_the_file(tmp_path):
    f = tmp_path / "c.properties"
    f.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=PLAIN\nsasl.username=file\nsasl.password=x\n")
    k = KafkaSettings.from_env(env={**SASL, "TRAINTRACE_KAFKA_CONFIG": str(f)})
    props = dict(k.properties)
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["sasl.username"] == "trainer" and "sasl.mechanisms" not in props
    assert k.protocol == "SASL_SSL" and k.principal == "User:trainer"
    for conf in (k.producer_config(), k.consumer_config("g"), k.admin_config()):
        assert conf["sasl.password"] == "s3cret-pw"


def test_explicit_values_win_and_secrets_are_masked(tmp_path):
    k = KafkaSettings.from_env(env=SASL).with_security(password="other-pw", key_password="kpw")
    assert dict(k.properties)["sasl.password"] == "other-pw"
    for text in (repr(k), str(k), f"{k}"):
        assert "other-pw" not in text and "kpw" not in text and "***" in text and "trainer" in text


@pytest.mark.parametrize("env, message", [
    ({"KAFKA_SECURITY_PROTOCOL": "TLS"}, "security.protocol"),
    ({"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "KERBEROS"}, "sasl.mechanism"),
    ({"KAFKA_SSL_CA_LOCATION": "/nonexistent/ca.pem"}, "ca.pem"),
    ({"KAFKA_SSL_KEY_LOCATION": __file__}, "mutual TLS"),
])
def test_bad_security_settings_are_named(env, message):
    with pytest.raises(KafkaAdapterError, match=message):
        KafkaSettings.from_env(env={"KAFKA_BOOTSTRAP_SERVERS": "b:1", **env})


def test_a_client_needs_the_whole_sasl_user():
    k = KafkaSettings("b:1").with_security("SASL_SSL", mechanism="PLAIN", username="u")
    with pytest.raises(KafkaAdapterError, match="sasl.password.*KAFKA_SASL_PASSWORD"):
        k.producer_config()
    kerberos = KafkaSettings("b:1").with_security("SASL_SSL")  # librdkafka's default: GSSAPI
    assert kerberos.producer_config()["security.protocol"] == "SASL_SSL"
    with pytest.raises(KafkaAdapterError, match="Faust worker supports"):
        kerberos.faust_options()


def _pki(tmp_path):
    return secure.ensure_pki(tmp_path / "secure")


def test_faust_gets_sasl_credentials_with_a_tls_context(tmp_path):
    import faust

    pki = _pki(tmp_path)
    k = KafkaSettings("b:1").with_security("SASL_SSL", mechanism="SCRAM-SHA-512", username="p", password="pw",
                                           ca=str(pki["ca"]))
    creds = k.faust_options()["broker_credentials"]
    assert isinstance(creds, faust.SASLCredentials)
    assert (creds.username, creds.password, creds.mechanism.value) == ("p", "pw", "SCRAM-SHA-512")
    assert creds.protocol.value == "SASL_SSL" and creds.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert "pw" not in repr(creds)
    plain = KafkaSettings("b:1").with_security("SASL_PLAINTEXT", mechanism="PLAIN", username="p", password="pw")
    assert plain.faust_options()["broker_credentials"].ssl_context is None
    mtls = KafkaSettings("b:1").with_security("SSL", ca=str(pki["ca"]), cert=str(pki["cert"]), key=str(pki["key"]))
    assert isinstance(mtls.faust_options()["broker_credentials"], faust.SSLCredentials)
    assert "broker_credentials" not in KafkaSettings("b:1").faust_options()


PROPS = {"security.protocol": "SASL_SSL", "sasl.username": "trainer"}


@pytest.mark.parametrize("err, cls, words", [
    (KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://127.0.0.1:1/bootstrap: SASL authentication error: "
                "Authentication failed (after 3ms in state AUTH_REQ)"), KafkaAuthenticationError, ["User:trainer"]),
    (KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed"), KafkaTlsError, ["ssl.ca.location"]),
    (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), KafkaAuthorizationError,
     ["User:trainer", "WRITE", "topic lineage.control"]),
])
def test_refusals_are_one_line_naming_who_what_where(err, cls, words):
    exc = security.refusal(err, PROPS, "127.0.0.1:1", operation="WRITE", resource="lineage.control")
    assert isinstance(exc, cls) and "\n" not in str(exc)
    for word in words:
        assert word in str(exc)
    assert "after 3ms" not in str(exc) and "sasl_ssl://" not in str(exc)
    assert security.refusal(KafkaError(KafkaError._TRANSPORT), PROPS, "b") is None


def test_the_watch_keeps_the_first_refusal():
    w = security.ErrorWatch(PROPS, "b:1")
    w(KafkaError(KafkaError._TRANSPORT, "down"))
    w.check()
    w(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed"))
    with pytest.raises(KafkaAuthenticationError):
        w.check()


def test_the_broker_certificate_is_for_loopback_and_signed_by_the_ca(tmp_path):
    from cryptography import x509

    pki = _pki(tmp_path)
    ca = x509.load_pem_x509_certificate(pki["ca"].read_bytes())
    cert = x509.load_pem_x509_certificate(pki["cert"].read_bytes())
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert oct(pki["key"].stat().st_mode & 0o777) == "0o600"
    before = pki["ca"].read_bytes()
    assert secure.ensure_pki(tmp_path / "secure") == pki and pki["ca"].read_bytes() == before  # kept
    ctx = security.ssl_context({"ssl.ca.location": str(pki["ca"]), "ssl.certificate.location": str(pki["cert"]),
                                "ssl.key.location": str(pki["key"])})
    assert ctx.check_hostname


def test_secure_server_properties_keep_the_controller_internal(tmp_path):
    pki = _pki(tmp_path)
    users = secure.ensure_users(tmp_path / "secure")
    assert set(users) == {"admin", "trainer", "processor", "operator", "auditor"}
    assert secure.ensure_users(tmp_path / "secure") == users  # made once
    props = server_properties(1, 2, tmp_path, extra=secure.server_overrides(1, 2, pki, users))
    assert props["listeners"] == "SASL_SSL://127.0.0.1:1,CONTROLLER://127.0.0.1:2"
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:1"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SSL"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["super.users"] == "User:admin;User:CN=traintrace-local-broker"
    args = secure.scram_format_args(users)
    assert args.count("--add-scram") == 5 and f"SCRAM-SHA-512=[name=trainer,password={users['trainer']}]" in args
    files = secure.write_client_files(tmp_path / "secure", users, pki["ca"], "127.0.0.1:1")
    k = KafkaSettings.from_env(env={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "TRAINTRACE_KAFKA_CONFIG": files["trainer"]})
    assert k.principal == "User:trainer" and dict(k.properties)["ssl.ca.location"] == str(pki["ca"])


def test_the_roles_are_least_privilege():
    grants = acls.role_grants()
    ops = {role: {(g.resource, g.name, g.operation) for g in gs} for role, gs in grants.items()}
    assert ("TOPIC", "events", "WRITE") in ops["trainer"] and ("TOPIC", "control", "READ") in ops["trainer"]
    assert ("TOPIC", "control", "WRITE") not in ops["trainer"] and ("TOPIC", "events", "READ") not in ops["trainer"]
    assert not {op for _, _, op in ops["auditor"]} & {"WRITE", "CREATE", "ALL", "DELETE", "ALTER", "IDEMPOTENT_WRITE"}
    assert ("TOPIC", "control", "WRITE") in ops["operator"] and ("TOPIC", "events", "WRITE") not in ops["operator"]
    bindings = acls.acl_bindings(TopicNames.from_env("p."), {"trainer": "User:job-7"}, roles=["trainer"])
    lines = [acls.describe(b) for b in bindings]
    assert "User:job-7 ALLOW WRITE TOPIC p.lineage.events" in lines
    assert any("GROUP traintrace-client- (prefixed)" in line for line in lines)
    with pytest.raises(KafkaAdapterError, match="unknown role"):
        acls.acl_bindings(TopicNames(), roles=["root"])


def test_a_denied_write_of_a_gapless_producer_names_the_topic():
    from confluent_kafka import KafkaError

    from streams.kafka.errors import KafkaAuthorizationError
    from streams.kafka.security import refusal

    err = KafkaError(KafkaError._GAPLESS_GUARANTEE, "ProduceRequest failed: Broker: Topic authorization failed")
    got = refusal(err, {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                        "sasl.username": "trainer"}, "b:9093", operation="WRITE", resource="lineage.control")
    assert isinstance(got, KafkaAuthorizationError)
    assert "User:trainer WRITE on topic lineage.control" in str(got) and "\n" not in str(got)


def test_a_gapless_producers_fatal_error_names_the_write_it_refused():
    """The error callback sees the fatal error without the write that caused it (CI: it was
    kept instead of the delivery report's): the text names the topic."""
    from confluent_kafka import KafkaError

    from streams.kafka.security import refusal

    err = KafkaError(KafkaError._FATAL, "Fatal error: Local: Gap-less ordering would not be guaranteed if "
                     "proceeding: ProduceRequest for lineage.control [0] with 1 message(s) failed: Broker: Topic "
                     "authorization failed (broker 1 PID{Id:3,Epoch:0}, base seq 0): unable to satisfy gap-less "
                     "guarantee", fatal=True)
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "trainer"}
    for kw in ({}, {"operation": "WRITE", "resource": "lineage.control"}):
        got = str(refusal(err, props, "b:9093", **kw))
        assert "denied User:trainer WRITE on topic lineage.control (" in got and "\n" not in got, got


def test_topics_are_replicated_on_up_to_three_brokers_with_two_in_sync():
    from streams.kafka.topics import replication

    assert replication(1, None) == (1, {"unclean.leader.election.enable": "false"})
    assert replication(2, None) == (2, {"unclean.leader.election.enable": "false"})
    assert replication(3, None) == (3, {"unclean.leader.election.enable": "false", "min.insync.replicas": "2"})
    assert replication(5, None)[0] == 3
    assert replication(5, 1) == (1, {"unclean.leader.election.enable": "false"})  # the settings' own choice
    assert replication(0, None)[0] == 1  # no broker listed yet: the create then fails with the broker's reason
