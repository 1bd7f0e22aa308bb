"""posteriordb targets: file reading, transforms, and the correctness of the log densities.

The key check: under the posterior, ``E[grad log p(theta)] = 0`` on the unconstrained
space. With the 10,000 (near-independent) reference draws mapped to R^d, the mean score
must be within a few standard errors of 0 for every coordinate; a wrong likelihood,
prior or a missing log-Jacobian shifts it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from bdlkit.data.posteriordb import (
    POSTERIORS,
    Block,
    Identity,
    Ordered,
    ParamLayout,
    Positive,
    UnitInterval,
    load_posterior,
    read_data,
)
from bdlkit.data.roots import DataNotFoundError

WITH_DRAWS = [p for p in POSTERIORS if not p.startswith("wells")]
F64 = torch.float64


@pytest.fixture(scope="module")
def targets() -> dict:
    try:
        return {p: load_posterior(p) for p in POSTERIORS}
    except DataNotFoundError as err:  # pragma: no cover - depends on the machine
        pytest.skip(f"posteriordb data not available: {err}")


def batched_score(fn, theta: torch.Tensor, chunk: int = 2000) -> torch.Tensor:
    """Row-wise gradient of ``fn: (n, d) -> (n,)``, in chunks to bound memory."""
    grad = torch.func.grad(lambda t: fn(t).sum())
    return torch.cat([grad(c) for c in theta.split(chunk)])


def score_z(scores: torch.Tensor) -> torch.Tensor:
    """``mean / (std / sqrt(n/2))`` per coordinate (n/2: a margin for autocorrelation)."""
    n = scores.shape[0]
    return scores.mean(0) / (scores.std(0) / math.sqrt(n / 2))


# ---------------------------------------------------------------- transforms


@pytest.mark.parametrize("transform", [Identity(), Positive(), UnitInterval(), Ordered()])
def test_transform_roundtrip_and_logdet(transform) -> None:
    x = torch.randn(7, 3, dtype=F64, generator=torch.Generator().manual_seed(1))
    y = transform.forward(x)
    torch.testing.assert_close(transform.inverse(y), x, rtol=1e-10, atol=1e-10)
    for i in range(x.shape[0]):  # log|det J| against autograd's Jacobian
        jac = torch.autograd.functional.jacobian(lambda r: transform.forward(r[None])[0], x[i])
        expected = torch.linalg.slogdet(jac).logabsdet
        torch.testing.assert_close(transform.log_abs_det_jacobian(x[i : i + 1])[0], expected)
    if isinstance(transform, Ordered):
        assert (torch.diff(y, dim=1) > 0).all()


def test_param_layout() -> None:
    layout = ParamLayout(
        [Block("mu", 2, Ordered()), Block("s", 1, Positive()), Block("b", 1, Identity(), True)]
    )
    assert layout.dim == 4 and layout.names == ["mu[1]", "mu[2]", "s", "b[1]"]
    theta = torch.randn(5, 4, dtype=F64)
    params, logdet = layout.forward(theta)
    torch.testing.assert_close(layout.inverse(params), theta)
    torch.testing.assert_close(logdet, theta[:, 1] + theta[:, 2])
    with pytest.raises(ValueError, match="shape"):
        layout.split(torch.zeros(5, 3))


# ---------------------------------------------------------------- loading


def test_names_and_errors(targets) -> None:
    assert len(POSTERIORS) == 7
    t = load_posterior("eight_schools")
    assert t.name == "eight_schools-eight_schools_noncentered"
    assert t.param_names == [f"theta[{j}]" for j in range(1, 9)] + ["mu", "tau"]
    assert load_posterior("wells").name == "wells_data-wells_dist"
    with pytest.raises(ValueError, match="eight_schools-eight_schools_noncentered"):
        load_posterior("no_such_posterior")
    with pytest.raises(DataNotFoundError, match="Paths tried"):
        load_posterior("kidiq", root="/nonexistent/root")
    dims = {p: (t.dim, len(t.param_names)) for p, t in targets.items()}
    assert dims["diamonds-diamonds"] == (26, 26) and dims["arK-arK"] == (7, 7)
    assert dims["low_dim_gauss_mix-low_dim_gauss_mix"] == (5, 5)


@pytest.mark.parametrize("name", WITH_DRAWS)
def test_roundtrip_and_reference_mean(targets, name) -> None:
    t = targets[name]
    draws = t.reference_draws
    assert draws.shape == (10_000, len(t.param_names)) and draws.dtype == F64
    unc = t.unconstrain(draws)
    assert unc.shape == (10_000, t.dim) and torch.isfinite(unc).all()
    torch.testing.assert_close(t.reference.draws, unc)
    back = t.constrain(unc)
    torch.testing.assert_close(back, draws, rtol=1e-10, atol=1e-10)
    # the mean file summarises the same draws
    np.testing.assert_allclose(draws.mean(0), t.reference_mean, rtol=1e-6, atol=1e-12)
    assert ((back.mean(0) - t.reference_mean).abs() < 0.01 * t.reference_mcse).all()


@pytest.mark.parametrize("name", WITH_DRAWS)
def test_log_prob_finite_on_reference_draws(targets, name) -> None:
    t = targets[name]
    lp = t.log_prob(t.reference.draws)
    assert lp.shape == (10_000,) and lp.dtype == F64 and torch.isfinite(lp).all()
    lp32 = t.log_prob(t.reference.draws[:100].float())
    assert lp32.dtype == torch.float32 and torch.isfinite(lp32).all()


# ---------------------------------------------------------------- E[score] = 0


@pytest.mark.parametrize("name", WITH_DRAWS)
def test_mean_score_is_zero_under_reference(targets, name) -> None:
    t = targets[name]
    scores = batched_score(t.log_prob, t.reference.draws)
    assert torch.isfinite(scores).all()
    z = score_z(scores)
    print(f"{name}: max |z| = {z.abs().max():.2f}")
    assert z.abs().max() < 5, f"{name}: mean score not 0, z = {z}"


def test_mean_score_check_has_power(targets) -> None:
    """Dropping the log-Jacobian (eight_schools: +1 on d/dlog tau) or moving the posterior
    by 0.2 sd (kidiq) must fail the zero-score check by a wide margin."""
    t = targets["eight_schools-eight_schools_noncentered"]
    z = score_z(batched_score(t.log_prob_without_jacobian, t.reference.draws))
    assert z.abs().max() > 20, z
    k = targets["kidiq-kidscore_momiq"]
    shift = 0.2 * k.reference.draws.std(0)
    z = score_z(batched_score(k.log_prob, k.reference.draws + shift))
    assert z.abs().max() > 10, z


# ---------------------------------------------------------------- analytic cross-checks


def _two_points(t, seed: int = 0) -> torch.Tensor:
    idx = torch.randint(0, 10_000, (2,), generator=torch.Generator().manual_seed(seed))
    return t.reference.draws[idx]


def _check(t, scipy_lp) -> None:
    """Absolute values (all constants kept) and differences between two draws agree."""
    pts = _two_points(t)
    ours = t.log_prob(pts).numpy()
    ref = np.array([scipy_lp(t.constrain(p[None])[0].numpy()) for p in pts])
    np.testing.assert_allclose(ours, ref, rtol=1e-10)
    np.testing.assert_allclose(ours[1] - ours[0], ref[1] - ref[0], rtol=1e-8, atol=1e-8)


def test_kidiq_matches_scipy(targets) -> None:
    d = read_data("kidiq")

    def lp(c):
        b1, b2, s = c
        mean = b1 + b2 * d["mom_iq"]
        loglik = stats.norm.logpdf(d["kid_score"], mean, s).sum()
        return stats.halfcauchy.logpdf(s, scale=2.5) + loglik + math.log(s)

    _check(targets["kidiq-kidscore_momiq"], lp)


def test_blr_matches_scipy(targets) -> None:
    d = read_data("sblrc")

    def lp(c):
        beta, s = c[:5], c[5]
        prior = stats.norm.logpdf(beta, 0, 10).sum() + stats.halfnorm.logpdf(s, scale=10)
        return prior + stats.norm.logpdf(d["y"], d["X"] @ beta, s).sum() + math.log(s)

    _check(targets["sblrc-blr"], lp)


def test_eight_schools_matches_scipy(targets) -> None:
    d = read_data("eight_schools")

    def lp(c):
        theta, mu, tau = c[:8], c[8], c[9]
        out = stats.norm.logpdf((theta - mu) / tau).sum() + stats.norm.logpdf(mu, 0, 5)
        out += (
            stats.halfcauchy.logpdf(tau, scale=5)
            + stats.norm.logpdf(d["y"], theta, d["sigma"]).sum()
        )
        return out + math.log(tau)  # log tau from tau = exp(x); theta_trans is unconstrained

    _check(targets["eight_schools-eight_schools_noncentered"], lp)


def test_ark_matches_scipy_loop(targets) -> None:
    d = read_data("arK")
    y, K = d["y"], int(d["K"])

    def lp(c):
        alpha, beta, s = c[0], c[1 : K + 1], c[K + 1]
        out = stats.norm.logpdf(alpha, 0, 10) + stats.norm.logpdf(beta, 0, 10).sum()
        out += stats.halfcauchy.logpdf(s, scale=2.5) + math.log(s)
        for t in range(K, len(y)):  # the Stan loop, literally
            out += stats.norm.logpdf(y[t], alpha + sum(beta[k] * y[t - k - 1] for k in range(K)), s)
        return out

    _check(targets["arK-arK"], lp)


def test_gauss_mix_matches_scipy(targets) -> None:
    y = read_data("low_dim_gauss_mix")["y"]

    def lp(c):
        mu, s, w = c[:2], c[2:4], c[4]
        out = (
            stats.norm.logpdf(mu, 0, 2).sum()
            + math.log(2)
            + stats.halfnorm.logpdf(s, scale=2).sum()
        )
        out += stats.beta.logpdf(w, 5, 5)
        comps = [
            np.log(w) + stats.norm.logpdf(y, mu[0], s[0]),
            np.log1p(-w) + stats.norm.logpdf(y, mu[1], s[1]),
        ]
        out += special.logsumexp(np.stack(comps), axis=0).sum()
        return out + math.log(mu[1] - mu[0]) + np.log(s).sum() + np.log(w) + np.log1p(-w)

    _check(targets["low_dim_gauss_mix-low_dim_gauss_mix"], lp)


def test_diamonds_sufficient_statistics_match_direct_likelihood(targets) -> None:
    t = targets["diamonds-diamonds"]
    pts = torch.cat([_two_points(t), torch.zeros(1, t.dim, dtype=F64)])
    m = t.model
    p, _ = m.layout.forward(pts)
    sigma = p["sigma"][:, 0]
    fast = -0.5 * m.sum_of_squares(p["b"], p["Intercept"][:, 0]) / sigma**2
    fast = fast - m.N * (torch.log(sigma) + 0.5 * math.log(2 * math.pi))
    torch.testing.assert_close(fast, m.log_likelihood_direct(pts), rtol=1e-10, atol=1e-8)
    c = t.constrain(pts[:1])[0].numpy()
    prior = stats.norm.logpdf(c[:24]).sum() + stats.t.logpdf(c[24], 3, 8, 10)
    prior += stats.t.logpdf(c[25], 3, 0, 10) - stats.t.logsf(0, 3, 0, 10) + math.log(c[25])
    expected = prior + m.log_likelihood_direct(pts[:1])[0].item()
    np.testing.assert_allclose(t.log_prob(pts[:1])[0].item(), expected, rtol=1e-10)


def test_wells_finite_and_matches_scipy(targets) -> None:
    t = targets["wells_data-wells_dist"]
    assert t.reference_draws is None and t.reference_mean is None and t.reference.draws is None
    zero = torch.zeros(1, 2, dtype=F64)
    value, score = t.value_and_score(zero)
    assert torch.isfinite(value) and torch.isfinite(score).all()
    d = read_data("wells_data")
    beta = np.array([0.3, -0.005])
    expected = stats.bernoulli.logpmf(d["switched"], special.expit(beta[0] + beta[1] * d["dist"]))
    np.testing.assert_allclose(t.log_prob(torch.tensor(beta)).item(), expected.sum(), rtol=1e-10)
