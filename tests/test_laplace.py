"""The diagonal Laplace start of the VI benchmarks: mode, scales and the change of variables."""

import math

import torch

import bdlkit
from bdlkit.bench.laplace_start import find_mode, laplace_start, standardized
from bdlkit.problems import Reference

F64 = torch.float64


def correlated(d: int = 4):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(d, d, generator=g, dtype=F64)
    prec = a @ a.T + torch.eye(d, dtype=F64)
    mean = 5 * torch.randn(d, generator=g, dtype=F64)
    draws = mean + torch.randn(1000, d, generator=g, dtype=F64) @ torch.linalg.cholesky(
        torch.linalg.inv(prec)).T

    def log_prob(x):
        z = x - mean
        return -0.5 * ((z @ prec) * z).sum(-1)

    return bdlkit.Target(log_prob, d, dtype=F64, reference=Reference(draws=draws)), mean, prec


def test_mode_and_scales_of_a_correlated_gaussian():
    target, mean, prec = correlated()
    assert torch.allclose(find_mode(target), mean, atol=1e-7)
    start = laplace_start(target)
    assert torch.allclose(start.shift, mean, atol=1e-7)
    assert torch.allclose(start.scale, prec.diagonal().rsqrt(), rtol=1e-6)  # mean-field stds
    assert "without positive curvature" not in start.message


def test_standardized_target_is_the_same_density_in_new_coordinates():
    target, mean, prec = correlated()
    start = laplace_start(target)
    z_target = standardized(target, start)
    z = torch.randn(7, 4, generator=torch.Generator().manual_seed(0), dtype=F64)
    theta = start.shift + start.scale * z
    # π_z(z) = π(θ) · Π s: the Jacobian keeps the normaliser (and so the ELBO) unchanged
    assert torch.allclose(z_target.log_prob(z),
                          target.log_prob(theta) + start.scale.log().sum(), atol=1e-10)
    assert torch.allclose(z_target.reference.draws, start.to_z(target.reference.draws))


def test_a_flat_direction_keeps_scale_one():
    # log π = -x0²/2 + 0·x1 (no curvature in x1): the mode search stays finite
    target = bdlkit.Target(lambda x: -0.5 * x[:, 0] ** 2 + 0 * x[:, 1], 2, dtype=F64)
    start = laplace_start(target)
    assert start.scale[1] == 1.0 and math.isclose(float(start.scale[0]), 1.0, rel_tol=1e-9)
    assert "1 coordinates without positive curvature" in start.message


def test_a_failing_or_useless_mode_search_falls_back_to_the_origin():
    def broken(x):
        raise RuntimeError("log density not differentiable here")

    start = laplace_start(bdlkit.Target(broken, 2, dtype=F64))
    assert start.message.startswith("fell back to N(0, I): RuntimeError")
    assert torch.equal(start.shift, torch.zeros(2, dtype=F64))
    assert torch.equal(start.scale, torch.ones(2, dtype=F64))
    # an unbounded density: L-BFGS runs off, the "mode" is not kept unless it is finite
    # and no worse than the origin
    unbounded = laplace_start(bdlkit.Target(lambda x: (x**2).sum(-1), 2, dtype=F64))
    assert bool(torch.isfinite(unbounded.shift).all() and torch.isfinite(unbounded.scale).all())
