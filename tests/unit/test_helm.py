"""The Helm chart (issue 26), checked with the real ``helm`` (built from the Go module proxy by
``.ci/run``): ``helm lint`` passes, and what ``helm template`` renders is what the code means —
the KafkaTopics and KafkaUsers are exactly ``traintrace acl --strimzi``'s resources (one source
of truth), the PrometheusRule is the shipped rules file, the workers get one volume each and
probes on /health, and every setting the chart passes is one a command reads."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "traintrace"


#: the helm the chart's tests run; .ci/run builds it in the background while the tests start
HELM_VERSION = "v3.21.4"


def _find_helm() -> str | None:
    found = shutil.which("helm")
    if found:
        return found
    gopath = os.environ.get("GOPATH") or str(Path.home() / "go")
    cand = Path(gopath) / "bin" / "helm"
    return str(cand) if cand.exists() else None


@functools.lru_cache(maxsize=1)
def helm() -> str | None:
    """The ``helm`` binary, or None. While a build that ``.ci/run`` started runs (its pid in
    ``TRAINTRACE_HELM_BUILD_PID``), wait for it (up to 15 minutes): the suite does not wait for
    helm to start, only the tests that need it do, and by their turn it is usually built."""
    pid = int(os.environ.get("TRAINTRACE_HELM_BUILD_PID") or 0)
    deadline = time.monotonic() + 900
    while _find_helm() is None and pid and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(2)
    return _find_helm()


@pytest.fixture
def helm_binary() -> str:
    found = helm()
    if found is None:
        pytest.skip(f"helm is not built (go install helm.sh/helm/v3/cmd/helm@{HELM_VERSION})")
    return found


needs_helm = pytest.mark.usefixtures("helm_binary")


def render(*sets: str, check: bool = True) -> list[dict] | subprocess.CompletedProcess:
    args = [helm(), "template", "tt", str(CHART)]
    for s in sets:
        args += ["--set", s]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if not check:
        return p
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def kinds(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def test_the_charts_data_files_are_what_the_tables_write():
    spec = importlib.util.spec_from_file_location("traintrace_helm_tables", REPO / "deploy" / "helm" / "tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for path, text in mod.files().items():
        assert path.read_text() == text, f"{path} is stale: run python deploy/helm/tables.py"


@needs_helm
def test_helm_lint_passes():
    p = subprocess.run([helm(), "lint", "--strict", str(CHART), "--set", "kafka.bootstrap=kafka:9092"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([helm(), "lint", "--strict", str(CHART), "--set", "strimzi.enabled=true",
                        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
                        "--set", "openlineage.enabled=true", "--set", "openlineage.url=http://marquez:5000",
                        "--set", "worker.routeReplicas=2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


@needs_helm
@pytest.mark.parametrize("prefix,partitions,replicas,app_id", [("", 8, 3, "traintrace"), ("prod.", 12, 1, "tt-prod")])
def test_the_strimzi_resources_are_traintrace_acls(prefix, partitions, replicas, app_id, monkeypatch):
    from streams.kafka.strimzi import strimzi_resources
    from streams.kafka.topics import TopicNames

    monkeypatch.delenv("TRAINTRACE_RETENTION_MS", raising=False)
    docs = render("strimzi.enabled=true", "strimzi.cluster=prod-kafka", f"partitions={partitions}",
                  f"strimzi.replicas={replicas}", f"topicPrefix={prefix}", f"appId={app_id}",
                  "strimzi.users.trainer=trainers")
    got = [d for d in docs if d["kind"] in ("KafkaTopic", "KafkaUser")]
    want = strimzi_resources(TopicNames.from_env(prefix, env={}), "prod-kafka", partitions, replicas, app_id,
                             users={"trainer": "trainers"})
    assert got == want


@needs_helm
def test_a_finite_retention_reaches_every_audited_topic_and_the_workers():
    docs = render("strimzi.enabled=true", "retentionMs=604800000")
    ret = {d["spec"]["topicName"]: d["spec"]["config"].get("retention.ms") for d in kinds(docs, "KafkaTopic")}
    assert ret["lineage.events"] == "604800000" and ret["lineage.checkpoints"] is None
    env = {e["name"]: e.get("value") for e in kinds(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TRAINTRACE_RETENTION_MS"] == "604800000"


@needs_helm
def test_the_workers_have_a_volume_each_probes_on_health_and_their_metrics_scraped():
    docs = render("kafka.bootstrap=kafka:9092", "worker.replicas=3", "metrics.serviceMonitor.enabled=true",
                  "metrics.prometheusRule.enabled=true", "signingKey.existingSecret=processor-key")
    (sts,) = kinds(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == 3
    assert [c["metadata"]["name"] for c in sts["spec"]["volumeClaimTemplates"]] == ["data"]
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "web"}
    env = {e["name"]: e for e in c["env"]}
    assert env["TRAINTRACE_SIGNING_KEY"]["value"] == "/etc/traintrace/signing/processor.key"
    assert env["TRAINTRACE_WORKER_DIR"]["value"].startswith("/data/")
    assert {"name": "data", "mountPath": "/data"} in c["volumeMounts"]
    (sm,) = kinds(docs, "ServiceMonitor")
    svc = next(s for s in kinds(docs, "Service") if s["metadata"]["name"] == "tt-traintrace-worker")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["spec"]["selector"].items()
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "traintrace"  # job="traintrace", as the rules select
    assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in svc["spec"]["ports"]}
    (rule,) = kinds(docs, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((REPO / "deploy" / "prometheus" / "traintrace-rules.yml").read_text())


@needs_helm
def test_route_replicas_run_the_stages_in_pods_of_their_own():
    """worker.routeReplicas: fold workers and route workers (traintrace worker --stages), each a
    StatefulSet with its own volumes and selector, both scraped as job="traintrace"."""
    docs = render("kafka.bootstrap=kafka:9092", "worker.replicas=3", "worker.routeReplicas=2",
                  "metrics.serviceMonitor.enabled=true")
    sets = {d["metadata"]["name"]: d for d in kinds(docs, "StatefulSet")}
    assert set(sets) == {"tt-traintrace-worker", "tt-traintrace-worker-route"}
    stages, selectors = {}, []
    for name, sts in sets.items():
        (c,) = sts["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        stages[name] = (env["TRAINTRACE_STAGES"], sts["spec"]["replicas"])
        assert [v["metadata"]["name"] for v in sts["spec"]["volumeClaimTemplates"]] == ["data"]
        match = sts["spec"]["selector"]["matchLabels"]
        assert match.items() <= sts["spec"]["template"]["metadata"]["labels"].items()
        selectors.append(match)
    assert stages == {"tt-traintrace-worker": ("fold", 3), "tt-traintrace-worker-route": ("route", 2)}
    # neither StatefulSet selects the other's pods
    a, b = (sets[n]["spec"]["template"]["metadata"]["labels"] for n in sorted(sets))
    assert not selectors[0].items() <= b.items() or not selectors[1].items() <= a.items()
    assert selectors[0] != selectors[1]
    (sm,) = kinds(docs, "ServiceMonitor")
    services = [s for s in kinds(docs, "Service") if sm["spec"]["selector"]["matchLabels"].items()
                <= s["metadata"]["labels"].items()]
    scraped = {tuple(sorted(s["spec"]["selector"].items())) for s in services}
    for sts in sets.values():  # every worker pod is behind a Service the ServiceMonitor selects
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert any(dict(sel).items() <= labels.items() for sel in scraped), labels
    # the default: one StatefulSet of workers that run every stage (no TRAINTRACE_STAGES)
    (sts,) = kinds(render("kafka.bootstrap=kafka:9092"), "StatefulSet")
    assert "TRAINTRACE_STAGES" not in {e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    p = render("kafka.bootstrap=k:9092", "worker.routeReplicas=9", "partitions=8", check=False)
    assert p.returncode != 0 and "worker.routeReplicas (9) is more than the partitions (8)" in p.stderr


@needs_helm
def test_with_strimzi_each_component_logs_in_as_its_kafkauser():
    docs = render("strimzi.enabled=true", "strimzi.cluster=k", "strimzi.users.processor=tt-processor")
    users = {d["metadata"]["name"]: d["metadata"]["labels"]["traintrace/role"] for d in kinds(docs, "KafkaUser")}
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("StatefulSet", "Deployment")}
    assert set(pods) == {"tt-traintrace-worker", "tt-traintrace-alerts", "tt-traintrace-ui"}
    for name, pod in pods.items():
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        user = env["KAFKA_SASL_USERNAME"]["value"]
        assert users[user] == ("processor" if name.endswith("worker") else "auditor")
        assert env["KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": user, "key": "password"}
        assert env["KAFKA_BOOTSTRAP_SERVERS"]["value"] == "k-kafka-bootstrap:9093"
        assert env["KAFKA_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
        ca = next(v for v in pod["volumes"] if v["name"] == "kafka-ca")
        assert ca["secret"]["secretName"] == "k-cluster-ca-cert"


@needs_helm
def test_every_setting_the_chart_passes_is_one_its_command_reads():
    """No variable in a pod's environment that its command ignores (a typo would be silent)."""
    import click

    from streams.cli.main import cli

    docs = render("strimzi.enabled=true", "openlineage.enabled=true", "openlineage.url=http://m:5000",
                  "openlineage.apiKeySecret=ol", "trustedKeys.existingSecret=keys", "signingKey.existingSecret=k",
                  "kafka.extraConfig.linger\\.ms=5", "topicPrefix=p.", "worker.settleHorizon=600",
                  "worker.snapshotEvery=20000", "worker.routeReplicas=1")
    ctx = click.Context(cli)
    kafka = {"KAFKA_BOOTSTRAP_SERVERS", "KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME",
             "KAFKA_SASL_PASSWORD", "KAFKA_SSL_CA_LOCATION"}
    seen = 0
    for d in docs:
        if d["kind"] not in ("StatefulSet", "Deployment"):
            continue
        (c,) = d["spec"]["template"]["spec"]["containers"]
        cmd = cli.get_command(ctx, c["args"][1])
        reads = {e for p in cmd.params for e in ([p.envvar] if isinstance(p.envvar, str) else (p.envvar or []))}
        unknown = {e["name"] for e in c["env"]} - reads - kafka
        assert not unknown, (c["args"], unknown)
        seen += 1
    assert seen == 5  # the fold workers, the route workers, the forwarder, the live page, the follower


@needs_helm
def test_more_workers_than_partitions_is_refused_in_one_line():
    p = render("kafka.bootstrap=k:9092", "worker.replicas=9", "partitions=8", check=False)
    assert p.returncode != 0
    assert "worker.replicas (9) is more than the partitions (8)" in p.stderr
    p = render(check=False)  # no bootstrap and no Strimzi cluster
    assert p.returncode != 0 and "kafka.bootstrap is required" in p.stderr


def test_the_kafka_env_names_are_the_settings_kafka_reads(tmp_path):
    """The chart's KAFKA_* variables are ones KafkaSettings reads (not click options)."""
    from streams.kafka.settings import KafkaSettings

    env = {"KAFKA_BOOTSTRAP_SERVERS": "b:1", "KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
           "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p", "KAFKA_SSL_CA_LOCATION": str(tmp_path / "ca.crt")}
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    conf = KafkaSettings.from_env(env=env).common()
    assert conf["bootstrap.servers"] == "b:1" and conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.username"] == "u" and conf["sasl.password"] == "p" and conf["ssl.ca.location"] == env["KAFKA_SSL_CA_LOCATION"]
