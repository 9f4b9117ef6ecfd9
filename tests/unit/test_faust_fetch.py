"""Faust's own consumer fetches little when feeds read every input it subscribes to (issue 27).

Faust keeps the group and the assignment; the worker's feeds (streams.worker.feed) read the
partitions, and Faust's fetch of them is paused. Its fetcher still fetched and unpacked a
megabyte a partition at each assignment before the pause held, only for every record to be
skipped; with every input fed, its fetch size is small.
"""

from __future__ import annotations

import faust
import pytest

from streams.worker.faust_app import FAUST_FETCH_BYTES_FED, _faust_app
from streams.worker.settings import WorkerSettings

FAUST_DEFAULT = faust.App("defaults").conf.consumer_max_fetch_size


@pytest.mark.parametrize("stages, route_feed, fold_feed, fed", [
    ("all", "direct", "direct", True),
    ("route", "direct", "faust", True),  # a route worker's Faust consumer subscribes to the events only
    ("fold", "faust", "direct", True),
    ("all", "faust", "direct", False),  # the route stage takes its records from Faust's stream
    ("all", "direct", "faust", False),
    ("route", "faust", "direct", False),
    ("fold", "direct", "faust", False),
])
def test_faust_fetches_little_when_every_input_is_fed(tmp_path, stages, route_feed, fold_feed, fed):
    settings = WorkerSettings(bootstrap="k:9092", stages=stages, route_feed=route_feed, fold_feed=fold_feed,
                              data_dir=tmp_path, web_enabled=False)
    assert settings.all_fed is fed
    app = _faust_app(settings)
    assert app.conf.consumer_max_fetch_size == (FAUST_FETCH_BYTES_FED if fed else FAUST_DEFAULT)
    assert FAUST_FETCH_BYTES_FED < FAUST_DEFAULT
