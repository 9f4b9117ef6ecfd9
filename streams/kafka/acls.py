"""The roles of a secured cluster and their least-privilege ACLs, as data.

Four principals use traintrace (plus the cluster's admin, a super user):

- *trainer*, the job client: writes ``lineage.events`` (idempotently), reads ``lineage.control``;
- *processor*, the workers: reads and writes the pipeline's topics, creates them and its Faust
  topics (prefixed by its app id), owns its consumer groups;
- *operator*: ``release`` (writes ``lineage.control``), ``plans`` (reads it), ``watch`` (reads
  ``lineage.alerts``);
- *auditor*: reads every topic the audit reads, writes nothing.

:func:`role_grants` is the table (docs/security.md prints it); :func:`acl_bindings` turns it into
``confluent_kafka.admin.AclBinding`` for a cluster's topic names and principals, and
:func:`apply_acls` creates them with the admin API (``traintrace acl --apply``, and the secure
local broker at start). Kafka allows what an ACL grants and nothing else
(``allow.everyone.if.no.acl.found=false``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from streams.kafka.errors import KafkaAdapterError

if TYPE_CHECKING:
    from streams.kafka.settings import KafkaSettings
    from streams.kafka.topics import TopicNames

ROLES = ("trainer", "processor", "operator", "auditor")
#: the group-id prefix of the job client's control fetchers (assign only, never committed)
CLIENT_GROUP_PREFIX = "traintrace-client-"
#: readers without a group (streams.kafka.reader) use a throw-away group id of this prefix
READER_GROUP_PREFIX = "traintrace-reader-"

_PIPELINE = ("events", "control", "alerts", "manifests", "commitments", "dlq", "by_cohort", "checkpoints",
             "job_cohorts", "snapshots")
_AUDITED = ("events", "by_cohort", "control", "manifests", "commitments", "dlq", "alerts", "checkpoints",
            "snapshots")


@dataclass(frozen=True)
class Grant:
    """One permission: ``operation`` on ``resource`` (topic, group, cluster) named ``name``
    (a :class:`TopicNames` field for a topic; ``pattern`` literal or prefixed)."""

    resource: str
    name: str
    operation: str
    pattern: str = "LITERAL"


def _topic(fields: Iterable[str], *operations: str) -> list[Grant]:
    return [Grant("TOPIC", f, op) for f in fields for op in operations]


def role_grants(app_id: str = "traintrace") -> dict[str, list[Grant]]:
    """Role -> its grants (``app_id``: the workers' Faust app id, the prefix of their groups
    and internal topics)."""
    return {
        "trainer": [
            *_topic(["events"], "WRITE", "DESCRIBE"),
            *_topic(["control"], "READ", "DESCRIBE"),
            Grant("GROUP", CLIENT_GROUP_PREFIX, "READ", "PREFIXED"),
            Grant("GROUP", READER_GROUP_PREFIX, "READ", "PREFIXED"),
            Grant("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"),
        ],
        "processor": [
            *_topic(_PIPELINE, "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS", "CREATE"),
            Grant("TOPIC", app_id, "ALL", "PREFIXED"),  # the Faust app's changelogs and internals
            Grant("GROUP", app_id, "ALL", "PREFIXED"),
            Grant("GROUP", READER_GROUP_PREFIX, "READ", "PREFIXED"),
            Grant("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"),
            Grant("CLUSTER", "kafka-cluster", "DESCRIBE"),
        ],
        "operator": [
            *_topic(["control"], "READ", "WRITE", "DESCRIBE"),
            *_topic(["alerts", "manifests"], "READ", "DESCRIBE"),
            Grant("GROUP", READER_GROUP_PREFIX, "READ", "PREFIXED"),
            Grant("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE"),
        ],
        "auditor": [
            *_topic(_AUDITED, "READ", "DESCRIBE", "DESCRIBE_CONFIGS"),
            Grant("GROUP", READER_GROUP_PREFIX, "READ", "PREFIXED"),
        ],
    }


def resolve(grant: Grant, topics: "TopicNames") -> str:
    """The resource name of ``grant`` on a cluster whose topics are ``topics``."""
    if grant.resource == "TOPIC" and grant.pattern == "LITERAL":
        return getattr(topics, grant.name)
    return grant.name


def acl_bindings(topics: "TopicNames", principals: Mapping[str, str] | None = None,
                 app_id: str = "traintrace", roles: Iterable[str] = ROLES) -> list:
    """The ``AclBinding`` of every grant of ``roles``: role -> principal from ``principals``
    (default ``User:<role>``), ALLOW from any host."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    principals = principals or {}
    grants = role_grants(app_id)
    out = []
    for role in roles:
        if role not in grants:
            raise KafkaAdapterError(f"unknown role {role!r}: want one of {', '.join(ROLES)}")
        who = principals.get(role, f"User:{role}")
        for g in grants[role]:
            restype = ResourceType.BROKER if g.resource == "CLUSTER" else ResourceType[g.resource]
            out.append(AclBinding(restype, resolve(g, topics), ResourcePatternType[g.pattern],
                                  who, "*", AclOperation[g.operation], AclPermissionType.ALLOW))
    return out


def describe(binding) -> str:
    """One line: ``User:trainer WRITE TOPIC lineage.events``."""
    pattern = "" if binding.resource_pattern_type.name == "LITERAL" else f" ({binding.resource_pattern_type.name.lower()})"
    return (f"{binding.principal} {binding.permission_type.name} {binding.operation.name} "
            f"{binding.restype.name} {binding.name}{pattern}")


def apply_acls(kafka: "KafkaSettings", bindings: list, timeout: float = 30.0) -> int:
    """Create ``bindings`` on the cluster (existing ones are kept: creating is idempotent);
    returns how many. A refusal raises the one-line error of :meth:`KafkaSettings.refusal`."""
    from confluent_kafka import KafkaException

    if not bindings:
        return 0
    admin = kafka.admin()
    for binding, fut in admin.create_acls(bindings, request_timeout=timeout).items():
        try:
            fut.result()
        except KafkaException as exc:
            known = kafka.refusal(exc, operation="ALTER", resource="kafka-cluster (create ACLs)")
            raise (known or KafkaAdapterError(f"cannot create the ACL {describe(binding)}: {exc}")) from exc
    return len(bindings)
