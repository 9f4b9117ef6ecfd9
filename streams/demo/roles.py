"""Who does what in a demo run: the Kafka settings of each role.

The plain demo runs every client with one settings object (the local PLAINTEXT broker, or the
cluster the environment names). ``traintrace demo --secure`` runs on the secure local broker
with each part under its role's own credentials, as a real deployment would: the workers as
*processor* (they also create the run's topics), the jobs as *trainer*, the plans and the live
alerts as *operator*, the read-back, export and audit as *auditor*, and *admin* only for what an
administrator does: granting the run's topics their ACLs (the broker grants them for the default
topic names; a demo run has its own prefix) and deleting the run's topics and ACLs at the end.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from streams.demo.errors import DemoError
from streams.kafka import security
from streams.kafka.errors import KafkaAdapterError
from streams.kafka.settings import CONFIG_ENV, KafkaSettings

ROLES = ("admin", "processor", "trainer", "operator", "auditor")


@dataclass(frozen=True)
class DemoKafka:
    """The settings of each role of a run (all the same one for the plain demo)."""

    admin: KafkaSettings
    processor: KafkaSettings
    trainer: KafkaSettings
    operator: KafkaSettings
    auditor: KafkaSettings
    #: role -> its client properties file (secure only: what the worker processes are given)
    files: tuple[tuple[str, str], ...] = ()
    secure: bool = False

    @classmethod
    def plain(cls, kafka: KafkaSettings | str) -> "DemoKafka":
        k = KafkaSettings.of(kafka)
        return cls(k, k, k, k, k)

    @classmethod
    def of(cls, value: "DemoKafka | KafkaSettings | str") -> "DemoKafka":
        """``value`` itself, or one settings object (or bootstrap servers) for every role."""
        return value if isinstance(value, DemoKafka) else cls.plain(value)

    @classmethod
    def from_files(cls, bootstrap: str, files: Mapping[str, str]) -> "DemoKafka":
        """Each role from its properties file (``<broker>/secure/<role>.properties``), nothing from
        this process's environment (each role acts with its own credentials only)."""
        missing = [r for r in ROLES if not files.get(r)]
        if missing:
            raise DemoError(f"the secure broker has no client properties for {', '.join(missing)}: restart "
                            "it with `traintrace broker start --secure`")
        try:
            each = {r: KafkaSettings.from_env(bootstrap=bootstrap, env={CONFIG_ENV: files[r]}) for r in ROLES}
        except KafkaAdapterError as exc:
            raise DemoError(f"cannot read the secure broker's client properties: {exc}") from exc
        return cls(**each, files=tuple((r, files[r]) for r in ROLES), secure=True)

    @property
    def bootstrap(self) -> str:
        return self.processor.bootstrap

    def worker_env(self) -> dict[str, str]:
        """What a worker process's environment gets: nothing for the plain demo (it inherits
        this process's); for the secure one the processor's properties file, and no ``KAFKA_*``
        security variable of this process (they would win over the file)."""
        if not self.secure:
            return {}
        return {**{var: "" for var in security.ENV_KEYS}, CONFIG_ENV: dict(self.files)["processor"]}

    def grant(self, topics: Any, app_id: str) -> int:
        """As admin, grant every role its ACLs on the run's topics (secure only; returns how many)."""
        from streams.kafka.acls import acl_bindings, apply_acls

        if not self.secure:
            return 0
        try:
            return apply_acls(self.admin, acl_bindings(topics, app_id=app_id))
        except KafkaAdapterError as exc:
            raise DemoError(f"cannot grant the run's ACLs as {self.admin.principal}: {exc}") from exc

    def revoke(self, prefix: str, timeout: float = 30.0) -> int:
        """As admin, delete the ACLs of the topics named ``prefix...`` (secure only; returns how
        many). Only those: the roles' group and cluster grants are the broker's, shared by runs."""
        from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                           ResourcePatternType, ResourceType)

        if not self.secure or not prefix:
            return 0
        admin = self.admin.admin()
        every = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.LITERAL, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        mine = [b for b in admin.describe_acls(every, request_timeout=timeout).result(timeout)
                if b.name.startswith(prefix)]
        if not mine:
            return 0
        filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                                    b.operation, b.permission_type) for b in mine]
        for fut in admin.delete_acls(filters, request_timeout=timeout).values():
            fut.result(timeout)
        return len(mine)

    def describe(self) -> dict[str, Any]:
        """The report's ``kafka`` section: secure or not, the protocol, each role's principal."""
        props = dict(self.trainer.properties)
        return {
            "secure": self.secure,
            "protocol": self.trainer.protocol,
            "mechanism": props.get("sasl.mechanism") if self.trainer.protocol.startswith("SASL") else None,
            "principals": {r: getattr(self, r).principal for r in ROLES} if self.secure else {},
        }


def secure_role_files(status: Mapping[str, Any]) -> dict[str, str]:
    """The role -> properties file of a secure broker's ``status()`` (checked to exist)."""
    files = dict(status.get("client_properties") or {})
    for role, path in files.items():
        if not os.path.isfile(path):
            raise DemoError(f"{path} (the {role} client properties) is missing: restart the broker with "
                            "`traintrace broker start --secure`")
    return files
