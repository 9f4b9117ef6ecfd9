"""The worker's own offset bookkeeping (streams.worker.positions): what a batch taken around a
rebalance may hold, and what gets committed."""

from streams.worker.positions import InputPartitions, Arrival


def test_only_the_next_record_of_an_owned_partition_is_processed():
    inp = InputPartitions("events")
    inp.assign(0, 100)
    assert inp.classify(0, 100) is Arrival.PROCESS
    assert inp.classify(0, 99) is Arrival.SEEN  # a copy re-fetched after a rebalance
    assert inp.classify(0, 105) is Arrival.GAP  # 100..104 not seen
    assert inp.classify(1, 100) is Arrival.STALE  # not ours


def test_a_revoked_partition_is_stale_and_commits_nothing_more():
    inp = InputPartitions("events")
    inp.assign(0, 10)
    inp.advance(0, 10)
    inp.advance(0, 11)
    assert inp.to_commit() == {0: 12}
    inp.committed_at({0: 12})
    assert inp.to_commit() == {}
    inp.advance(0, 12)
    inp.revoke(0)
    assert inp.classify(0, 13) is Arrival.STALE
    assert inp.to_commit() == {}


def test_commit_restricted_to_partitions_and_never_backwards():
    inp = InputPartitions("t")
    inp.assign(0, 0)
    inp.assign(1, 50)
    inp.advance(0, 4)
    inp.advance(1, 60)
    inp.advance(1, 55)  # an older record processed late does not move the position back
    assert inp.to_commit({1}) == {1: 61}
    assert inp.to_commit() == {0: 5, 1: 61}


def test_reassignment_starts_from_the_group_offset():
    inp = InputPartitions("t")
    inp.assign(0, 0)
    inp.advance(0, 9)
    inp.revoke(0)
    inp.assign(0, 7)  # another worker committed less than we had: start where the group is
    assert inp.classify(0, 7) is Arrival.PROCESS and inp.to_commit() == {}
