"""``traintrace acl``: the four roles' ACLs for the configured topic names, as a table and as
JSON; a dry run by default; ``--apply`` hands exactly those bindings to the admin API."""

from __future__ import annotations

import json

from click.testing import CliRunner

from streams.cli.main import cli
from streams.kafka.acls import ROLES, acl_bindings
from streams.kafka.topics import TopicNames


def run(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(cli, ["acl", *args], env={"TRAINTRACE_TOPIC_PREFIX": None, **(env or {})})
    assert result.exit_code == 0, result.output
    return result


def test_json_is_every_binding_of_every_role_with_the_topic_prefix():
    rows = json.loads(run("--json", "--topic-prefix", "prod.").stdout)
    assert len(rows) == len(acl_bindings(TopicNames.from_env("prod.")))
    assert {r["role"] for r in rows} == set(ROLES)
    assert {r["principal"] for r in rows} == {f"User:{r}" for r in ROLES}
    trainer = {(r["operation"], r["resource"], r["name"]) for r in rows if r["role"] == "trainer"}
    assert ("WRITE", "TOPIC", "prod.lineage.events") in trainer
    assert ("READ", "TOPIC", "prod.lineage.control") in trainer
    assert ("WRITE", "TOPIC", "prod.lineage.control") not in trainer
    assert ("IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster") in trainer
    auditor = [r for r in rows if r["role"] == "auditor"]
    assert auditor and not any(r["operation"] in ("WRITE", "CREATE", "ALL") for r in auditor)
    assert all(r["permission"] == "ALLOW" and r["host"] == "*" for r in rows)


def test_principals_and_app_id_from_flags_and_environment():
    rows = json.loads(run("--json", "--trainer", "alice", "--operator", "Group:ops", "--app-id", "tt-prod",
                          env={"TRAINTRACE_ACL_AUDITOR": "bob"}).stdout)
    who = {r["role"]: r["principal"] for r in rows}
    assert who == {"trainer": "User:alice", "processor": "User:processor", "operator": "Group:ops",
                   "auditor": "User:bob"}
    assert {("ALL", "GROUP", "tt-prod", "PREFIXED"), ("ALL", "TOPIC", "tt-prod", "PREFIXED")} <= {
        (r["operation"], r["resource"], r["name"], r["pattern"]) for r in rows if r["role"] == "processor"}


def test_table_is_a_dry_run_by_default():
    result = run("--topic-prefix", "x.")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["role", "principal", "operation", "resource", "name", "pattern"]
    assert ["operator", "User:operator", "WRITE", "TOPIC", "x.lineage.control", "LITERAL"] in [l.split() for l in lines]
    assert len(lines) == 1 + len(acl_bindings(TopicNames.from_env("x.")))
    assert "dry run: nothing created" in result.stderr


def test_apply_creates_the_printed_bindings(monkeypatch):
    got = {}

    def fake_apply(kafka, bindings, timeout=30.0):
        got["bootstrap"], got["n"] = kafka.bootstrap, len(bindings)
        return len(bindings)

    monkeypatch.setattr("streams.kafka.acls.apply_acls", fake_apply)
    result = run("--apply", "--bootstrap", "h:9093", "--json")
    assert got == {"bootstrap": "h:9093", "n": len(json.loads(result.stdout))}
    assert f"created {got['n']} ACLs on h:9093" in result.stderr


def test_help_names_the_roles_and_the_dry_run():
    out = run("--help").output
    for flag in ("--trainer", "--processor", "--operator", "--auditor", "--dry-run / --apply", "--json",
                 "--topic-prefix", "--kafka-config"):
        assert flag in out
