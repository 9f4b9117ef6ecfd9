"""The control sentinel (issue 23): a lineage.control record that does not verify under the
trusted keyring becomes one CONTROL_FORGED alert (same record, same alert id) and a count; a
genuine one, of the processor or an operator, none. ``traintrace plans --trusted-keys`` folds
only what verifies. The real path (a broker, a worker, the live page) is
tests/integration/test_forged_control.py."""

from __future__ import annotations

import time
from pathlib import Path

from streams.codec import Codec
from streams.kafka import reader
from streams.kafka.topics import TopicNames
from streams.operator_commands import plans as plans_mod
from streams.signing import (
    BAD_SIGNATURE,
    UNSIGNED,
    WRONG_ROLE,
    generate_key,
    key_id,
    load_trusted_keys,
    save_private_key,
    save_public_key,
    sign_control,
)
from streams.worker import metrics
from streams.worker.sentinel import FORGED, ControlSentinel, forged_alert, sentinel_keyring
from streams.worker.settings import WorkerSettings

CODEC = Codec()


def halt(job: str, cid: str, reason: str = "UNTRACEABLE_SOURCE") -> dict:
    return {"command_id": cid, "job_id": job, "cohort_id": "c1", "reason": reason, "detail": "d", "seq": 3,
            "issued_ts": int(time.time() * 1000)}


def ring(tmp_path: Path) -> tuple[Path, dict]:
    keys = {r: generate_key() for r in ("processor", "operator", "worker")}
    for r in ("processor", "operator"):
        save_public_key(keys[r], tmp_path / "ring" / r / f"{r}.pub")
    save_private_key(keys["worker"], tmp_path / "worker.key")
    return tmp_path / "ring", keys


class Msg:
    def __init__(self, value: bytes, partition: int = 1, offset: int = 7) -> None:
        self._v, self._p, self._o = value, partition, offset

    def value(self) -> bytes:
        return self._v

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic, key, value, headers=None) -> None:
        self.sent.append((topic, key, value))

    def poll(self, _t) -> int:
        return 0


def sentinel(tmp_path: Path, **kw) -> tuple[ControlSentinel, dict]:
    path, keys = ring(tmp_path)
    settings = WorkerSettings("k:1", topics=TopicNames.from_env("t."), trusted_keys=path,
                              signing_key=tmp_path / "worker.key", **kw)
    keyring = sentinel_keyring(settings)
    assert keyring is not None
    return ControlSentinel(settings, CODEC, keyring, cohort_of={"A": "c1"}.get), keys


def test_the_keyring_is_the_configured_one_plus_the_workers_own_key(tmp_path):
    s, keys = sentinel(tmp_path)
    assert set(s.keyring) == {key_id(keys[r]) for r in ("processor", "operator", "worker")}
    assert s.keyring.roles[key_id(keys["worker"])] == {"processor"}
    assert sentinel_keyring(WorkerSettings("k:1")) is None  # no keyring: not watched


def test_genuine_records_raise_nothing(tmp_path):
    s, keys = sentinel(tmp_path)
    out = Producer()
    for k in ("processor", "worker"):
        rec = sign_control("HaltCommand", halt("A", f"h-{k}"), keys[k])
        assert s._look_at(out, Msg(CODEC.encode_record("HaltCommand", rec))) is False
    release = sign_control("HaltCommand", halt("A", "rel", reason="RELEASE"), keys["operator"])
    assert s._look_at(out, Msg(CODEC.encode_record("HaltCommand", release))) is False
    assert out.sent == [] and s.forged == 0


