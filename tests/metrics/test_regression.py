"""Regression metrics against naive per-element loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bdlkit.metrics import gaussian_nll, regression_metrics, rmse
from bdlkit.problems.likelihoods import Gaussian, GaussianPredictive


def ref(mean, var, y):
    m, v, t = (np.asarray(a, dtype=np.float64).reshape(-1) for a in (mean, var, y))
    se = [(m[i] - t[i]) ** 2 for i in range(len(m))]
    lp = [0.5 * math.log(2 * math.pi * v[i]) + 0.5 * se[i] / v[i] for i in range(len(m))]
    return math.sqrt(sum(se) / len(se)), sum(lp) / len(lp)


def random_pred(seed: int, shape):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(shape, generator=g, dtype=torch.float64)
    var = torch.rand(shape, generator=g, dtype=torch.float64) + 0.1
    y = mean + var.sqrt() * torch.randn(shape, generator=g, dtype=torch.float64)
    return mean, var, y


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(50,), (20, 3)])
def test_against_naive_loops(seed, shape):
    mean, var, y = random_pred(seed, shape)
    r, n = ref(mean, var, y)
    assert rmse(mean, y) == pytest.approx(r, rel=1e-12)
    assert gaussian_nll(mean, var, y) == pytest.approx(n, rel=1e-12)
    out = regression_metrics(GaussianPredictive(mean, var), y)
    assert {k: out[k] for k in ("rmse", "nll")} == pytest.approx({"rmse": r, "nll": n})


def test_matches_torch_gaussian_nll_and_likelihood():
    mean, var, y = random_pred(3, (40,))
    full = torch.nn.functional.gaussian_nll_loss(mean, y, var, full=True, eps=0.0)
    assert gaussian_nll(mean, var, y) == pytest.approx(float(full), rel=1e-12)
    lik = Gaussian(noise=0.7)
    pred = lik.predictive(mean[:, None], {})
    assert gaussian_nll(pred.mean, pred.var, y) == pytest.approx(
        float(-lik.log_prob(mean[:, None], y, {}).mean()), rel=1e-12
    )


def test_y_scale_converts_to_original_units():
    mean, var, y = random_pred(4, (30,))
    loc, scale = 5.0, 3.0
    base = regression_metrics(GaussianPredictive(mean, var), y, y_scale=scale)
    r, n = ref(loc + scale * mean, scale**2 * var, loc + scale * y)
    assert {k: base[k] for k in ("rmse", "nll")} == pytest.approx({"rmse": r, "nll": n},
                                                                  rel=1e-12)
    assert base["coverage_90"] == regression_metrics(GaussianPredictive(mean, var), y)[
        "coverage_90"]  # unit-free


def test_single_sample_and_perfect_mean():
    mean = torch.tensor([1.5])
    assert rmse(mean, torch.tensor([1.5])) == 0.0
    assert gaussian_nll(mean, torch.tensor([1.0]), torch.tensor([1.5])) == pytest.approx(
        0.5 * math.log(2 * math.pi)
    )


def test_column_vector_targets_are_reshaped_not_broadcast():
    mean, var, y = random_pred(5, (10,))
    assert rmse(mean, y[:, None]) == pytest.approx(rmse(mean, y))
    assert gaussian_nll(mean, var, y[:, None]) == pytest.approx(gaussian_nll(mean, var, y))


@pytest.mark.parametrize(
    "mean, var, y, match",
    [
        (torch.zeros(3), torch.ones(3), torch.zeros(4), "does not match"),
        (torch.zeros(3), torch.ones(2), torch.zeros(3), "does not match"),
        (torch.zeros(3), torch.tensor([1.0, 0.0, 1.0]), torch.zeros(3), "var must be > 0"),
        (torch.zeros(3), torch.ones(3), torch.tensor([0.0, float("nan"), 0.0]), "NaN"),
        (torch.zeros(0), torch.ones(0), torch.zeros(0), "non-empty"),
    ],
)
def test_validation(mean, var, y, match):
    with pytest.raises(ValueError, match=match):
        gaussian_nll(mean, var, y)
    with pytest.raises(ValueError, match="y_scale"):
        regression_metrics(GaussianPredictive(torch.zeros(2), torch.ones(2)), torch.zeros(2), 0.0)


def test_mae_and_coverage_against_loops():
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(200, generator=g, dtype=torch.float64)
    var = torch.rand(200, generator=g, dtype=torch.float64) + 0.1
    y = mean + var.sqrt() * torch.randn(200, generator=g, dtype=torch.float64)
    from scipy.stats import norm

    from bdlkit.metrics import coverage, mae

    assert mae(mean, y) == pytest.approx(np.mean([abs(a - b) for a, b in zip(mean.tolist(),
                                                                           y.tolist())]))
    for level in (0.5, 0.9, 0.95):
        z = norm.ppf((1 + level) / 2)
        inside = np.mean([abs(t - m) <= z * np.sqrt(v) for m, v, t in zip(mean.tolist(),
                                                                         var.tolist(),
                                                                         y.tolist())])
        assert coverage(mean, var, y, level) == pytest.approx(inside)
    with pytest.raises(ValueError, match="level"):
        coverage(mean, var, y, 1.0)


def test_regression_metrics_keys_units_and_mixture_nll():
    from bdlkit.problems.likelihoods import GaussianPredictive

    mean = torch.zeros(4, dtype=torch.float64)
    var = torch.ones(4, dtype=torch.float64)
    y = torch.tensor([0.0, 1.0, -1.0, 3.0], dtype=torch.float64)
    log_density = torch.full((4,), -2.0, dtype=torch.float64)
    out = regression_metrics(GaussianPredictive(mean, var), y, y_scale=2.0,
                             log_density=log_density)
    assert set(out) == {"rmse", "mae", "nll", "nll_mixture", "coverage_50", "coverage_90",
                        "coverage_95"}
    assert out["mae"] == pytest.approx(2.0 * 5 / 4)
    assert out["nll_mixture"] == pytest.approx(2.0 + np.log(2.0))
    assert out["coverage_95"] == 0.75
