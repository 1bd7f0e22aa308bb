"""Result.predict(return_samples=True), Result.intervals (the BMA mixture's central
interval) and Result.to_arviz."""

import math

import pytest
import torch
from torch import nn

import bdlkit


def classifier():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    return bdlkit.BayesianModel(net, "categorical", num_data=40)


def regression_result(num_draws: int = 6, noise: float = 0.5, seed: int = 0):
    """A Result of a linear Gaussian model whose draws are given: means x·w_s + b_s with
    spread comparable to the noise, so the mixture is visibly non-Gaussian."""
    g = torch.Generator().manual_seed(seed)
    model = bdlkit.BayesianModel(nn.Linear(2, 1).double(), bdlkit.problems.Gaussian(noise=noise),
                                 prior=1.0, num_data=10)
    draws = {"weight": 2 * torch.randn(num_draws, 1, 2, generator=g, dtype=torch.float64),
             "bias": torch.randn(num_draws, 1, generator=g, dtype=torch.float64)}
    res = bdlkit.Result(model, None, None, draws, [], {"method": "sgld", "kind": "sampler"})
    return res, draws


def test_classification_samples_are_per_draw_probabilities_averaging_to_the_bma():
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    res = bdlkit.infer(classifier(), "sgld", data=(x, y), steps=40, seed=1, batch_size=10)
    pred, samples = res.predict(x, return_samples=True, chunk_size=16)
    assert torch.equal(pred, res.predict(x, chunk_size=16))  # as without samples
    assert samples.probs.shape == (res.num_kept, 40, 3) and samples.mean is None
    assert samples.num_samples == res.num_kept
    assert torch.allclose(samples.probs.sum(-1), torch.ones(res.num_kept, 40), atol=1e-5)
    assert torch.allclose(samples.probs.mean(0), pred, atol=1e-6)
    first = next(iter(res.iter_draws()))
    assert torch.allclose(samples.probs[0], res.problem.predictive(first, x), atol=1e-6)


@pytest.mark.filterwarnings("ignore::UserWarning")  # a 5-step advi: σ has not moved
def test_vi_samples_use_num_samples_draws():
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    res = bdlkit.infer(classifier(), "advi", data=(x, y), steps=5, seed=0, batch_size=10)
    pred, samples = res.predict(x, num_samples=7, return_samples=True)
    assert samples.probs.shape == (7, 40, 3)
    assert torch.equal(pred, res.predict(x, num_samples=7))


def test_regression_samples_are_per_draw_means_and_stds():
    res, draws = regression_result()
    x = torch.randn(5, 2, dtype=torch.float64)
    pred, samples = res.predict(x, return_samples=True)
    plain = res.predict(x)
    assert torch.equal(pred.mean, plain.mean) and torch.equal(pred.var, plain.var)
    means = torch.stack([x @ draws["weight"][s].T + draws["bias"][s] for s in range(6)])[..., 0]
    assert samples.probs is None and samples.mean.shape == samples.std.shape == (6, 5)
    assert samples.mean.dtype == x.dtype
    assert torch.allclose(samples.mean, means, atol=1e-5)
    assert torch.allclose(samples.std, torch.full((6, 5), 0.5, dtype=x.dtype))
    total = samples.std.pow(2).mean(0) + samples.mean.var(0, correction=0)
    assert torch.allclose(pred.var, total, rtol=1e-5)


def test_one_draw_interval_is_the_gaussian_interval():
    res, _ = regression_result(num_draws=1, noise=0.7)
    x = torch.randn(8, 2, dtype=torch.float64)
    lower, upper = res.intervals(x, level=0.8)
    mean = res.predict(x).mean
    z = float(torch.special.ndtri(torch.tensor(0.9, dtype=torch.float64)))
    assert lower.shape == upper.shape == mean.shape == (8,)
    assert torch.allclose(lower, mean - z * 0.7, atol=1e-9)
    assert torch.allclose(upper, mean + z * 0.7, atol=1e-9)


def test_interval_matches_monte_carlo_quantiles_of_the_mixture():
    """Draw N values per input from the mixture (component s uniform, y ~ N(μ_s, σ_s²)) and
    compare the empirical quantiles: the standard error of the empirical τ-quantile is
    sqrt(τ(1 − τ)/N)/p(q), p the mixture density at q; allow 5 standard errors (one
    assertion per input and end, 20 in all: a false failure has probability ~1e-5)."""
    res, draws = regression_result(num_draws=6, noise=0.5)
    x = torch.randn(10, 2, dtype=torch.float64)
    level, n = 0.9, 400_000
    lower, upper = res.intervals(x, level=level, num_samples=6)
    _, samples = res.predict(x, return_samples=True)
    mu, sd = samples.mean, samples.std  # (S, 10)
    # the mixture is far from its moment-matched Gaussian here: the test has teeth
    pred = res.predict(x)
    z = float(torch.special.ndtri(torch.tensor(0.95, dtype=torch.float64)))
    assert (upper - (pred.mean + z * pred.var.sqrt())).abs().max() > 0.05
    g = torch.Generator().manual_seed(1)
    comp = torch.randint(0, 6, (n, 10), generator=g)
    y = mu.gather(0, comp) + sd.gather(0, comp) * torch.randn(n, 10, generator=g, dtype=mu.dtype)
    for tau, q in (((1 - level) / 2, lower), ((1 + level) / 2, upper)):
        empirical = torch.quantile(y, tau, dim=0)
        density = (torch.exp(-0.5 * ((q - mu) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))).mean(0)
        se = math.sqrt(tau * (1 - tau) / n) / density
        assert ((empirical - q).abs() < 5 * se).all(), (empirical - q) / se


def test_intervals_of_a_classifier_are_refused():
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    res = bdlkit.infer(classifier(), "map", data=(x, y), steps=3, batch_size=10)
    with pytest.raises(ValueError, match="intervals.*regression.*predict"):
        res.intervals(x)
    with pytest.raises(ValueError, match="level"):
        regression_result()[0].intervals(x[:, :2], level=1.5)
