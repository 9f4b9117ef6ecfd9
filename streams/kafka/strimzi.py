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
        by_resource: "OrderedDict[str, tuple[dict[str, Any], list[str]]]" = OrderedDict()
        for g in grants[role]:
            res = _resource(g, topics)
            key = repr(sorted(res.items()))
            by_resource.setdefault(key, (res, []))[1].append(OPERATIONS[g.operation])
        acls = [{"resource": res, "operations": ops, "host": "*"} for res, ops in by_resource.values()]
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


__all__ = ["OPERATIONS", "k8s_name", "kafka_topics", "kafka_users", "strimzi_resources"]
