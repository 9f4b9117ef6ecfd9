"""``traintrace demo --secure --json`` as a user runs it: the whole story on the secure local
broker (SASL_SSL + SCRAM-SHA-512, ACLs enforced), each part with its role's own credentials, the
jobs obeying only control signed by a key of the run's keyring.

The module starts its own secure broker where ``demo --secure`` looks for one
(``$TRAINTRACE_BROKER_DIR-secure``), so the command reuses it as it would reuse the user's. The
story's facts are those of the plain demo (``test_demo.py``); here, what ``--secure`` adds: the
report names the protocol and each role's principal, every job verified every command and
rejected none, the audit verified every command signature, the keys are where the keyring wants
them, no password appears anywhere, and the run's ACLs go with its topics.

Cost: one secure broker start (~6-10 s) plus one demo run (a plain run's time plus TLS and
SCRAM handshakes; the wall times of both are printed, never asserted).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from streams.demo.leftovers import delete_run_topics
from streams.demo.roles import DemoKafka
from streams.devtools.broker import BrokerError, JavaMissing, LocalBroker, MavenMissing

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 480


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalBroker, Path]]:
    """The secure broker ``demo --secure`` finds: ``<dir>/broker-secure`` for TRAINTRACE_BROKER_DIR=<dir>/broker."""
    base = tmp_path_factory.mktemp("demo-brokers")
    b = LocalBroker(base / "broker-secure", secure=True, die_with_parent=True)
    try:
        b.start(timeout=float(os.environ.get("TRAINTRACE_BROKER_TIMEOUT", "90")))
    except (JavaMissing, MavenMissing) as exc:
        pytest.skip(f"no Kafka broker for the secure demo: {exc}")
    except BrokerError as exc:
        pytest.fail(f"could not start the secure broker: {exc}\n{exc.detail or ''}", pytrace=False)
    try:
        yield b, base / "broker"
    finally:
        b.stop(timeout=30)


@pytest.fixture(scope="module")
def secure_run(broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    b, plain_dir = broker
    work = tmp_path_factory.mktemp("demo-secure") / "run"
    # KAFKA_BOOTSTRAP_SERVERS of the session broker stays set: --secure must not use it
    env = {**os.environ, "TRAINTRACE_BROKER_DIR": str(plain_dir)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "streams", "demo", "--secure", "--json", "--work-dir", str(work)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    wall = time.monotonic() - t0
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"demo --secure exited {proc.returncode} without a JSON report:\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-3000:]}")
    roles = DemoKafka.from_files(b.status()["bootstrap"], b.status()["client_properties"])
    yield {"report": report, "proc": proc, "work": work, "wall": wall, "broker": b, "roles": roles}
    delete_run_topics(roles, report)  # --work-dir keeps them


def test_the_story_comes_out_on_the_secure_broker(secure_run) -> None:
    r, proc = secure_run["report"], secure_run["proc"]
    failed = "; ".join(f"{c['check']}: {c['detail']}" for c in r["checks"] if not c["ok"])
    assert proc.returncode == 0 and r["story_ok"], f"{failed}\n{proc.stderr[-3000:]}"
    assert r["broker"]["bootstrap"] == secure_run["broker"].status()["bootstrap"]
    assert r["broker"]["started_now"] is False  # the running secure broker was reused
    assert r["audit"]["passed"] and r["audit"]["verdict"] == "PASS", r["audit"].get("error")
    print(f"\nsecure demo: {secure_run['wall']:.1f}s wall (the run itself {r['timing']['total_s']:.1f}s)")


def test_the_report_says_secure_and_names_each_principal(secure_run) -> None:
    k = secure_run["report"]["kafka"]
    assert k["secure"] is True and k["protocol"] == "SASL_SSL" and k["mechanism"] == "SCRAM-SHA-512"
    assert k["principals"] == {r: f"User:{r}" for r in ("admin", "processor", "trainer", "operator", "auditor")}


def test_control_was_signed_and_verified(secure_run) -> None:
    r = secure_run["report"]
    c = r["control"]
    assert c["verified_by_clients"] and c["jobs_verifying"] == 6 and c["commands_rejected"] == 0, c
    assert c["commands_applied"] >= 2, c  # j1's and j2's rollbacks at least
    assert c["audit_signatures"].get("command signatures verified", 0) >= 2, c
    assert not any(k.startswith("command signatures rejected") for k in c["audit_signatures"]), c
    assert set(c["signed_by"]) == {"processor", "operator"}
    [check] = [x for x in r["checks"] if x["check"] == "control signed and verified"]
    assert check["ok"], check


def test_the_keyring_has_roles_and_private_keys_are_private(secure_run) -> None:
    keys = secure_run["work"] / "keys"
    c = secure_run["report"]["control"]
    assert (keys / "processor" / f"processor-{c['signed_by']['processor']}.pub").is_file()
    assert (keys / "operator" / f"operator-{c['signed_by']['operator']}.pub").is_file()
    for private in (keys / "processor" / "processor.key", keys / "operator" / "operator.key"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_no_password_is_printed_or_logged(secure_run) -> None:
    users = json.loads((secure_run["broker"].secure_dir / "users.json").read_text())
    proc, work = secure_run["proc"], secure_run["work"]
    texts = [proc.stdout, proc.stderr]
    texts += [p.read_text(errors="replace") for p in work.rglob("*") if p.is_file() and p.suffix in (".log", ".json")]
    for password in users.values():
        assert not any(password in t for t in texts)


def test_the_runs_acls_go_with_its_topics(secure_run) -> None:
    roles, report = secure_run["roles"], secure_run["report"]
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    delete_run_topics(roles, report)
    prefix = report["topics"]["prefix"]
    every = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.LITERAL, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    admin = roles.admin.admin()

    def left() -> int:
        return sum(1 for b in admin.describe_acls(every, request_timeout=30).result(30) if b.name.startswith(prefix))

    # none of the run's ACLs is left (looked at, not deleted: the broker applies a deletion
    # asynchronously, so on a loaded machine a look right after it can still see some: wait)
    deadline = time.monotonic() + 60
    while (n := left()) and time.monotonic() < deadline:
        time.sleep(1.0)
    assert n == 0
