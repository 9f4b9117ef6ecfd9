"""docker-compose.yml and the Dockerfile, checked without Docker (issue 11).

The compose file must be valid YAML without duplicated keys, hold only real services, create
exactly the topics (names, partitions, configs) the code creates
(:func:`streams.kafka.topics.standard_topics`), and run a worker whose environment names real
options of ``traintrace worker``, binds its HTTP views to every interface on a published port,
is health-checked on ``/health``, restarted when it exits, and keeps its data dir on a volume.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from streams.devtools import broker  # noqa: E402
from streams.kafka.topics import AUDIT_TOPICS, TopicNames, standard_topics  # noqa: E402
from streams.cli.worker import worker as worker_command  # noqa: E402

KAFKA_NODES = ("kafka-1", "kafka-2", "kafka-3")
ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a mapping with the same key twice (PyYAML keeps the last)."""


def _construct_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` (the kafka nodes share one)
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen and key != "<<":
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

_INTERPOLATION = re.compile(r"\$\$|\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)")


def interpolate(value, env: dict[str, str]):
    """Compose's variable interpolation (``$$``, ``${VAR}``, ``${VAR:-default}``, ``$VAR``)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(3)
        got = env.get(name)
        return got if got else (m.group(2) or "")

    return _INTERPOLATION.sub(sub, value)


def load(env: dict[str, str] | None = None) -> dict:
    with COMPOSE.open() as fh:
        raw = yaml.load(fh, Loader=_UniqueKeyLoader)
    return interpolate(raw, env or {})


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def created_topics(compose: dict) -> dict[str, tuple[int, dict[str, str]]]:
    """The topics the one-shot ``topics`` service creates: name -> (partitions, configs)."""
    svc = compose["services"]["topics"]
    script = svc["command"][0] if isinstance(svc["command"], list) else svc["command"]
    variables = dict(env_of(svc))
    out: dict[str, tuple[int, dict[str, str]]] = {}

    def expand(text: str) -> str:
        return re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), text)

    for line in script.splitlines():
        line = line.strip()
        assign = re.fullmatch(r"(\w+)=(.*)", line)
        if assign:
            variables[assign.group(1)] = expand(" ".join(shlex.split(assign.group(2))))
            continue
        if not line.startswith("create "):
            continue
        words = shlex.split(expand(line))
        name, parts, rest = words[1], int(words[2]), words[3:]
        configs: dict[str, str] = {}
        while rest:
            flag, kv = rest[0], rest[1]
            assert flag == "--config", line
            key, value = kv.split("=", 1)
            configs[key] = value
            rest = rest[2:]
        assert name not in out, f"topic {name} created twice"
        out[name] = (parts, configs)
    return out


def expected_topics(partitions: int, retention_ms: int) -> dict[str, tuple[int, dict[str, str]]]:
    return {name: (parts, dict(config or {}))
            for name, parts, config in standard_topics(TopicNames(), partitions, retention_ms=retention_ms)}


def test_compose_is_valid_yaml_with_only_real_services():
    compose = load()
    assert set(compose) <= {"services", "volumes", "networks", "configs", "secrets", "name"} | {
        k for k in compose if k.startswith("x-")}
    services = compose["services"]
    assert set(services) == {*KAFKA_NODES, "topics", "worker"}, "placeholder services left over"
    declared_volumes = set(compose.get("volumes") or {})
    for name, svc in services.items():
        assert svc.get("image") or svc.get("build"), name
        for dep in svc.get("depends_on") or {}:
            assert dep in services, f"{name} depends on unknown service {dep}"
        for vol in svc.get("volumes") or []:
            source = vol.split(":", 1)[0]
            if not source.startswith((".", "/", "~")):
                assert source in declared_volumes, f"{name}: volume {source} not declared"
    # `traintrace broker start --docker` brings up the services without a profile: kafka + topics
    assert {n for n, s in services.items() if not s.get("profiles")} == {*KAFKA_NODES, "topics"}


def test_duplicate_keys_are_caught():
    with pytest.raises(yaml.constructor.ConstructorError):
        yaml.load("a: 1\na: 2\n", Loader=_UniqueKeyLoader)


@pytest.mark.parametrize("retention_ms", [-1, 2_592_000_000])
def test_topics_equal_what_the_code_creates(retention_ms):
    env = {} if retention_ms == -1 else {"TRAINTRACE_RETENTION_MS": str(retention_ms)}
    compose = load(env)
    worker_env = env_of(compose["services"]["worker"])
    partitions = int(worker_env.get("TRAINTRACE_PARTITIONS", "8"))
    assert created_topics(compose) == expected_topics(partitions, retention_ms)
    # the worker creates (and checks) with the same retention as the topics service
    assert int(worker_env["TRAINTRACE_RETENTION_MS"]) == retention_ms


def test_audit_topics_keep_everything_by_default():
    topics = created_topics(load())
    names = TopicNames()
    for field in AUDIT_TOPICS:
        _parts, config = topics[getattr(names, field)]
        assert config == {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}, field


def _worker_envvars() -> dict[str, str]:
    out = {}
    for param in worker_command.params:
        for var in ([param.envvar] if isinstance(param.envvar, str) else (param.envvar or [])):
            out[var] = param.name
    return out


def test_worker_env_and_flags_are_sane():
    compose = load()
    worker = compose["services"]["worker"]
    env = env_of(worker)
    command = worker["command"] if isinstance(worker["command"], list) else shlex.split(worker["command"])
    assert command[:2] == ["traintrace", "worker"]
    known = _worker_envvars()
    for var in env:
        assert var in known, f"{var} is no option of `traintrace worker`"
    for flag in command[2:]:
        if flag.startswith("--"):
            assert flag.split("=")[0] in {o for p in worker_command.params for o in p.opts}, flag
    # bootstrap: the listener other containers use, of every node
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"].split(",")
    assert len(bootstrap) == len(KAFKA_NODES)
    for name, address in zip(KAFKA_NODES, bootstrap):
        advertised = env_of(compose["services"][name])["KAFKA_ADVERTISED_LISTENERS"]
        assert address in {ln.split("://", 1)[1] for ln in advertised.split(",")}
    # HTTP views bound to every interface, on the published container port
    assert env["TRAINTRACE_WEB_HOST"] == "0.0.0.0"
    port = env.get("TRAINTRACE_WEB_PORT", "6066")
    published = [str(p).rsplit(":", 1)[-1] for p in worker["ports"]]
    assert port in published
    assert all(str(p).startswith("127.0.0.1:") for p in worker["ports"]), "publish on loopback only"
    # health-checked on /health of that port (the check reads TRAINTRACE_WEB_PORT, default 6066)
    test = " ".join(worker["healthcheck"]["test"])
    assert "/health" in test and ("TRAINTRACE_WEB_PORT" in test or f":{port}/" in test)
    # the worker exits on purpose on unexpected errors: something must start it again
    assert worker["restart"] in {"unless-stopped", "on-failure", "always"} or worker["restart"].startswith("on-failure")
    # its data dir (RocksDB tables) on a declared volume
    data_dir = env["TRAINTRACE_WORKER_DIR"]
    mounts = [v.split(":")[1] for v in worker["volumes"]]
    assert any(data_dir == m or data_dir.startswith(m.rstrip("/") + "/") for m in mounts)
    assert env.get("TRAINTRACE_STORE", "rocksdb") in {"rocksdb", "memory"}
    # it waits for the topics (created with the audit configs) before starting
    assert worker["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    assert "pipeline" in worker["profiles"]


def test_kafka_host_port_is_what_broker_start_docker_returns():
    kafka = load()["services"]["kafka-1"]
    host = {str(p).split(":")[-2] for p in kafka["ports"]}
    assert broker.DOCKER_BOOTSTRAP.rsplit(":", 1)[1] in host
    assert "localhost:" + broker.DOCKER_BOOTSTRAP.rsplit(":", 1)[1] in env_of(kafka)["KAFKA_ADVERTISED_LISTENERS"]


def test_dockerfile_installs_the_worker_extra():
    import tomllib

    text = DOCKERFILE.read_text()
    assert re.search(r'^RUN pip install ["\']?\.\[worker\]["\']?\s*$', text, re.M), "install .[worker]"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    worker_extra = " ".join(extras["worker"])
    assert "faust-streaming" in worker_extra and "rocksdict" in worker_extra  # --store rocksdb, the default
    # the build reads setup.py (the layout: schemas/ mapped into the package), the schemas and
    # both packages; the installed package then finds its schemas without TRAINTRACE_SCHEMAS_DIR
    for copied in ("setup.py", "streams", "traintrace", "schemas"):
        assert re.search(rf"^COPY .*\b{copied}\b", text, re.M), f"COPY {copied}"
    assert "TRAINTRACE_SCHEMAS_DIR" not in text
    assert re.search(r"TRAINTRACE_WEB_HOST=0\.0\.0\.0", text)
    assert "/health" in text


def test_environment_overrides_do_not_leak_into_the_expectation(monkeypatch):
    # standard_topics reads TRAINTRACE_RETENTION_MS: the compose default (-1) matches the code's
    monkeypatch.delenv("TRAINTRACE_RETENTION_MS", raising=False)
    assert created_topics(load(dict(os.environ))) == expected_topics(8, -1)


def test_three_combined_nodes_form_one_quorum():
    compose = load()
    envs = [env_of(compose["services"][name]) for name in KAFKA_NODES]
    voters = {e["KAFKA_CONTROLLER_QUORUM_VOTERS"] for e in envs}
    assert len(voters) == 1, "every node must name the same voters"
    parsed = dict(v.split("@", 1) for v in voters.pop().split(","))
    assert sorted(parsed) == ["1", "2", "3"]
    assert len({e["CLUSTER_ID"] for e in envs}) == 1
    host_ports, volumes = set(), set()
    for name, e in zip(KAFKA_NODES, envs):
        svc = compose["services"][name]
        assert e["KAFKA_PROCESS_ROLES"] == "broker,controller"
        node_id = e["KAFKA_NODE_ID"]
        host, port = parsed[node_id].rsplit(":", 1)
        assert host == svc["hostname"] == name
        listeners = dict(ln.split("://", 1) for ln in e["KAFKA_LISTENERS"].split(","))
        assert listeners["CONTROLLER"] == f":{port}"
        advertised = dict(ln.split("://", 1) for ln in e["KAFKA_ADVERTISED_LISTENERS"].split(","))
        assert advertised["DOCKER"] == f"{name}:{listeners['DOCKER'].lstrip(':')}"
        published = [str(p) for p in svc["ports"]]
        assert all(p.startswith("127.0.0.1:") for p in published)
        assert advertised["HOST"] == f"localhost:{published[0].split(':')[1]}"
        host_ports.add(published[0].split(":")[1])
        volumes.add(svc["volumes"][0].split(":")[0])
        assert svc["restart"] == "unless-stopped" and "healthcheck" in svc
    assert len(host_ports) == 3 and len(volumes) == 3, "each node its own host port and volume"
    assert {f"kafka-{i}" for i in (1, 2, 3)} <= set(compose["services"]["topics"]["depends_on"])


def test_nodes_replicate_like_the_local_cluster():
    from streams.devtools.cluster import cluster_properties

    want = cluster_properties(3)
    for name in KAFKA_NODES:
        env = env_of(load()["services"][name])
        for key, value in want.items():
            assert env["KAFKA_" + key.upper().replace(".", "_")] == value, (name, key)


def test_topics_are_created_replicated_like_ensure_topics():
    from streams.kafka.topics import replication

    script = load()["services"]["topics"]["command"][0]
    create = script.split("create()", 1)[1].split("}", 1)[0]
    rf, config = replication(3, None)
    assert f"--replication-factor {rf}" in create
    for key, value in config.items():
        assert f"--config {key}={value}" in create
