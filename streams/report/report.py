"""The report's names where they used to live (``streams.report.report``), kept so that imports
of this module keep working while they move to :mod:`streams.report`. Import from
:mod:`streams.report` instead; this module goes once nothing imports it."""

from streams.report import *  # noqa: F401,F403 - the same names, nothing of its own
from streams.report import __all__, lane_status  # noqa: F401

_lane_status = lane_status  # the name tests/unit/test_report.py imported