def test_each_forgery_is_one_alert_naming_the_record_and_why(tmp_path):
    s, keys = sentinel(tmp_path)
    out = Producer()
    altered = sign_control("HaltCommand", halt("A", "alt"), keys["processor"])
    altered["detail"] = "changed"
    cases = [
        (halt("A", "uns"), UNSIGNED),
        (sign_control("HaltCommand", halt("A", "role"), keys["operator"]), WRONG_ROLE),
        (altered, BAD_SIGNATURE),
    ]
    before = {r: metrics.CONTROL_FORGED.labels(r)._value.get() for _, r in cases}
    for i, (rec, reason) in enumerate(cases):
        assert s._look_at(out, Msg(CODEC.encode_record("HaltCommand", rec), partition=0, offset=i)) is True
        topic, key, value = out.sent[-1]
        name, alert = CODEC.decode_record(value)
        assert topic == "t.lineage.alerts" and key == b"c1" and name == "Alert"
        assert alert["kind"] == FORGED and alert["job_id"] == "A" and alert["cohort_id"] == "c1"
        assert alert["details"]["reason"] == reason and alert["details"]["command_id"] == rec["command_id"]
        assert alert["details"]["offset"] == str(i) and alert["details"]["halt_reason"] == "UNTRACEABLE_SOURCE"
        assert metrics.CONTROL_FORGED.labels(reason)._value.get() == before[reason] + 1
    assert s.forged == 3
    # bytes that are no control record at all are an alert too
    assert s._look_at(out, Msg(b"\x00garbage", partition=1, offset=9)) is True
    _, alert = CODEC.decode_record(out.sent[-1][2])
    assert alert["details"]["reason"] == "undecodable" and alert["job_id"] is None


def test_the_same_record_looked_at_twice_is_the_same_alert():
    a = forged_alert("c", 2, 40, "HaltCommand", halt("A", "x"), UNSIGNED, "no signature", lambda j: None, 1)
    b = forged_alert("c", 2, 40, "HaltCommand", halt("A", "x"), UNSIGNED, "no signature", lambda j: None, 99)
    c = forged_alert("c", 2, 41, "HaltCommand", halt("A", "x"), UNSIGNED, "no signature", lambda j: None, 1)
    assert a[1]["alert_id"] == b[1]["alert_id"] != c[1]["alert_id"]
    assert a[0] == "A"  # keyed by the job when its cohort is unknown


def test_plans_with_a_keyring_fold_only_what_verifies(tmp_path, monkeypatch):
    path, keys = ring(tmp_path)
    genuine = sign_control("HaltCommand", halt("A", "real"), keys["processor"])
    forged = halt("B", "fake")
    msgs = [reader.Message("t.lineage.control", 0, i, b"k", CODEC.encode_record("HaltCommand", r), None)
            for i, r in enumerate([genuine, forged])]
    monkeypatch.setattr(plans_mod.reader, "read_to_end", lambda *a, **k: iter(msgs))
    topics = TopicNames.from_env("t.")
    plain = plans_mod.read_control("k:1", topics, CODEC)
    assert not plain.signatures_checked and sorted(plain.halts) == ["A", "B"]
    checked = plans_mod.read_control("k:1", topics, CODEC, trusted=load_trusted_keys(path))
    assert checked.signatures_checked and sorted(checked.halts) == ["A"]
    [left] = checked.unverified
    assert left["job_id"] == "B" and left["reason"] == UNSIGNED and (left["partition"], left["offset"]) == (0, 1)
    assert checked.records == 2


def test_the_live_page_with_a_keyring_shows_no_forged_plan(tmp_path):
    from streams.files.archive import LogRecord
    from streams.ui.state import UIState

    path, keys = ring(tmp_path)
    rb = {"command_id": "c" * 64, "job_id": "A", "cohort_id": "c1", "incarnation": 0, "action": "ROLLBACK",
          "target_checkpoint_id": "A-60", "target_step": 60, "incident_ids": ["i"], "supersedes": None,
          "issued_ts": 1, "commitment_root": None}
    genuine = sign_control("RollbackCommand", rb, keys["processor"])
    forged = {**rb, "command_id": "f" * 64}
    recs = [LogRecord("control", 0, i, 1, "A", CODEC.encode_record("RollbackCommand", r))
            for i, r in enumerate([genuine, forged])]
    plain, checked = UIState(), UIState(trusted=load_trusted_keys(path))
    for st in (plain, checked):
        for r in recs:
            st.add_control(r)
    assert [p["command_id"] for p in plain.view()["plans"]] == ["c" * 64, "f" * 64]
    assert plain.view()["signatures"] == {"checked": False, "unverified": []}
    view = checked.view()
    assert [p["command_id"] for p in view["plans"]] == ["c" * 64]
    [left] = view["signatures"]["unverified"]
    assert left["command_id"] == "f" * 64 and left["reason"] == UNSIGNED and left["position"].endswith("@1")
