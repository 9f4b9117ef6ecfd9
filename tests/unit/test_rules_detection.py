"""SPEC §5, detection: the onset of an incarnation's divergence.

Expected answers are computed by hand from the SPEC text; see each test's docstring.
"""

from __future__ import annotations

import pytest

from .core_builders import Cohort, analyze, iid, roots

NAN, INF = float("nan"), float("inf")


def losses(values, window=10, spike_factor=3.0, first_step=10):
    """Job A reports ``values`` as losses at steps 10, 20, ...; return the incidents' roots."""
    c = Cohort().start("A")
    for i, v in enumerate(values):
        c.progress("A", first_step + 10 * i, loss=v)
    return roots(analyze(c.events, window=window, spike_factor=spike_factor))


@pytest.mark.parametrize("loss,grad_norm", [(NAN, 1.0), (INF, 1.0), (-INF, 1.0), (1.0, NAN), (1.0, INF)])
def test_non_finite_loss_or_grad_norm_is_the_onset(loss, grad_norm):
    c = Cohort().start("A").progress("A", 100).progress("A", 200, loss=loss, grad_norm=grad_norm)
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 200, "INTERNAL")]
    assert out["incidents"][0]["incident_id"] == iid("A", 0, 200)


def test_null_grad_norm_is_not_a_divergence():
    c = Cohort().start("A").progress("A", 100, grad_norm=None)
    assert analyze(c.events)["incidents"] == []


def test_spike_just_over_even_count_median():
    """window 4: previous losses 1, 2, 3, 10 → median (2+3)/2 = 2.5, × 3 = 7.5; 7.6 > 7.5."""
    assert losses([1, 2, 3, 10, 7.6], window=4) == [("A", 0, 50, "INTERNAL")]


def test_spike_equal_to_threshold_is_not_a_spike():
    """7.5 is not strictly greater than 3 × 2.5 (a lower median 2 would flag it at 6)."""
    assert losses([1, 2, 3, 10, 7.5], window=4) == []


def test_spike_uses_median_not_mean():
    """mean of 1, 2, 3, 10 is 4 → 12 would not flag 8; the median 2.5 → 7.5 does."""
    assert losses([1, 2, 3, 10, 8.0], window=4) == [("A", 0, 50, "INTERNAL")]


def test_no_spike_check_before_window_losses_exist():
    """window 4: at step 40 only 3 losses precede → 100 is not checked (and joins the window);
    at step 50 the window is 1, 1, 1, 100 → median 1 → 100 > 3 is the onset."""
    assert losses([1, 1, 1, 100], window=4) == []
    assert losses([1, 1, 1, 100, 100], window=4) == [("A", 0, 50, "INTERNAL")]


def test_default_window_is_ten():
    """Config() defaults: 9 losses of 1.0 then 100 is not checked; 10 then 3.01 is a spike."""
    c = Cohort().start("A")
    for s in range(1, 10):
        c.progress("A", s)
    c.progress("A", 10, loss=100.0)
    assert analyze(c.events)["incidents"] == []
    c = Cohort().start("A")
    for s in range(1, 11):
        c.progress("A", s)
    c.progress("A", 11, loss=3.01)
    assert roots(analyze(c.events)) == [("A", 0, 11, "INTERNAL")]


def test_window_slides_over_the_previous_window_losses_only():
    """window 3: 10, 10, 10, 1, 1, 1 then 3.5: previous three are 1, 1, 1 → 3.5 > 3 (over all
    six the median would be 5.5 and 3.5 would pass). 1 at step 40: 1 ≤ 3 × 10."""
    assert losses([10, 10, 10, 1, 1, 1, 3.5], window=3) == [("A", 0, 70, "INTERNAL")]


def test_custom_factor_and_window():
    """window 2, factor 2: median(1, 3) = 2 → threshold 4: 4.0 passes, 4.5 is the onset."""
    assert losses([1, 3, 4.0], window=2, spike_factor=2.0) == []
    assert losses([1, 3, 4.5], window=2, spike_factor=2.0) == [("A", 0, 30, "INTERNAL")]
    assert losses([1, 3, 4.5], window=2, spike_factor=3.0) == []


def test_window_is_per_incarnation():
    """window 2: incarnation 0 reports 1, 1; incarnation 1 starts with no losses, so 10 is not
    checked there (it would be a spike against incarnation 0's window)."""
    c = Cohort().start("A").progress("A", 10).progress("A", 20).rollback("A").progress("A", 30, loss=10.0)
    assert analyze(c.events, window=2)["incidents"] == []


def test_onset_is_min_of_reported_and_detected_reported_lower():
    """NaN at 500 (detected) and a report of 450 → onset 450."""
    c = Cohort().start("A").progress("A", 400).progress("A", 500, loss=NAN).diverge("A", 450)
    out = analyze(c.events)
    assert roots(out) == [("A", 0, 450, "INTERNAL")]
    assert out["incidents"][0]["incident_id"] == iid("A", 0, 450)


def test_onset_is_min_of_reported_and_detected_detected_lower():
    c = Cohort().start("A").diverge("A", 550).progress("A", 500, loss=NAN)
    assert roots(analyze(c.events)) == [("A", 0, 500, "INTERNAL")]


def test_onset_is_min_of_several_reports():
    c = Cohort().start("A").diverge("A", 480).diverge("A", 460).diverge("A", 470)
    assert roots(analyze(c.events)) == [("A", 0, 460, "INTERNAL")]


def test_onset_is_the_first_flagged_progress():
    """Two NaNs: the first one (step 200) is the onset."""
    c = Cohort().start("A").progress("A", 100).progress("A", 200, loss=NAN).progress("A", 300, loss=NAN)
    assert roots(analyze(c.events)) == [("A", 0, 200, "INTERNAL")]


def test_progress_without_a_loss_feeds_no_spike_rule():
    """Schemas v8 (issue 22): a null loss is progress without a loss; it never spikes and takes no
    place in the window. Window 2, losses 1, -, 1, -, 2.9: median(1, 1) × 3 = 3 > 2.9, no spike;
    then 3.1 against median(1, 2.9) × 3 = 5.85: none; 100 after 1, -, 1, - is one."""
    assert losses([1, None, 1, None, 2.9], window=2) == []
    assert losses([1, None, 1, None, 2.9, None, 3.1], window=2) == []
    assert losses([1, None, 1, None, 100], window=2) == [("A", 0, 50, "INTERNAL")]
    assert losses([None] * 30, window=2) == []


def test_progress_without_a_loss_still_diverges_on_a_non_finite_grad_norm():
    c = Cohort().start("A").progress("A", 100, loss=None).progress("A", 200, loss=None, grad_norm=NAN)
    assert roots(analyze(c.events)) == [("A", 0, 200, "INTERNAL")]


def test_the_spike_rules_median_is_statistics_median():
    import random
    import statistics

    from streams.core.state import _median

    r = random.Random(1)
    for n in range(1, 30):
        for _ in range(40):
            xs = [r.choice([r.random(), r.randint(-5, 5) * 1.0, 1e308, -0.0, 0.1]) for _ in range(n)]
            assert _median(xs) == statistics.median(xs), xs
