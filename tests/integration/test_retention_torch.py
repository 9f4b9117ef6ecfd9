"""Retention on a real broker (SPEC §13, issue 25): a worker with a settle horizon tells each job
which checkpoints it may delete (signed RetentionNotices on lineage.control), the torch helper
rotates through it (``keep=2``: delete what the referee allows beyond the newest two), and a
contamination found after several rotations rolls the consumer back to a target rotation kept.

W writes a checkpoint every step and rotates; R rotates too, merges ``W-7`` (clean when loaded),
and W then reports its divergence (onset 6) within the horizon. R's plan targets ``R-4``, its
newest clean checkpoint before the merge: R-4 is pinned (needed) however many checkpoints R
writes after it, R restores it with no substitution, the log has every deletion, none of a
pinned checkpoint, and the audit re-derives every RetentionNotice."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from streams.integrations.torch import TorchLineage  # noqa: E402

from tests.integration.test_torch import tiny  # noqa: E402

pytestmark = pytest.mark.integration

HORIZON_S = 3.0


def wait_until(what, pred, clients, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for c in clients:
            c.poll(timeout=0.2)


def on_disk(store, job):
    return sorted(p.name for p in store.root.iterdir() if p.name.startswith(f"{job}-"))


def test_torch_rotation_keeps_what_a_rollback_needs(lineage_cohort, tmp_path):
    run = lineage_cohort(extra_args=["--settle-horizon", str(HORIZON_S), "--retention-interval", "0.5"])
    store = tmp_path / "ckpts"
    wm, wo, ws = tiny(1)
    rm, ro, rs = tiny(2)
    w = TorchLineage(run.client("W"), store, wm, wo, ws, keep=2)
    r = TorchLineage(run.client("R"), store, rm, ro, rs, keep=2)
    restores = []
    r.on_restored = restores.append
    w.start()
    r.start()
    for s in range(1, 6):
        w.progress(s, 1.0 / s)
        w.save(s)
    for s in range(1, 5):
        r.progress(s, 1.0 / s)
        r.save(s)
    # the horizon passes: the older checkpoints settle, a notice says which may go
    wait_until("W-1..W-3 deletable", lambda: {"W-1", "W-2", "W-3"} <= set(w.client.deletable_checkpoints()),
               [w.client, r.client])
    wait_until("R-1..R-3 deletable", lambda: {"R-1", "R-2", "R-3"} <= set(r.client.deletable_checkpoints()),
               [w.client, r.client])
    assert w.prune() == ["W-1", "W-2", "W-3"]  # keep=2 keeps W-4, W-5 (W-5, the latest, is pinned anyway)
    assert r.prune() == ["R-1", "R-2"]         # R-3 is deletable too, but among the newest two
    assert on_disk(w.store, "W") == ["W-4.pt", "W-5.pt"] and on_disk(r.store, "R") == ["R-3.pt", "R-4.pt"]
    assert r.client.kept_reason("R-4") == "latest"

    w.progress(6, 0.2)
    w.save(6)
    w.progress(7, 0.2)
    w.save(7)
    r.load("W-7", 5, "MERGE")           # clean when loaded: the gate lets it through
    w.client.diverged(6, "test", "loss spike at step 6")  # well within the horizon of W's step 6
    for s in range(5, 10):              # R trains on and rotates; the referee must keep R-4
        r.progress(s, 0.5)
        r.save(s)
        r.poll(s)
    # what an operator sees: the referee keeps R-4 (the newest clean checkpoint before the merge)
    from click.testing import CliRunner
    from streams.cli.main import cli
    import json

    prefix = run.topics.events[: -len("lineage.events")]
    out = CliRunner().invoke(cli, ["retention", "--job", "R", "--json", "--bootstrap", run.bootstrap,
                                   "--topic-prefix", prefix, "--trusted-keys", str(run.keys)])
    assert out.exit_code == 0, out.output
    live = json.loads(out.output)
    assert live["signatures_checked"] and not live["unverified"]
    assert {r["checkpoint_id"]: r["deletable"] for r in live["checkpoints"]}.get("R-4") is False, live
    wait_until("R's rollback", lambda: bool(restores), [w.client, r.client])
    (got,) = restores
    assert got.checkpoint_id == "R-4" and not got.from_scratch and r.outcomes == []
    assert run.rollbacks()["R"] == ("ROLLBACK", "R-4")
    assert "R-4.pt" in on_disk(r.store, "R")
    w.finish()
    r.finish()
    run.settle(grace_s=1.0)
    deleted = [(e["job_id"], e["checkpoint_id"]) for e in run.events() if e["type"] == "CheckpointDeleted"]
    assert ("W", "W-1") in deleted and ("R", "R-1") in deleted and ("R", "R-4") not in deleted
    alerts = [rec for name, rec in _alerts(run)]
    assert not [a for a in alerts if a["kind"] == "DELETED_PINNED"], alerts
    notices = [rec for name, rec in run.commands() if name == "RetentionNotice"]
    assert notices and all(n.get("signature") for n in notices)
    written = {e["checkpoint_id"] for e in run.events() if e["type"] == "CheckpointWritten"}
    print(f"\nretention (torch, keep=2, H={HORIZON_S:g}s): {len(written)} checkpoint(s) written, "
          f"{len(written) - len(deleted)} kept, {len(deleted)} deleted; {len(notices)} notice(s)")
    report = run.assert_audits_clean()
    assert report.passed


def _alerts(run):
    from streams.audit.log import load_topics
    from streams.codec import Codec

    codec = Codec()
    log = load_topics(run.bootstrap, run.topics, topics=("alerts",))
    return [codec.decode_record(r.value) for r in log.records.get("alerts", []) if r.value]
