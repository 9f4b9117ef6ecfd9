"""Only a loss is a loss (issue 22): what LineagePBT records as ``Progress.loss``."""

from __future__ import annotations

import pytest

from streams.integrations.errors import IntegrationError


pytestmark = pytest.mark.usefixtures("ray_tune")  # Ray imported by the tests (tests/unit/conftest.py)


def pbt(tmp_path, metric, mode, **kw):
    from streams.integrations.ray_tune import LineagePBT

    return LineagePBT(journal_dir=tmp_path, metric=metric, mode=mode, hyperparam_mutations={"lr": [0.1, 0.2]}, **kw)


def test_an_accuracy_pbt_maximises_is_no_loss(tmp_path):
    s = pbt(tmp_path, "mean_accuracy", "max")
    assert s.loss_key({"mean_accuracy": 0.5, "training_iteration": 1}) is None
    assert s.loss_key({"mean_accuracy": 0.5, "loss": 2.0}) == "loss"  # the trainable's own loss


def test_a_minimised_loss_is_a_loss_a_minimised_error_is_not(tmp_path):
    assert pbt(tmp_path, "mean_loss", "min").loss_key({"mean_loss": 1.0}) == "mean_loss"
    assert pbt(tmp_path, "error_rate", "min").loss_key({"error_rate": 1.0}) is None
    assert pbt(tmp_path, "val_loss", "max").loss_key({"val_loss": 1.0}) is None


def test_the_user_says_which(tmp_path):
    assert pbt(tmp_path, "score", "max", loss_metric="nll").loss_key({"nll": 1.0, "loss": 3.0}) == "nll"
    assert pbt(tmp_path, "score", "max", loss_metric="nll").loss_key({"loss": 3.0}) is None
    assert pbt(tmp_path, "loss", "min", loss_metric=False).loss_key({"loss": 3.0}) is None
    with pytest.raises(IntegrationError):
        pbt(tmp_path, "loss", "min", loss_metric=True)
