"""The unit run (``scripts/test -m "not integration"``) leaves the broker tests' directories
uncollected (tests/conftest.py): only for expressions that deselect every ``integration`` test."""

from __future__ import annotations

import pytest

from tests.conftest import excludes_integration


@pytest.mark.parametrize("expr,skips", [
    ("not integration", True),
    ("  not   integration ", True),
    ("not integration and not slow", True),
    ("not slow and not integration", True),
    ("", False),
    ("integration", False),
    ("not faults", False),
    ("not integration or faults", False),   # selects the fault tests: they must be collected
    ("not (integration)", False),            # not recognised: collected, then deselected as before
])
def test_which_mark_expressions_skip_the_broker_tests(expr, skips):
    assert excludes_integration(expr) is skips
