"""Fixtures the unit tests of more than one file share."""

from __future__ import annotations

import pytest


@pytest.fixture
def ray_tune() -> None:
    """Skip where Ray Tune is not installed. A test file of Ray's integration takes it (``pytestmark
    = pytest.mark.usefixtures("ray_tune")``) and imports the integration inside its tests: Ray (and
    what it brings, numpy and pandas) is then imported when a test of the file runs, not when the
    file is collected, which cost every process of a unit run 2-3 s."""
    pytest.importorskip("ray.tune")
