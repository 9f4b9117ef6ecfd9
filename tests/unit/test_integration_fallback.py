"""What a job restores when its rollback target is gone (issue 22, SPEC §13): the newest
surviving checkpoint of its own ancestry older than the target, else its base."""

from __future__ import annotations

from streams.client.restored import Restored
from streams.integrations.fallback import Ancestry, substitute
from streams.integrations.guard import nonfinite_metric


def ancestry(*ids_steps):
    a = Ancestry()
    for ck, step in ids_steps:
        a.wrote(ck, step)
    return a


def test_the_target_itself_when_it_is_there():
    a = ancestry(("A-10", 10), ("A-20", 20))
    got = substitute(Restored("A-20", 20), a, lambda c: None)
    assert got.restored == Restored("A-20", 20) and got.reason is None


def test_the_newest_older_survivor_when_the_target_is_gone():
    a = ancestry(("A-10", 10), ("A-20", 20), ("A-30", 30), ("A-40", 40))
    gone = {"A-30": "deleted", "A-20": "changed"}
    got = substitute(Restored("A-30", 30), a, gone.get)
    assert got.restored == Restored("A-10", 10)
    assert "A-30: deleted" in got.reason and "A-20: changed" in got.reason and "restored A-10" in got.reason


def test_the_base_when_nothing_older_survives():
    a = ancestry(("A-10", 10), ("A-20", 20))
    got = substitute(Restored("A-20", 20), a, lambda c: "deleted")
    assert got.restored == Restored(None, 0) and "base" in got.reason


def test_a_restart_is_never_substituted():
    assert substitute(Restored(None, 0, True), Ancestry(), lambda c: "x").reason is None
    assert substitute(Restored(None, 0), Ancestry(), lambda c: "x").reason is None


def test_the_ancestry_is_cut_by_a_restore():
    """After a rollback to A-10, the checkpoints written after it (A-20, A-30: possibly tainted)
    are no longer candidates; the new incarnation's are."""
    a = ancestry(("A-10", 10), ("A-20", 20), ("A-30", 30))
    a.restored("A-10")
    a.wrote("A-20-i1", 20)
    assert a.older_than("A-20-i1", 20) == ["A-10"]
    a.restored(None)  # back to the base
    assert a.ids == [] and a.older_than("A-20-i1", 20) == []


def test_a_target_outside_the_ancestry_falls_back_by_step():
    a = ancestry(("A-10", 10), ("A-20", 20), ("A-30", 30))
    assert a.older_than("A-25-elsewhere", 25) == ["A-20", "A-10"]


def test_any_non_finite_metric_is_named():
    assert nonfinite_metric(1.0, None, {"acc": 0.5, "done": True, "name": "x"}) is None
    assert nonfinite_metric(None, None, {"mean_accuracy": float("nan")})[0] == "mean_accuracy"
    assert nonfinite_metric(float("inf"), None, {})[0] == "loss"
    assert nonfinite_metric(1.0, float("nan"), {})[0] == "grad norm"


def test_the_store_says_why_a_checkpoint_cannot_be_restored(tmp_path):
    from streams.client.hashing import hash_directory, hash_file
    from streams.integrations.store import CheckpointStore

    store = CheckpointStore(tmp_path)
    (tmp_path / "A-10.pt").write_bytes(b"weights")
    (tmp_path / "A-20").mkdir()
    (tmp_path / "A-20" / "model.safetensors").write_bytes(b"w")
    h10, h20 = hash_file(tmp_path / "A-10.pt"), hash_directory(tmp_path / "A-20")
    assert store.unusable("A-10", h10) is None and store.unusable("A-20", h20) is None
    assert store.unusable("A-10", None) is None
    assert "deleted" in store.unusable("A-30", h10)
    (tmp_path / "A-10.pt").write_bytes(b"other")
    assert "changed" in store.unusable("A-10", h10)
