"""The pipeline's topics and the four roles' ACLs as Strimzi resources (``KafkaTopic``,
``KafkaUser``), made from the same tables ``ensure_topics`` (:func:`streams.kafka.topics.standard_topics`)
and ``traintrace acl`` (:func:`streams.kafka.acls.role_grants`) use: one source of truth for a
cluster run by the Strimzi operator (``traintrace acl --strimzi CLUSTER``). Plain dicts, for a
YAML or JSON document each."""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, Mapping

from streams.kafka.acls import ROLES, Grant, resolve, role_grants
from streams.kafka.topics import TopicNames, standard_topics

API = "kafka.strimzi.io/v1beta2"
#: librdkafka's operation names -> Strimzi's
OPERATIONS = {"READ": "Read", "WRITE": "Write", "CREATE": "Create", "DELETE": "Delete", "ALTER": "Alter",
              "DESCRIBE": "Describe", "DESCRIBE_CONFIGS": "DescribeConfigs", "ALTER_CONFIGS": "AlterConfigs",
              "IDEMPOTENT_WRITE": "IdempotentWrite", "CLUSTER_ACTION": "ClusterAction", "ALL": "All"}


def k8s_name(name: str) -> str:
    """A DNS-1123 name for a resource (``lineage.by-cohort`` -> ``lineage.by-cohort``, ``_`` -> ``-``)."""
    return re.sub(r"[^a-z0-9.-]", "-", name.lower()).strip("-.")[:253]


def _resource(g: Grant, topics: TopicNames) -> dict[str, Any]:
    if g.resource == "CLUSTER":
        return {"type": "cluster"}
    return {"type": g.resource.lower(), "name": resolve(g, topics),
            "patternType": "prefix" if g.pattern == "PREFIXED" else "literal"}


def _grouped(grants: list[Grant], resource: Any) -> list[tuple[dict[str, Any], list[str]]]:
    """``grants`` as (resource, Strimzi operations) pairs, one per resource, in first-seen order."""
    by_resource: "OrderedDict[str, tuple[dict[str, Any], list[str]]]" = OrderedDict()
    for g in grants:
        res = resource(g)
        by_resource.setdefault(repr(sorted(res.items())), (res, []))[1].append(OPERATIONS[g.operation])
    return list(by_resource.values())


def _chart_resource(g: Grant, names: TopicNames) -> dict[str, Any]:
    """:func:`_resource`, a literal topic named by its default name (the chart prefixes it)."""
    res = _resource(g, names)
    if g.resource == "TOPIC" and g.pattern == "LITERAL":
        return {"type": "topic", "topic": res.pop("name"), "patternType": res["patternType"]}
    return res


def kafka_topics(topics: TopicNames, cluster: str, partitions: int = 8, replicas: int = 3,
                 min_insync: int | None = 2) -> list[dict[str, Any]]:
    out = []
    for name, parts, config in standard_topics(topics, partitions):
        cfg = dict(config or {})
        if min_insync is not None and replicas > 1:
            cfg.setdefault("min.insync.replicas", str(min(min_insync, replicas)))
        out.append({"apiVersion": API, "kind": "KafkaTopic",
                    "metadata": {"name": k8s_name(name), "labels": {"strimzi.io/cluster": cluster}},
                    "spec": {"topicName": name, "partitions": parts, "replicas": replicas, "config": cfg}})
    return out


def kafka_users(topics: TopicNames, cluster: str, app_id: str = "traintrace",
                users: Mapping[str, str] | None = None, authentication: str = "scram-sha-512") -> list[dict[str, Any]]:
    """One KafkaUser per role (named ``users[role]``, default the role), its ACLs grouped by
    resource: every grant of :func:`role_grants`, nothing else."""
    users = users or {}
    out = []
    grants = role_grants(app_id)
    for role in ROLES:
        acls = [{"resource": res, "operations": ops, "host": "*"}
                for res, ops in _grouped(grants[role], lambda g: _resource(g, topics))]
        out.append({"apiVersion": API, "kind": "KafkaUser",
                    "metadata": {"name": k8s_name(users.get(role, role)), "labels": {"strimzi.io/cluster": cluster,
                                                                                      "traintrace/role": role}},
                    "spec": {"authentication": {"type": authentication},
                             "authorization": {"type": "simple", "acls": acls}}})
    return out


def strimzi_resources(topics: TopicNames, cluster: str, partitions: int = 8, replicas: int = 3,
                      app_id: str = "traintrace", users: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every KafkaTopic of the pipeline, then a KafkaUser per role."""
    return kafka_topics(topics, cluster, partitions, replicas) + kafka_users(topics, cluster, app_id, users)


#: the app id's place in :func:`chart_tables` (the chart puts ``.Values.appId`` there)
APP_ID_MARK = "@APP_ID@"


def chart_tables() -> dict[str, Any]:
    """The same tables as data for the Helm chart (``deploy/helm/traintrace/files/tables.json``,
    written by ``deploy/helm/tables.py``), so its KafkaTopic / KafkaUser templates render what
    :func:`strimzi_resources` returns for the same cluster, partitions, replicas, prefix and app
    id. Each topic: its field of :class:`TopicNames`, its default name, the divisor of the
    partition count it gets (1: all, 2: half) and its config (retention kept forever: the
    chart's ``retentionMs`` replaces it). Each role: its ACLs grouped as :func:`kafka_users`
    groups them, a topic named by its default name (the chart prefixes it), the app id as
    :data:`APP_ID_MARK`."""
    names = TopicNames()
    field_of = {name: field for field, name in names.all().items()}
    probe = 1 << 10
    topics = []
    for name, parts, config in standard_topics(names, probe, retention_ms=-1):
        if probe % parts:
            raise ValueError(f"topic {name}: {parts} of {probe} partitions is no divisor the chart can render")
        topics.append({"key": field_of[name], "name": name, "divisor": probe // parts, "config": dict(config or {})})
    roles: dict[str, list[dict[str, Any]]] = {}
    for role, grants in role_grants(APP_ID_MARK).items():
        roles[role] = [{"resource": res, "operations": ops}
                       for res, ops in _grouped(grants, lambda g: _chart_resource(g, names))]
    return {"api": API, "appIdMark": APP_ID_MARK, "roles": list(ROLES), "topics": topics, "acls": roles}


__all__ = ["APP_ID_MARK", "OPERATIONS", "chart_tables", "k8s_name", "kafka_topics", "kafka_users",
           "strimzi_resources"]
