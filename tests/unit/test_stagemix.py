"""Workers of one app id run every stage or are route and fold workers, never both kinds
(streams.worker.stagemix): what the group members' partitions say."""

from __future__ import annotations

import pytest

from streams.kafka.topics import TopicNames
from streams.worker.stagemix import conflict

T = TopicNames.from_env("p.")
EV, BC = T.events, T.by_cohort


@pytest.mark.parametrize("stages, members, refused", [
    # nothing runs: any kind starts
    ("all", {}, None), ("route", {}, None), ("fold", {}, None),
    # all-stage workers run: another one may join, route and fold workers may not
    ("all", {"tt": [{EV, BC}, {EV, BC}]}, None),
    ("route", {"tt": [{EV, BC}]}, "route every event a second time"),
    ("fold", {"tt": [{EV, BC}]}, "share their group"),
    # route and fold workers run: more of them may join, an all-stage worker may not
    ("route", {"tt": [{BC}], "tt-route": [{EV}]}, None),
    ("fold", {"tt": [{BC}], "tt-route": [{EV}]}, None),
    ("all", {"tt": [], "tt-route": [{EV}]}, "route worker(s)"),
    ("all", {"tt": [{BC}], "tt-route": []}, "fold worker(s)"),
    # a member with nothing assigned (a rebalance under way) tells nothing
    ("all", {"tt": [set()]}, None), ("route", {"tt": [set()]}, None),
    # what the route group's stale offsets hold does not count: only members do
    ("all", {"tt-route": []}, None),
])
def test_a_worker_refuses_to_run_beside_the_other_kind(stages, members, refused):
    why = conflict(stages, "tt", T, members)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why
