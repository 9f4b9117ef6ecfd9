"""Signed control (issue 13): every lineage.control record signed over its documented message,
keys with roles (processor: plans and halts; operator: releases), the referee signing what it
publishes, the job client refusing what does not verify, the audit naming it."""

from __future__ import annotations

import copy

import pytest

from streams.client import JobClient, command_from_record
from streams.client.control import Fetched
from streams.codec import Codec
from streams.codec.examples import example_records
from streams.referee.referee import Referee
from streams.signing import (
    BAD_SIGNATURE,
    CONTROL_FIELDS,
    OK,
    UNKNOWN_KEY,
    UNSIGNED,
    WRONG_ROLE,
    ControlSigner,
    SigningError,
    TrustedKeys,
    check_commitment,
    check_control,
    control_message,
    generate_key,
    key_id,
    load_keyring,
    load_trusted_keys,
    save_public_key,
    sign_control,
)

from .test_referee import routed_events, run
from .vectors import load_lines

CODEC = Codec()
PROC, OPER, OTHER = generate_key(), generate_key(), generate_key()
RING = TrustedKeys({key_id(PROC): PROC.public_key(), key_id(OPER): OPER.public_key()},
                   {key_id(PROC): ["processor"], key_id(OPER): ["operator"]})


def control_examples() -> list[tuple[str, dict]]:
    out = []
    for r in example_records():
        if r["type"] in CONTROL_FIELDS:
            rec = {k: v for k, v in r.items() if k not in ("type", "signature", "key_id")}
            out.append((r["type"], rec))
    return out


def is_release(name, rec):
    return name == "HaltCommand" and rec["reason"] == "RELEASE"


def signer_for(name, rec):
    return OPER if is_release(name, rec) else PROC


# -- the message and the roles ---------------------------------------------------------------------


