"""check_pipeline first checks that the events topic holds what the test fed
(streams.testing.invariants.seq_differences): a produce that failed would otherwise show up as a
live-vs-offline difference blamed on the workers (CI stop 41 failed on one job's JobStarted,
missing from the live fold, with nothing to tell where it went)."""

from __future__ import annotations

from streams.testing.invariants import seq_differences


def test_the_same_seqs_in_the_same_order_agree() -> None:
    assert seq_differences({"a": [0, 1, 2], "b": [0]}, {"a": [0, 1, 2], "b": [0]}) == []


def test_an_identical_redelivery_counts_once() -> None:
    assert seq_differences({"a": [0, 1, 2, 1, 2]}, {"a": [0, 1, 1, 2]}) == []


def test_a_missing_first_event_is_named() -> None:
    (line,) = seq_differences({"j00016-002": [0, 1, 2], "j00016-004": [0, 1]},
                              {"j00016-002": [1, 2], "j00016-004": [0, 1]})
    assert line == "j00016-002: seqs [0] of the log not on the topic"


def test_extra_seqs_and_another_order_are_named() -> None:
    assert seq_differences({"a": [0, 1]}, {"a": [0, 1, 2], "b": [0]}) == [
        "a: seqs [2] on the topic not in the log", "b: seqs [0] on the topic not in the log"]
    assert seq_differences({"a": [0, 1, 2]}, {"a": [0, 2, 1]}) == ["a: in another order (topic [0, 2, 1], log [0, 1, 2])"]
