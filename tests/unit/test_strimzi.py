"""Strimzi resources from the one source of truth (issue 26): the KafkaTopics are
``standard_topics`` and the KafkaUsers' ACLs are exactly ``role_grants``."""

from __future__ import annotations

from streams.kafka.acls import ROLES, resolve, role_grants
from streams.kafka.strimzi import OPERATIONS, strimzi_resources
from streams.kafka.topics import TopicNames, standard_topics


def test_the_topics_are_the_standard_topics():
    topics = TopicNames.from_env("p.")
    res = strimzi_resources(topics, "my-cluster", partitions=6, replicas=3)
    kt = [r for r in res if r["kind"] == "KafkaTopic"]
    want = standard_topics(topics, 6)
    assert [(r["spec"]["topicName"], r["spec"]["partitions"]) for r in kt] == [(n, p) for n, p, _c in want]
    for r, (_n, _p, cfg) in zip(kt, want):
        assert {k: v for k, v in r["spec"]["config"].items() if k != "min.insync.replicas"} == (cfg or {})
        assert r["spec"]["replicas"] == 3 and r["spec"]["config"]["min.insync.replicas"] == "2"
        assert r["metadata"]["labels"]["strimzi.io/cluster"] == "my-cluster"
        assert r["metadata"]["name"].replace(".", "").replace("-", "").isalnum()


def test_the_users_acls_are_exactly_the_roles_grants():
    topics = TopicNames.from_env()
    users = {r["metadata"]["labels"]["traintrace/role"]: r for r in strimzi_resources(topics, "c", app_id="tt")
             if r["kind"] == "KafkaUser"}
    assert set(users) == set(ROLES)
    for role, grants in role_grants("tt").items():
        got = sorted((a["resource"]["type"], a["resource"].get("name"), a["resource"].get("patternType"), op)
                     for a in users[role]["spec"]["authorization"]["acls"] for op in a["operations"])
        want = sorted((g.resource.lower(), None if g.resource == "CLUSTER" else resolve(g, topics),
                       None if g.resource == "CLUSTER" else ("prefix" if g.pattern == "PREFIXED" else "literal"),
                       OPERATIONS[g.operation]) for g in grants)
        assert got == want, role


def test_traintrace_acl_prints_them_as_a_yaml_stream():
    import yaml
    from click.testing import CliRunner

    from streams.cli.main import cli

    r = CliRunner().invoke(cli, ["acl", "--strimzi", "prod", "--partitions", "12", "--replicas", "3",
                                 "--trainer", "trainers"])
    assert r.exit_code == 0, r.output
    docs = [d for d in yaml.safe_load_all(r.output) if d]
    assert [d["kind"] for d in docs].count("KafkaTopic") == len(standard_topics(TopicNames.from_env(), 12))
    users = {d["metadata"]["name"] for d in docs if d["kind"] == "KafkaUser"}
    assert users == {"trainers", "processor", "operator", "auditor"}
