"""Synthetic targets: normalisation, exact moments vs exact draws, analytic scores."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from bdlkit.data.synthetic import banana, funnel, gaussian, gaussian_mixture, make_target
from bdlkit.problems.target import Target

F64 = torch.float64


def moment_z(draws: torch.Tensor, mean: torch.Tensor, cov: torch.Tensor) -> tuple[float, float]:
    """Max |z| of the sample mean and sample covariance against exact values, with standard
    errors ``sqrt(diag cov / n)`` and ``std((x_i - m_i)(x_j - m_j)) / sqrt(n)``."""
    n = draws.shape[0]
    c = draws - mean
    z_mean = (c.mean(0) / (cov.diagonal() / n).sqrt()).abs().max().item()
    prods = c[:, :, None] * c[:, None, :]
    z_cov = ((prods.mean(0) - cov) / (prods.std(0) / math.sqrt(n))).abs().max().item()
    return z_mean, z_cov


def grid_integral(
    log_prob, lo: tuple[float, float], hi: tuple[float, float], m: int = 801
) -> float:
    """Riemann sum of ``exp(log_prob)`` on an ``m x m`` grid over a 2-D box (tails ~ 0)."""
    a = torch.linspace(lo[0], hi[0], m, dtype=F64)
    b = torch.linspace(lo[1], hi[1], m, dtype=F64)
    grid = torch.cartesian_prod(a, b)
    return (log_prob(grid).exp().sum() * (a[1] - a[0]) * (b[1] - b[0])).item()


def test_gaussian_moments_score_and_precision() -> None:
    t = gaussian(5, condition_number=100.0, mean=[1.0, -2.0, 0.0, 3.0, 0.5], seed=3)
    assert isinstance(t, Target) and t.dim == 5 and t.dtype == F64
    ref = t.reference
    eig = torch.linalg.eigvalsh(ref.cov)
    torch.testing.assert_close(eig, torch.logspace(0, 2, 5, dtype=F64))
    torch.testing.assert_close(t.precision @ ref.cov, torch.eye(5, dtype=F64))
    x = t.sample(7, torch.Generator().manual_seed(9))
    torch.testing.assert_close(t.score(x), -(x - ref.mean) @ t.precision)
    expected = stats.multivariate_normal(ref.mean.numpy(), ref.cov.numpy()).logpdf(x.numpy())
    torch.testing.assert_close(t.log_prob(x), torch.as_tensor(expected))
    # whitened exact draws have identity covariance
    z_mean, z_cov = moment_z(ref.draws, ref.mean, ref.cov)
    assert z_mean < 5 and z_cov < 5
    again = gaussian(5, 100.0, mean=ref.mean, seed=3)
    assert torch.equal(again.reference.draws, ref.draws)  # seeded
    assert not torch.equal(gaussian(5, 100.0, seed=4).reference.cov, ref.cov)


def test_gaussian_normalised_on_grid() -> None:
    t = gaussian(2, condition_number=10.0, seed=1)
    assert grid_integral(t.log_prob, (-20, -20), (20, 20)) == pytest.approx(1.0, abs=1e-6)


def test_mixture_moments_and_normalisation() -> None:
    t = gaussian_mixture(2, components=3, weights=[0.5, 0.3, 0.2], scales=[1.0, 0.7, 1.5])
    ref = t.reference
    assert grid_integral(t.log_prob, (-12, -12), (12, 12)) == pytest.approx(1.0, abs=1e-6)
    z_mean, z_cov = moment_z(ref.draws, ref.mean, ref.cov)
    assert z_mean < 5 and z_cov < 5
    # exact moments by brute-force quadrature
    a = torch.linspace(-12, 12, 801, dtype=F64)
    grid = torch.cartesian_prod(a, a)
    w = t.log_prob(grid).exp()
    w = w / w.sum()
    mean = w @ grid
    cov = ((grid - mean).T * w) @ (grid - mean)
    torch.testing.assert_close(mean, ref.mean, atol=1e-6, rtol=0)
    torch.testing.assert_close(cov, ref.cov, atol=1e-6, rtol=0)
    # 1-D, custom means
    t1 = gaussian_mixture(1, means=[[-2.0], [2.0]], scales=0.5)
    assert t1.reference.cov.item() == pytest.approx(0.25 + 4.0)


def test_funnel_exact_and_normalised() -> None:
    t = funnel(dim=10, scale=3.0)
    ref = t.reference
    assert ref.cov[0, 0].item() == 9.0 and ref.cov[1, 1].item() == pytest.approx(math.exp(4.5))
    d = ref.draws
    # x_i exp(-v/2) ~ N(0, 1) independently of v ~ N(0, 9)
    white = torch.cat([d[:, :1] / 3.0, d[:, 1:] * torch.exp(-d[:, :1] / 2)], dim=1)
    z_mean, z_cov = moment_z(white, torch.zeros(10, dtype=F64), torch.eye(10, dtype=F64))
    assert z_mean < 5 and z_cov < 5
    small = funnel(dim=4, scale=1.0)  # light enough tails for a direct moment check
    z_mean, z_cov = moment_z(small.reference.draws, small.reference.mean, small.reference.cov)
    assert z_mean < 5 and z_cov < 5
    # normalisation in 2-D, with x = exp(v/2) u so the grid follows the funnel's neck
    t2 = funnel(dim=2, scale=3.0)
    v = torch.linspace(-25, 25, 2001, dtype=F64)
    u = torch.linspace(-12, 12, 1201, dtype=F64)
    vv, uu = torch.meshgrid(v, u, indexing="ij")
    pts = torch.stack([vv.reshape(-1), (torch.exp(vv / 2) * uu).reshape(-1)], 1)
    dens = (t2.log_prob(pts) + vv.reshape(-1) / 2).exp()  # dx = exp(v/2) du
    assert (dens.sum() * (v[1] - v[0]) * (u[1] - u[0])).item() == pytest.approx(1.0, abs=1e-6)


def test_banana_exact_and_normalised() -> None:
    t = banana(dim=3, b=0.1, scale=10.0)
    ref = t.reference
    assert ref.cov[1, 1].item() == pytest.approx(1 + 0.01 * 2 * 1e4) and ref.cov[0, 1] == 0
    z_mean, z_cov = moment_z(ref.draws, ref.mean, ref.cov)
    assert z_mean < 5 and z_cov < 5
    small = banana(dim=2, b=0.1, scale=3.0)
    val = grid_integral(small.log_prob, (-21, -12), (21, 50), m=1201)
    assert val == pytest.approx(1.0, abs=1e-5)
    x = small.sample(5, torch.Generator().manual_seed(2))
    y2 = x[:, 1] - 0.1 * (x[:, 0] ** 2 - 9.0)
    expected = stats.norm.logpdf(x[:, 0].numpy(), 0, 3) + stats.norm.logpdf(y2.numpy())
    torch.testing.assert_close(small.log_prob(x), torch.as_tensor(expected))


def test_make_target_and_dtype() -> None:
    assert make_target("funnel", dim=5).dim == 5
    assert make_target("mixture", dim=3).dim == 3
    assert make_target("gaussian_mixture").dim == 2
    assert make_target("banana").name.startswith("banana")
    t = make_target("gaussian", dim=4, condition_number=10.0, dtype=torch.float32)
    assert t.reference.draws.dtype == torch.float32
    assert t.log_prob(t.init_params(torch.Generator().manual_seed(0), chains=3)).shape == (3,)
    with pytest.raises(ValueError, match="gaussian, gaussian_mixture, mixture, funnel, banana"):
        make_target("nope")
    with pytest.raises(ValueError):
        funnel(dim=1)


def test_block_rotated_gaussian_matches_its_dense_description():
    target = gaussian(12, 100.0, block_size=4, seed=3, num_draws=4)
    cov, prec = target.reference.cov, target.precision
    assert torch.allclose(cov @ prec, torch.eye(12, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(cov[:4, 4:], torch.zeros(4, 8, dtype=torch.float64))  # blocks
    eig = torch.linalg.eigvalsh(cov)
    assert torch.allclose(eig, torch.logspace(0, 2, 12, dtype=torch.float64))
    x = target.sample(5)
    diff = x - target.reference.mean
    dense = -0.5 * ((diff @ prec) * diff).sum(-1) - 0.5 * torch.logdet(2 * torch.pi * cov)
    assert torch.allclose(target.log_prob(x), dense, atol=1e-10)
    draws = target.sample(100_000, torch.Generator().manual_seed(1))
    var = cov.diagonal()
    se = ((var[:, None] * var[None, :] + cov**2) / len(draws)).sqrt()  # std error of each entry
    assert ((torch.cov(draws.T) - cov).abs() < 5 * se).all()
    with pytest.raises(ValueError, match="block_size must divide"):
        gaussian(10, block_size=3)
