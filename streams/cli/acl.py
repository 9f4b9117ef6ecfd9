"""``traintrace acl``: the ACLs the four roles need on a cluster, printed, and created on request.

A user setting up a real (company, managed) cluster grants the trainer, processor, operator and
auditor principals exactly what :mod:`streams.kafka.acls` says, for the cluster's topic names
(``--topic-prefix``, ``TRAINTRACE_TOPIC_*``) and the workers' Faust app id. Printing is the
default (``--dry-run``): the table is what a cluster admin reviews, or feeds to their own
tooling with ``--json``. ``--apply`` creates them with the admin API, connecting as configured
by ``--bootstrap``/``--kafka-config`` (a principal allowed to ALTER the cluster); creating an ACL
that exists is a no-op, so running it again is safe. ``--strimzi CLUSTER`` prints the topics and
the roles' users with their ACLs as Strimzi ``KafkaTopic``/``KafkaUser`` resources instead, from
the same tables (:mod:`streams.kafka.strimzi`).
"""

from __future__ import annotations

import json

import click

from streams.cli.common import (click_options, fail, kafka_options, kafka_settings, operator_errors,
                                topic_prefix_option, topics_for)
from streams.worker.settings import APP_ID

ROLES = ("trainer", "processor", "operator", "auditor")


def principal(user: str) -> str:
    """``User:<name>`` for a bare user name; a name with a type (``User:x``, ``Group:y``) as it is."""
    return user if ":" in user else f"User:{user}"


def _role_options(f):
    for role in reversed(ROLES):
        f = click.option(f"--{role}", f"{role}_user", default=role, show_default=True, metavar="USER",
                         envvar=f"TRAINTRACE_ACL_{role.upper()}",
                         help=f"The {role}'s principal: a user name (User:NAME) or TYPE:NAME. "
                              f"[env TRAINTRACE_ACL_{role.upper()}]")(f)
    return f


def rows(role: str, bindings) -> list[dict[str, str]]:
    """One dict per ACL binding of ``role``: role, principal, permission, operation, resource
    (TOPIC, GROUP, CLUSTER: librdkafka calls the cluster resource BROKER), name, pattern, host."""
    return [{"role": role, "principal": b.principal, "permission": b.permission_type.name,
             "operation": b.operation.name, "resource": "CLUSTER" if b.restype.name == "BROKER" else b.restype.name,
             "name": b.name, "pattern": b.resource_pattern_type.name, "host": b.host} for b in bindings]


def _print_table(table: list[dict[str, str]]) -> None:
    head = ("role", "principal", "operation", "resource", "name", "pattern")
    lines = [head] + [tuple(r[c] for c in head) for r in table]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        click.echo("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip())


@click.command("acl")
@kafka_options(start_broker=False)
@topic_prefix_option
@_role_options
@click_options([APP_ID])
@click.option("--dry-run/--apply", "dry_run", default=True, show_default=True,
              help="Print the ACLs (default), or create them on the cluster with the admin API.")
@click.option("--json", "as_json", is_flag=True, help="Print the ACLs as JSON (a list of objects).")
@click.option("--strimzi", "strimzi_cluster", default=None, metavar="CLUSTER",
              help="Print the topics and the roles' users and ACLs as Strimzi KafkaTopic / KafkaUser resources "
                   "for the Kafka cluster CLUSTER (a YAML stream, one JSON document each: kubectl apply -f -).")
@click.option("--partitions", type=click.IntRange(min=1), default=8, show_default=True,
              help="With --strimzi: partitions of the main topics (as the workers' --partitions).")
@click.option("--replicas", type=click.IntRange(min=1), default=3, show_default=True,
              help="With --strimzi: the topics' replication factor (min.insync.replicas 2 when >1).")
def acl(bootstrap: str | None, kafka_config: str | None, topic_prefix: str | None, trainer_user: str,
        processor_user: str, operator_user: str, auditor_user: str, app_id: str, dry_run: bool,
        as_json: bool, strimzi_cluster: str | None = None, partitions: int = 8, replicas: int = 3) -> None:
    """The least-privilege ACLs of the trainer (job client), processor (workers), operator
    (release, plans, watch) and auditor (read only) for these topic names; ALLOW from any host,
    everything else denied (allow.everyone.if.no.acl.found=false). See docs/security.md.

    Prints them by default (--dry-run); --apply creates them (idempotent) as the principal of
    --kafka-config, which must be allowed to ALTER the cluster.
    """
    from streams.kafka.acls import acl_bindings, apply_acls

    roles = {"trainer": principal(trainer_user), "processor": principal(processor_user),
             "operator": principal(operator_user), "auditor": principal(auditor_user)}
    topics = topics_for(topic_prefix)
    if strimzi_cluster is not None:
        from streams.kafka.strimzi import strimzi_resources

        users = {"trainer": trainer_user, "processor": processor_user, "operator": operator_user,
                 "auditor": auditor_user}
        docs = strimzi_resources(topics, strimzi_cluster, partitions, replicas, app_id,
                                 {r: u.split(":", 1)[-1] for r, u in users.items()})
        click.echo("\n".join("---\n" + json.dumps(d, indent=2) for d in docs))
        return
    table: list[dict[str, str]] = []
    bindings = []
    with operator_errors():
        for role in ROLES:
            mine = acl_bindings(topics, roles, app_id=app_id, roles=[role])
            bindings += mine
            table += rows(role, mine)
    if as_json:
        click.echo(json.dumps(table, indent=2))
    else:
        _print_table(table)
    if dry_run:
        if not as_json:
            click.echo(f"\n{len(bindings)} ACLs (dry run: nothing created; --apply creates them)", err=True)
        return
    kafka = kafka_settings(bootstrap, kafka_config)
    with operator_errors():
        n = apply_acls(kafka, bindings)
    if n != len(bindings):  # pragma: no cover - apply_acls raises on any refusal
        fail(f"created {n} of {len(bindings)} ACLs", command="acl")
    click.echo(f"created {n} ACLs on {kafka.bootstrap}", err=True)
