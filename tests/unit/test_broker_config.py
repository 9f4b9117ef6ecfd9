"""Pure pieces of streams.devtools.broker: no Java, no Maven, no broker."""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path

import pytest

from streams.devtools import broker as b


def _parse(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_server_properties_is_one_combined_kraft_node_on_loopback(tmp_path: Path) -> None:
    props = b.server_properties(19092, 19093, tmp_path / "kraft")
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == str(tmp_path / "kraft")
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "num.partitions",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "true"
    # never a non-loopback address, never a wildcard bind
    assert "0.0.0.0" not in json.dumps(props) and "localhost" not in json.dumps(props)
    assert "controller.quorum.bootstrap.servers" not in props  # static quorum: no --standalone


def test_server_properties_extra_overrides_and_port_clash() -> None:
    props = b.server_properties(1, 2, "/x", extra={"num.partitions": 3, "log.cleaner.enable": False})
    assert props["num.partitions"] == "3"
    assert props["log.cleaner.enable"] == "false"
    with pytest.raises(ValueError):
        b.server_properties(5, 5, "/x")


def test_render_properties_round_trips_and_escapes() -> None:
    text = b.render_properties({"a.b": 1, "path": "C:\\data\\kafka", "flag": True}, header="hello\nworld")
    assert text.startswith("# hello\n# world\n")
    parsed = _parse(text)
    assert parsed == {"a.b": "1", "path": "C:\\\\data\\\\kafka", "flag": "true"}
    assert text.endswith("\n")


def test_log4j2_config_goes_to_the_file_not_the_console(tmp_path: Path) -> None:
    cfg = _parse(b.render_log4j2_properties(tmp_path / "broker.log"))
    assert cfg["appender.out.type"] == "File"
    assert cfg["appender.out.fileName"] == str(tmp_path / "broker.log")
    assert cfg["rootLogger.level"] == "INFO"
    assert "Console" not in cfg.values()
    tools = _parse(b.render_log4j2_properties(None, level="WARN"))
    assert tools["appender.out.type"] == "Console" and tools["rootLogger.level"] == "WARN"


def test_pom_names_the_kafka_version() -> None:
    pom = b.render_pom("4.1.1")
    assert "<artifactId>kafka_2.13</artifactId><version>4.1.1</version>" in pom
    assert pom.startswith("<?xml")


def test_slf4j_bridge_is_added_only_when_missing() -> None:
    jars = ["kafka_2.13-4.1.1.jar", "slf4j-api-1.7.36.jar", "log4j-core-2.24.3.jar"]
    assert b._missing_slf4j_bridge(jars) == "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3"
    assert b._missing_slf4j_bridge(["slf4j-api-2.0.16.jar", "log4j-core-2.25.0.jar"]) == (
        "org.apache.logging.log4j:log4j-slf4j2-impl:2.25.0"
    )
    assert b._missing_slf4j_bridge([*jars, "log4j-slf4j-impl-2.24.3.jar"]) is None


def test_cluster_id_is_a_base64url_uuid() -> None:
    ids = {b.new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 22 and not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_port_is_free_and_pick_free_port() -> None:
    port = b.pick_free_port()
    assert b.port_is_free(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert not b.port_is_free(taken)
        assert b.pick_free_port(exclude={taken}) != taken
    assert not b.port_is_free(0) and not b.port_is_free(70000)


def test_port_in_use_is_raised_before_java_or_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("must not get this far")

    monkeypatch.setattr(b, "find_java", boom)
    monkeypatch.setattr(b, "resolve_jars", boom)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(b.PortInUse) as info:
            b.LocalBroker(tmp_path / "d", port=port).start()
    assert info.value.port == port and str(port) in str(info.value)
    assert isinstance(info.value, b.BrokerError)


def test_cache_and_data_dir_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINTRACE_BROKER_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert b.default_data_dir() == (tmp_path / ".traintrace" / "broker").resolve()
    monkeypatch.setenv("TRAINTRACE_BROKER_DIR", str(tmp_path / "elsewhere"))
    assert b.default_data_dir() == (tmp_path / "elsewhere").resolve()

    monkeypatch.setenv("TRAINTRACE_CACHE_DIR", str(tmp_path / "cache"))
    assert b.kafka_cache_dir("4.1.1") == (tmp_path / "cache" / "kafka" / "4.1.1").resolve()
    assert b.kafka_cache_dir("4.0.0", tmp_path / "c2") == (tmp_path / "c2" / "kafka" / "4.0.0").resolve()
    monkeypatch.setenv("TRAINTRACE_KAFKA_VERSION", "4.0.1")
    assert b.kafka_version() == "4.0.1"
    assert b.LocalBroker(tmp_path / "x").version == "4.0.1"


def test_resolve_jars_uses_the_marker_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = b.kafka_cache_dir("9.9.9", tmp_path)
    monkeypatch.setattr(b.shutil, "which", lambda name: None)  # no mvn anywhere
    with pytest.raises(b.MavenMissing, match="Maven"):
        b.resolve_jars("9.9.9", tmp_path)
    (base / "libs").mkdir(parents=True)
    (base / b.MARKER_FILE).write_text("{}")
    assert b.jars_cached("9.9.9", tmp_path)
    assert b.resolve_jars("9.9.9", tmp_path) == base / "libs"


def test_java_missing_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(b.shutil, "which", lambda name: None)
    with pytest.raises(b.JavaMissing, match="17"):
        b.find_java()


def test_status_of_an_empty_data_dir(tmp_path: Path) -> None:
    broker = b.LocalBroker(tmp_path / "nothing")
    st = broker.status()
    assert st["running"] is False and st["pid"] is None and st["bootstrap"] is None
    assert b.LocalBroker.from_data_dir(tmp_path / "nothing") is None
    assert b.find_running_broker(tmp_path / "nothing") is None
    assert broker.stop() is False


def test_a_recycled_pid_is_not_our_broker(tmp_path: Path) -> None:
    """A record whose pid is alive but is not our kafka.Kafka JVM (here: pytest itself)."""
    import os

    data_dir = tmp_path / "stale"
    data_dir.mkdir()
    (data_dir / b.RECORD_FILE).write_text(json.dumps({"pid": os.getpid(), "port": 1234, "version": "4.1.1"}))
    broker = b.LocalBroker.from_data_dir(data_dir)
    assert broker is not None
    assert broker.status()["running"] is False
    assert broker.stop() is False  # and it did not signal us
    assert b.read_record(data_dir)["pid"] is None


def test_errors_are_one_line_with_detail_apart() -> None:
    exc = b.BrokerStartTimeout("did not answer; see broker.log", log_tail="line1\nline2")
    assert str(exc) == "did not answer; see broker.log"
    assert exc.detail == "line1\nline2" and exc.log_tail == "line1\nline2"
    for cls in (b.JavaMissing, b.MavenMissing, b.JarResolutionFailed, b.BrokerStartTimeout, b.DockerUnavailable):
        assert issubclass(cls, b.BrokerError)


def test_docker_helpers_fail_clearly_without_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text("services: {}\n")
    monkeypatch.setattr(b.shutil, "which", lambda name: None)
    with pytest.raises(b.DockerUnavailable, match="without --docker"):
        b.docker_compose_up(compose)
    with pytest.raises(b.DockerUnavailable, match="not found"):
        b.docker_compose_down(tmp_path / "missing.yml")


def test_cli_status_and_errors(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from streams.cli.main import cli

    runner = CliRunner()
    res = runner.invoke(cli, ["broker", "status", "--json", "--data-dir", str(tmp_path / "none")])
    assert res.exit_code == 1
    assert json.loads(res.stdout)["running"] is False

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = runner.invoke(
            cli,
            ["broker", "start", "--data-dir", str(tmp_path / "d")],
            env={"TRAINTRACE_BROKER_PORT": str(port)},
        )
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0
    assert f"port {port}" in res.stderr and "Traceback" not in res.output


def test_the_jvm_mode_is_lean_unless_set_and_a_wrong_one_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.devtools.broker import JVM_MODES, BrokerError, LocalBroker, jvm_mode

    monkeypatch.delenv("TRAINTRACE_BROKER_JVM", raising=False)
    assert jvm_mode() == "lean"
    assert LocalBroker("/tmp/x")._jvm_flags() == JVM_MODES["lean"]
    assert "-XX:TieredStopAtLevel=1" in JVM_MODES["lean"]
    monkeypatch.setenv("TRAINTRACE_BROKER_JVM", "server")
    assert LocalBroker("/tmp/x")._jvm_flags() == JVM_MODES["server"]
    assert LocalBroker("/tmp/x", jvm="lean")._jvm_flags() == JVM_MODES["lean"]
    monkeypatch.setenv("TRAINTRACE_BROKER_JVM", "fast")
    with pytest.raises(BrokerError, match="TRAINTRACE_BROKER_JVM='fast': use one of lean, server"):
        jvm_mode()
