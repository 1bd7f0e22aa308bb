"""Gaussian-mixture forecast metrics against closed forms, quadrature, Monte Carlo and naive
per-component loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate
from scipy.stats import norm

from bdlkit.metrics.forecasting import GaussianMixture, forecast_metrics

TAUS = (0.05, 0.25, 0.5, 0.75, 0.95)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_mixture(seed: int, S: int, shape: tuple[int, ...], spread: float = 2.0,
                   **kwargs) -> tuple[GaussianMixture, torch.Tensor]:
    """A random mixture with full-shape scales and targets drawn near it."""
    g = gen(seed)
    loc = spread * torch.randn((S, *shape), generator=g, dtype=torch.float64)
    scale = 0.1 + torch.rand((S, *shape), generator=g, dtype=torch.float64)
    y = loc.mean(0) + 2 * torch.randn(shape, generator=g, dtype=torch.float64)
    return GaussianMixture(loc, scale, **kwargs), y


def sample(mix: GaussianMixture, n: int, seed: int) -> torch.Tensor:
    """``n`` iid draws per element: ``(n, *E)``."""
    g = gen(seed)
    S = mix.num_components
    loc = mix.loc.reshape(S, -1)
    scale = mix.scale.expand_as(mix.loc).reshape(S, -1)
    k = torch.randint(S, (n, loc.shape[1]), generator=g)
    cols = torch.arange(loc.shape[1])
    eps = torch.randn((n, loc.shape[1]), generator=g, dtype=torch.float64)
    return (loc[k, cols] + scale[k, cols] * eps).reshape(n, *mix.element_shape)


def naive_cdf(loc: np.ndarray, scale: np.ndarray, x: float) -> float:
    return float(np.mean(norm.cdf((x - loc) / scale)))


# -- S = 1 is a Gaussian ---------------------------------------------------------------------


def test_single_component_is_gaussian():
    g = gen(0)
    loc = torch.randn(1, 40, generator=g, dtype=torch.float64)
    scale = 0.2 + torch.rand(1, 40, generator=g, dtype=torch.float64)
    y = 2 * torch.randn(40, generator=g, dtype=torch.float64)
    mix = GaussianMixture(loc, scale)
    normal = torch.distributions.Normal(loc[0], scale[0])
    torch.testing.assert_close(mix.log_prob(y), normal.log_prob(y), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mix.cdf(y), normal.cdf(y), rtol=1e-12, atol=1e-12)
    z = (y - loc[0]) / scale[0]
    phi = torch.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
    closed = scale[0] * (z * (2 * torch.special.ndtr(z) - 1) + 2 * phi - 1 / math.sqrt(math.pi))
    torch.testing.assert_close(mix.crps(y), closed, rtol=1e-12, atol=1e-12)
    for tau in TAUS:
        expected = loc[0] + scale[0] * float(norm.ppf(tau))
        torch.testing.assert_close(mix.quantile(tau), expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(mix.mean, loc[0])
    torch.testing.assert_close(mix.var, scale[0] ** 2)


# -- CRPS ------------------------------------------------------------------------------------

LOC3 = np.array([-2.0, 0.5, 3.0])
SCALE3 = np.array([0.5, 1.0, 0.3])
Y3 = (-4.0, -2.1, 0.0, 1.7, 3.05, 6.0)


def mixture3() -> GaussianMixture:
    loc = torch.tensor(LOC3).reshape(3, 1).expand(3, len(Y3)).clone()
    return GaussianMixture(loc, torch.tensor(SCALE3).reshape(3, 1))


def test_crps_matches_quadrature():
    crps = mixture3().crps(torch.tensor(Y3))
    lo = LOC3.min() - 40 * SCALE3.max()
    hi = LOC3.max() + 40 * SCALE3.max()
    for y, value in zip(Y3, crps.tolist()):
        def below(z):
            return naive_cdf(LOC3, SCALE3, z) ** 2

        def above(z):
            return (1 - naive_cdf(LOC3, SCALE3, z)) ** 2

        pts = [p for p in LOC3 if lo < p < y]
        left = integrate.quad(below, lo, y, points=pts or None, limit=200,
                              epsabs=1e-11, epsrel=1e-11)[0]
        pts = [p for p in LOC3 if y < p < hi]
        right = integrate.quad(above, y, hi, points=pts or None, limit=200,
                               epsabs=1e-11, epsrel=1e-11)[0]
        assert value == pytest.approx(left + right, abs=1e-6)


def test_crps_matches_monte_carlo_energy_score():
    mix = mixture3()
    n = 200_000
    x, x2 = sample(mix, n, seed=1), sample(mix, n, seed=2)
    y = torch.tensor(Y3)
    h = (x - y).abs() - 0.5 * (x - x2).abs()
    estimate, se = h.mean(0), h.std(0) / math.sqrt(n)
    assert ((mix.crps(y) - estimate).abs() < 3 * se).all()


def test_crps_pairwise_term_matches_naive_double_loop():
    mix, y = random_mixture(3, S=6, shape=(5,))
    loc, scale = mix.loc.numpy(), mix.scale.numpy()
    ref = []
    for j in range(5):
        def a(mu, var):
            sd = math.sqrt(var)
            return mu * (2 * norm.cdf(mu / sd) - 1) + 2 * sd * norm.pdf(mu / sd)

        e_xy = np.mean([a(float(y[j]) - loc[s, j], scale[s, j] ** 2) for s in range(6)])
        e_xx = np.mean([a(loc[s, j] - loc[t, j], scale[s, j] ** 2 + scale[t, j] ** 2)
                        for s in range(6) for t in range(6)])
        ref.append(e_xy - 0.5 * e_xx)
    np.testing.assert_allclose(mix.crps(y).numpy(), ref, rtol=1e-12)


# -- quantiles -------------------------------------------------------------------------------


def bimodal() -> GaussianMixture:
    """Two components far apart (|Δloc| up to 200 σ): Newton from the moment-matched
    quantile overshoots into the flat region between the modes."""
    sep = torch.tensor([4.0, 10.0, 30.0, 60.0, 100.0], dtype=torch.float64)
    loc = torch.stack([-sep / 2, sep / 2])
    scale = torch.tensor([[0.3, 0.5, 0.2, 0.5, 0.5], [1.0, 0.1, 0.5, 2.0, 0.25]],
                         dtype=torch.float64)
    return GaussianMixture(loc, scale)


@pytest.mark.parametrize("tau", TAUS)
@pytest.mark.parametrize("which", ["bimodal", "random32"])
def test_quantile_inverts_cdf(which, tau):
    mix = bimodal() if which == "bimodal" else random_mixture(4, S=32, shape=(6, 7))[0]
    q = mix.quantile(tau)
    assert (mix.cdf(q) - tau).abs().max() < 1e-6
    z = float(norm.ppf(tau))
    bracket = mix.loc + z * mix.scale
    assert (q >= bracket.min(0).values).all() and (q <= bracket.max(0).values).all()


def test_quantile_matches_brentq_and_interval():
    from scipy.optimize import brentq

    mix = bimodal()
    loc, scale = mix.loc.numpy(), mix.scale.numpy()
    for tau in (0.1, 0.9):
        q = mix.quantile(tau, tol=1e-12)
        for j in range(loc.shape[1]):
            ref = brentq(lambda x, j=j, tau=tau: naive_cdf(loc[:, j], scale[:, j], x) - tau,
                         -200, 200, xtol=1e-13)
            # the density can be tiny at the quantile: compare in probability, then in x
            assert naive_cdf(loc[:, j], scale[:, j], float(q[j])) == pytest.approx(tau,
                                                                                   abs=1e-10)
            assert float(q[j]) == pytest.approx(ref, abs=1e-4)
    lower, upper = mix.interval(0.8)
    torch.testing.assert_close(lower, mix.quantile(0.1))
    torch.testing.assert_close(upper, mix.quantile(0.9))
    assert (upper > lower).all()


# -- moments, densities, chunking, broadcasting ---------------------------------------------


def test_moments_and_log_prob_match_naive_loops():
    mix, y = random_mixture(5, S=7, shape=(4, 3))
    loc, scale, t = mix.loc.numpy(), mix.scale.numpy(), y.numpy()
    mean = sum(loc[s] for s in range(7)) / 7
    var = sum(scale[s] ** 2 + (loc[s] - mean) ** 2 for s in range(7)) / 7
    dens = sum(np.exp(-0.5 * ((t - loc[s]) / scale[s]) ** 2) / (scale[s] * math.sqrt(2 * math.pi))
               for s in range(7)) / 7
    np.testing.assert_allclose(mix.mean.numpy(), mean, rtol=1e-12)
    np.testing.assert_allclose(mix.var.numpy(), var, rtol=1e-12)
    np.testing.assert_allclose(mix.log_prob(y).numpy(), np.log(dens), rtol=1e-10, atol=1e-12)
    cdf = sum(norm.cdf((t - loc[s]) / scale[s]) for s in range(7)) / 7
    np.testing.assert_allclose(mix.cdf(y).numpy(), cdf, rtol=1e-12)


def test_log_prob_is_stable_far_in_the_tails():
    mix = GaussianMixture(torch.zeros(3, 2, dtype=torch.float64),
                          torch.tensor([[1.0], [2.0], [0.5]], dtype=torch.float64))
    lp = mix.log_prob(torch.tensor([60.0, -80.0], dtype=torch.float64))
    ref = [-0.5 * (v / 2) ** 2 - math.log(2) - 0.5 * math.log(2 * math.pi) - math.log(3)
           for v in (60.0, -80.0)]
    assert torch.isfinite(lp).all()
    np.testing.assert_allclose(lp.numpy(), ref, rtol=1e-9)


def all_outputs(mix: GaussianMixture, y: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"mean": mix.mean, "var": mix.var, "log_prob": mix.log_prob(y), "cdf": mix.cdf(y),
            "crps": mix.crps(y), "q10": mix.quantile(0.1), "q75": mix.quantile(0.75)}


@pytest.mark.parametrize("chunk", [1, 7, 50])
def test_chunking_gives_the_same_result(chunk):
    mix, y = random_mixture(6, S=5, shape=(3, 4, 2))
    small = GaussianMixture(mix.loc, mix.scale, chunk=chunk)
    ref, got = all_outputs(mix, y), all_outputs(small, y)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], rtol=1e-12, atol=1e-12, msg=key)


@pytest.mark.parametrize("scale_shape", [(4, 1, 3), (4, 3), (4, 5, 1), (4,)])
@pytest.mark.parametrize("chunk", [2**18, 6])
def test_broadcast_scale_equals_expanded(scale_shape, chunk):
    g = gen(7)
    loc = torch.randn(4, 5, 3, generator=g, dtype=torch.float64)
    scale = 0.2 + torch.rand(scale_shape, generator=g, dtype=torch.float64)
    full = scale.reshape(4, *([1] * (3 - len(scale_shape))), *scale_shape[1:]).expand(4, 5, 3)
    y = torch.randn(5, 3, generator=g, dtype=torch.float64)
    got = all_outputs(GaussianMixture(loc, scale, chunk=chunk), y)
    ref = all_outputs(GaussianMixture(loc, full.contiguous()), y)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], rtol=1e-12, atol=1e-12, msg=key)


def test_float32_inputs_are_computed_in_float64():
    mix, y = random_mixture(8, S=4, shape=(10,))
    mix32 = GaussianMixture(mix.loc.float(), mix.scale.float())
    assert mix32.crps(y).dtype == torch.float64
    torch.testing.assert_close(mix32.crps(y),
                               GaussianMixture(mix.loc.float().double(),
                                               mix.scale.float().double()).crps(y))


@pytest.mark.parametrize("loc, scale, match", [
    (torch.zeros(3, 4), torch.ones(2, 4), "leading number of components"),
    (torch.zeros(3, 4), torch.ones(3, 5), "does not broadcast"),
    (torch.zeros(3, 4), torch.ones(3, 2, 4), "does not broadcast"),
    (torch.zeros(3, 4), torch.tensor([[1.0], [0.0], [1.0]]), "finite and > 0"),
    (torch.zeros(3, 4), torch.full((3, 1), float("nan")), "finite and > 0"),
    (torch.zeros(()), torch.ones(()), r"\(S, \*E\)"),
    (torch.zeros(3, 4, dtype=torch.long), torch.ones(3, 1), "floating point"),
])
def test_invalid_mixtures_raise(loc, scale, match):
    with pytest.raises(ValueError, match=match):
        GaussianMixture(loc, scale)


def test_invalid_levels_and_shapes_raise():
    mix, y = random_mixture(9, S=2, shape=(3,))
    with pytest.raises(ValueError, match="tau must be in"):
        mix.quantile(1.0)
    with pytest.raises(ValueError, match="level must be in"):
        mix.interval(0.0)
    with pytest.raises(ValueError, match="element shape"):
        mix.crps(torch.zeros(4, dtype=torch.float64))


# -- forecast_metrics ------------------------------------------------------------------------


def forecast_problem(seed: int, n: int = 30, H: int = 6, C: int = 3, S: int = 8):
    g = gen(seed)
    loc = torch.randn(S, n, H, C, generator=g, dtype=torch.float64)
    scale = 0.3 + torch.rand(S, 1, 1, C, generator=g, dtype=torch.float64)
    mix = GaussianMixture(loc, scale)
    return mix, sample(mix, 1, seed + 100)[0]


def test_forecast_metrics_against_naive_numpy():
    mix, y = forecast_problem(10)
    out = forecast_metrics(mix, y)
    assert set(out) == {"mse", "mae", "nll", "nll_gaussian", "crps",
                        "coverage_50", "width_50", "coverage_90", "width_90"}
    loc, scale, t = mix.loc.numpy(), np.broadcast_to(mix.scale.numpy(), mix.loc.shape), y.numpy()
    n, H, C = t.shape
    se, ae, nllg = [], [], []
    for i in range(n):
        for h in range(H):
            for c in range(C):
                m = loc[:, i, h, c].mean()
                v = (scale[:, i, h, c] ** 2).mean() + ((loc[:, i, h, c] - m) ** 2).mean()
                se.append((m - t[i, h, c]) ** 2)
                ae.append(abs(m - t[i, h, c]))
                nllg.append(0.5 * math.log(2 * math.pi * v) + 0.5 * se[-1] / v)
    assert out["mse"] == pytest.approx(np.mean(se), rel=1e-12)
    assert out["mae"] == pytest.approx(np.mean(ae), rel=1e-12)
    assert out["nll_gaussian"] == pytest.approx(np.mean(nllg), rel=1e-12)
    assert out["nll"] == pytest.approx(-float(mix.log_prob(y).mean()), rel=1e-12)
    assert out["crps"] == pytest.approx(float(mix.crps(y).mean()), rel=1e-12)
    lower, upper = mix.interval(0.9)
    assert out["width_90"] == pytest.approx(float((upper - lower).mean()), rel=1e-12)
    assert 0 < out["width_50"] < out["width_90"]


def test_single_component_nll_equals_gaussian_nll():
    g = gen(11)
    mix = GaussianMixture(torch.randn(1, 20, 4, generator=g, dtype=torch.float64),
                          torch.full((1, 1, 4), 0.7, dtype=torch.float64))
    out = forecast_metrics(mix, torch.randn(20, 4, generator=g, dtype=torch.float64))
    assert out["nll"] == pytest.approx(out["nll_gaussian"], rel=1e-12)


def test_coverage_of_a_calibrated_mixture():
    mix, y = forecast_problem(12, n=400, H=8, C=5)
    levels = (0.5, 0.8, 0.9)
    out = forecast_metrics(mix, y, levels=levels)
    N = y.numel()
    for level in levels:
        sd = math.sqrt(level * (1 - level) / N)
        assert abs(out[f"coverage_{round(100 * level)}"] - level) < 3 * sd
    # a mixture centred 3 sd away covers far less
    shifted = GaussianMixture(mix.loc + 3 * mix.scale, mix.scale)
    assert forecast_metrics(shifted, y)["coverage_90"] < 0.5


def test_original_units():
    mix, y = forecast_problem(13)
    std = torch.tensor([0.5, 2.0, 10.0], dtype=torch.float64)
    out = forecast_metrics(mix, y, scale_units=std)
    err = (mix.mean - y).numpy()
    s = std.numpy()
    assert out["mse_original"] == pytest.approx(np.mean((err * s) ** 2), rel=1e-12)
    assert out["mae_original"] == pytest.approx(np.mean(np.abs(err) * s), rel=1e-12)
    # CRPS is positively homogeneous: the mixture rescaled to original units (any shift μ_c)
    mu = torch.tensor([1.0, -3.0, 100.0], dtype=torch.float64)
    orig = GaussianMixture(mix.loc * std + mu, mix.scale * std)
    assert out["crps_original"] == pytest.approx(float(orig.crps(y * std + mu).mean()), rel=1e-9)
    ones = forecast_metrics(mix, y, scale_units=torch.ones(3, dtype=torch.float64))
    for key in ("mse", "mae", "crps"):
        assert ones[f"{key}_original"] == pytest.approx(ones[key], rel=1e-12)
        assert out[key] == ones[key]
    assert "mse_original" not in forecast_metrics(mix, y)
    with pytest.raises(ValueError, match="one per channel"):
        forecast_metrics(mix, y, scale_units=torch.ones(4))
    with pytest.raises(ValueError, match="finite and > 0"):
        forecast_metrics(mix, y, scale_units=torch.tensor([1.0, 0.0, 1.0]))


def test_forecast_metrics_errors():
    mix, y = forecast_problem(14)
    with pytest.raises(ValueError, match="element shape"):
        forecast_metrics(mix, y[:-1])
    with pytest.raises(ValueError, match="element shape"):
        forecast_metrics(mix, y.reshape(-1))
    bad = y.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="y contains 1 NaN"):
        forecast_metrics(mix, bad)
    loc = mix.loc.clone()
    loc[2, 1, 1, 1] = float("nan")
    with pytest.raises(ValueError, match="loc contains 1 NaN"):
        forecast_metrics(GaussianMixture(loc, mix.scale), y)
    with pytest.raises(ValueError, match="whole percentages"):
        forecast_metrics(mix, y, levels=(0.955,))
    with pytest.raises(ValueError, match="level must be in"):
        forecast_metrics(mix, y, levels=(1.0,))