@pytest.mark.parametrize("name,rec", control_examples(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_kind_signs_and_verifies_after_the_codec(name, rec):
    signed = sign_control(name, rec, signer_for(name, rec))
    assert len(signed["signature"]) == 64 and signed["key_id"] == key_id(signer_for(name, rec))
    assert sign_control(name, rec, signer_for(name, rec)) == signed  # deterministic
    _n, back = CODEC.decode_record(CODEC.encode_record(name, signed))
    assert check_control(name, back, RING).reason == OK


@pytest.mark.parametrize("name,rec", control_examples(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_field_is_covered(name, rec):
    signed = sign_control(name, rec, signer_for(name, rec))
    for f in CONTROL_FIELDS[name]:
        if f == "key_id":
            continue
        forged = copy.deepcopy(signed)
        v = forged.get(f)
        if isinstance(v, list):
            forged[f] = v + ["x"]
        elif isinstance(v, int):
            forged[f] = v + 1
        elif v is None:
            forged[f] = ""  # null and "" are different messages
        elif f in ("action", "reason") and name != "PlanCleared":
            forged[f] = {"ROLLBACK": "RESTART_FROM_SCRATCH", "RESTART_FROM_SCRATCH": "ROLLBACK",
                         "RELEASE": "UNREGISTERED"}.get(v, "RELEASE")
        else:
            forged[f] = v + "x"
        c = check_control(name, forged, RING)
        assert not c.ok and c.reason in (BAD_SIGNATURE, WRONG_ROLE), (name, f, c)


def test_the_message_names_its_domain_and_fields():
    name, rec = control_examples()[0]
    msg = control_message(name, {**rec, "key_id": "k"})
    assert msg.startswith(b"traintrace/RollbackCommand/v1\x00command_id=")
    assert b"\x00key_id=k\x00" in msg
    assert control_message("HaltCommand", {"command_id": "c", "job_id": "j", "issued_ts": 1}) != \
        control_message("HaltCommand", {"command_id": "c", "job_id": "j", "issued_ts": 1, "detail": ""})
    with pytest.raises(ValueError):
        control_message("Alert", rec)


def test_unsigned_unknown_key_and_wrong_roles_are_refused():
    halt = next(r for n, r in control_examples() if n == "HaltCommand" and r["reason"] != "RELEASE")
    release = next(r for n, r in control_examples() if n == "HaltCommand" and r["reason"] == "RELEASE")
    assert check_control("HaltCommand", halt, RING).reason == UNSIGNED
    assert check_control("HaltCommand", {**halt, "signature": b"x" * 64}, RING).reason == UNSIGNED  # no key_id
    assert check_control("HaltCommand", sign_control("HaltCommand", halt, OTHER), RING).reason == UNKNOWN_KEY
    # an operator key cannot halt, a processor key cannot release
    assert check_control("HaltCommand", sign_control("HaltCommand", halt, OPER), RING).reason == WRONG_ROLE
    assert check_control("HaltCommand", sign_control("HaltCommand", release, PROC), RING).reason == WRONG_ROLE
    assert check_control("HaltCommand", sign_control("HaltCommand", release, OPER), RING).ok
    # the reason is covered: a processor's halt turned into a release does not verify (wrong role
    # for the new kind, and a bad signature for the old key)
    forged = {**sign_control("HaltCommand", halt, PROC), "reason": "RELEASE"}
    assert not check_control("HaltCommand", forged, RING).ok
    # a plain {key_id: key} keyring is processor keys
    plain = {key_id(PROC): PROC.public_key()}
    assert check_control("HaltCommand", sign_control("HaltCommand", halt, PROC), plain).ok
    assert check_control("HaltCommand", sign_control("HaltCommand", release, PROC), plain).reason == WRONG_ROLE
    # an operator key never signs a commitment
    from streams.signing import sign_commitment

    com = {"cohort_id": "c", "root": "00" * 32, "tree_size": 0, "heads": [], "snapshot": [], "ts": 1,
           "log_root": None, "log_size": None}
    assert check_commitment(sign_commitment(com, OPER), RING).reason == WRONG_ROLE


def test_keyring_directory_with_roles(tmp_path):
    (tmp_path / "processor").mkdir()
    (tmp_path / "operator").mkdir()
    (tmp_path / "trainer").mkdir()
    save_public_key(PROC, tmp_path / "processor" / "p.pub")
    save_public_key(OPER, tmp_path / "operator" / "o.pub")
    save_public_key(OTHER, tmp_path / "trainer" / "t.pub")
    ring = load_trusted_keys(tmp_path)
    assert ring.roles == {key_id(PROC): {"processor"}, key_id(OPER): {"operator"}}
    # the commitment keyring of the same directory: the processor keys
    assert set(load_keyring(tmp_path)) == {key_id(PROC)}
    # the flat layout `traintrace keygen` writes: processor keys
    flat = tmp_path / "flat"
    flat.mkdir()
    save_public_key(PROC, flat / "processor-x.pub")
    assert load_trusted_keys(flat).roles == {key_id(PROC): {"processor"}}
    assert TrustedKeys.of(str(flat)) == load_trusted_keys(flat)
    with pytest.raises(SigningError):
        load_trusted_keys(tmp_path / "missing")
    with pytest.raises(SigningError):
        load_trusted_keys(tmp_path / "trainer" / "..nope")


# -- the referee signs what it publishes ------------------------------------------------------------


def test_referee_signs_control_records_and_recovery_republishes_them_byte_for_byte():
    pairs = list(routed_events(load_lines("14_pbt_cohort")))
    ref = Referee(control_signer=ControlSigner(PROC))
    emissions = run(ref, pairs)
    control = [e for e in emissions if e.topic == "control"]
    assert control and all(check_control(e.record, e.value, RING).ok for e in control)
    assert all("signature" not in e.value for e in emissions if e.topic != "control")
    # the fold's own records stay unsigned (the audit's replay recomputes those)
    assert all("signature" not in e.value for e in ref.decided_plan.values())
    # a worker taking over that never saw lineage.control re-publishes the same bytes
    new = Referee(control_signer=ControlSigner(PROC))
    for i, (cohort, ev) in enumerate(pairs):
        new.handle(cohort, ev, 1_000 + i, partition=0, publish=False)
    again = {e.value["command_id"]: e for e in new.reconcile(0, {}, 0) if e.topic == "control"}
    assert again
    for cid, e in again.items():
        orig = next(x for x in control if x.value["command_id"] == cid)
        assert CODEC.encode_record(e.record, e.value) == CODEC.encode_record(orig.record, orig.value)


# -- the job client ---------------------------------------------------------------------------------


def _cmd(name, rec, offset=0):
    return command_from_record(*CODEC.decode_record(CODEC.encode_record(name, rec)), partition=0, offset=offset)


def _rollback(cid="r1", target="A-480"):
    return {"command_id": cid, "job_id": "A", "cohort_id": "c1", "incarnation": 0, "action": "ROLLBACK",
            "target_checkpoint_id": target, "target_step": 480, "incident_ids": ["i1"], "supersedes": None,
            "issued_ts": 1, "commitment_root": None}


def _halt(cid="h1", reason="UNTRACEABLE_SOURCE"):
    return {"command_id": cid, "job_id": "A", "cohort_id": None, "reason": reason, "detail": "d", "seq": None,
            "issued_ts": 1}


def test_client_with_a_keyring_applies_only_what_verifies(tmp_path):
    rolled, halted, rejected = [], [], []
    c = JobClient("A", "c1", "m", journal_dir=tmp_path, bootstrap="127.0.0.1:1", follow_control=False,
                  fsync=False, trusted_keys=RING, on_rollback=rolled.append, on_halt=halted.append,
                  on_rejected=lambda cmd, why: rejected.append((cmd.command_id, why.split(":")[0])))
    try:
        c.start()
        genuine = sign_control("RollbackCommand", _rollback("r-good"), PROC)
        forged = [
            _cmd("RollbackCommand", _rollback("r-unsigned")),
            _cmd("RollbackCommand", sign_control("RollbackCommand", _rollback("r-unknown"), OTHER)),
            _cmd("RollbackCommand", sign_control("RollbackCommand", _rollback("r-operator"), OPER)),
            _cmd("RollbackCommand", {**genuine, "target_checkpoint_id": "A-000"}),  # one field changed
            _cmd("HaltCommand", _halt("h-unsigned")),
            _cmd("HaltCommand", sign_control("HaltCommand", _halt("h-unknown"), OTHER)),
            _cmd("HaltCommand", sign_control("HaltCommand", _halt("h-release-by-proc", "RELEASE"), PROC)),
        ]
        c._queue.put(Fetched(forged, {0: len(forged)}))
        assert c.poll() == [] and rolled == [] and halted == [] and not c.halted
        assert [r[0] for r in rejected] == ["r-unsigned", "r-unknown", "r-operator", "r-good", "h-unsigned",
                                            "h-unknown", "h-release-by-proc"]
        assert [r[1] for r in rejected] == [UNSIGNED, UNKNOWN_KEY, WRONG_ROLE, BAD_SIGNATURE, UNSIGNED,
                                            UNKNOWN_KEY, WRONG_ROLE]
        st = c.stats()
        assert st["commands_rejected"] == 7 and st["control_authenticated"] and st["commands_applied"] == 0
        assert len(c.rejected_commands) == 7 and c.rejected_commands[0][0].outcome == "rejected"
        # the genuine command (same id as the tampered one) is still applied
        c._queue.put(Fetched([_cmd("RollbackCommand", genuine, 9)], {0: 9}))
        assert [(x.command_id, x.outcome) for x in c.poll()] == [("r-good", "rollback")]
        assert [x.target_checkpoint_id for x in rolled] == ["A-480"] and c.incarnation == 1
        # a signed halt, then an operator's signed release
        c._queue.put(Fetched([_cmd("HaltCommand", sign_control("HaltCommand", _halt("h2"), PROC))], {0: 10}))
        c.poll()
        assert c.halted
        c._queue.put(Fetched([_cmd("HaltCommand", sign_control("HaltCommand", _halt("rel", "RELEASE"), OPER))],
                             {0: 11}))
        assert c.wait_while_halted(timeout=5) and not c.halted
    finally:
        c.close(timeout=0)


def test_client_keyring_from_the_environment_and_unauthenticated_warning(tmp_path, monkeypatch, caplog):
    import streams.client.job as job

    keys = tmp_path / "keys"
    keys.mkdir()
    save_public_key(PROC, keys / "p.pub")
    monkeypatch.setenv("TRAINTRACE_TRUSTED_KEYS", str(keys))
    c = JobClient("A", "c1", "m", journal_dir=tmp_path / "j1", bootstrap="127.0.0.1:1", follow_control=False,
                  fsync=False)
    try:
        assert set(c.trusted_keys) == {key_id(PROC)}
    finally:
        c.close(timeout=0)
    monkeypatch.setenv("TRAINTRACE_TRUSTED_KEYS", str(tmp_path / "missing"))
    from streams.client import ClientError

    with pytest.raises(ClientError, match="trusted"):
        JobClient("A", "c1", "m", journal_dir=tmp_path / "j2", bootstrap="127.0.0.1:1", follow_control=False)
    monkeypatch.delenv("TRAINTRACE_TRUSTED_KEYS")
    monkeypatch.setattr(job, "_warned_unauthenticated", False)
    assert job._trusted_keys(None, True) is None
    assert job._trusted_keys(None, True) is None
    assert sum("UNAUTHENTICATED" in r.getMessage() for r in caplog.records) == 1


# -- the audit ---------------------------------------------------------------------------------------


def test_audit_names_every_forged_control_record(tmp_path):
    from streams.audit.run import audit
    from streams.files.archive import LogRecord

    from .test_audit import _signed_log

    log, _plain = _signed_log(tmp_path)
    (kid, _pub), = _plain.items()
    control = log.topic("control")
    # the log's processor key, with an operator key next to it
    name, first = CODEC.decode_record(control[0].value)
    proc_ring = TrustedKeys({**_plain, key_id(OPER): OPER.public_key()}, {kid: ["processor"], key_id(OPER): ["operator"]})
    assert audit(log, None, proc_ring).check("commands").passed
    last = control[-1]
    forged = [
        first | {"signature": None, "key_id": None},                          # unsigned
        sign_control(name, {k: v for k, v in first.items() if k not in ("signature", "key_id")}, OTHER),
        sign_control(name, {k: v for k, v in first.items() if k not in ("signature", "key_id")}, OPER),
        first | {"issued_ts": first["issued_ts"] + 1},                        # one field changed
    ]
    for i, v in enumerate(forged):
        log.records["control"].append(LogRecord("control", last.partition, last.offset + 1 + i, last.timestamp,
                                                last.key, CODEC.encode_record(name, v)))
    chk = audit(log, None, proc_ring).check("commands")
    sig = [f for f in chk.failures if f.field == "signature"]
    assert [f.where for f in sig] == [f"control[{last.partition}]@{last.offset + 1 + i}" for i in range(4)], \
        [f.line() for f in chk.failures]
    text = " ".join(f.what for f in sig)
    for reason in (UNSIGNED, UNKNOWN_KEY, WRONG_ROLE, BAD_SIGNATURE):
        assert reason in text
    assert all(first["command_id"][:12] in f.what for f in sig)
    # without trusted keys: no signature finding
    assert not [f for f in audit(log).check("commands").failures if f.field == "signature"]


# -- a takeover verifies what it reads back (issue 23) ----------------------------------------------


def test_a_takeover_counts_only_records_signed_by_the_processor(tmp_path, monkeypatch):
    """A forged record on lineage.control (unsigned, or signed by another key) must not make a
    new owner skip a genuine command: streams.worker.published counts a record as published
    only when it verifies under the processor's own key."""
    from types import SimpleNamespace

    from streams.kafka.topics import TopicNames
    from streams.signing import write_keypair
    from streams.worker import published

    pairs = list(routed_events(load_lines("14_pbt_cohort")))
    genuine = [e for e in run(Referee(control_signer=ControlSigner(PROC)), pairs) if e.topic == "control"]
    forged_unsigned = {**genuine[0].value, "command_id": "f" * 64, "signature": None, "key_id": None}
    forged_other = sign_control(genuine[1].record, {**genuine[1].value, "command_id": "e" * 64}, OTHER)
    values = [CODEC.encode_record(genuine[0].record, forged_unsigned),
              CODEC.encode_record(genuine[1].record, forged_other),
              *[CODEC.encode_record(e.record, e.value) for e in genuine]]
    monkeypatch.setattr(published.reader, "read_to_end",
                        lambda *a, **k: iter(SimpleNamespace(value=v) for v in values))
    keys = tmp_path / "keys"
    keys.mkdir()
    write_keypair(keys, key=PROC)
    settings = SimpleNamespace(kafka="x:1", bootstrap="x:1", topics=TopicNames(), signing_key=keys / "processor.key")
    ids = published.read_published_commands(settings, CODEC).command_ids
    assert {e.value["command_id"] for e in genuine} <= ids
    assert "f" * 64 not in ids and "e" * 64 not in ids
    settings.signing_key = None  # an unsigned (demo) worker takes what is there, as before
    ids = published.read_published_commands(settings, CODEC).command_ids
    assert "f" * 64 in ids and "e" * 64 in ids
