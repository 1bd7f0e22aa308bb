"""bdlkit.algorithms.vi.laplace: the mode, the diagonal Laplace scales, the change of variables and the map back."""

import math

import torch

import bdlkit
from bdlkit.algorithms.vi.laplace import (
    find_mode,
    gaussian_to_theta,
    hessian_diagonal,
    laplace_start,
    standardized,
    state_to_theta,
)
from bdlkit.families.diag_gaussian import DiagGaussian, DiagGaussianParams
from bdlkit.families.full_gaussian import FullGaussian, FullGaussianParams
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
    assert "without positive curvature" not in start.message and not start.fallback


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
    assert start.message.startswith("fell back to N(0, I): RuntimeError") and start.fallback
    assert torch.equal(start.shift, torch.zeros(2, dtype=F64))
    assert torch.equal(start.scale, torch.ones(2, dtype=F64))
    # an unbounded density: L-BFGS runs off, the "mode" is not kept unless it is finite
    # and no worse than the origin
    unbounded = laplace_start(bdlkit.Target(lambda x: (x**2).sum(-1), 2, dtype=F64))
    assert bool(torch.isfinite(unbounded.shift).all() and torch.isfinite(unbounded.scale).all())


def test_hessian_diagonal_in_chunks_equals_the_full_hessian():
    target, _, _ = correlated(d=7)
    x = torch.randn(7, generator=torch.Generator().manual_seed(1), dtype=F64)

    def fn(t):
        return -target.log_prob(t) + (t**4).sum()  # not quadratic: the diagonal depends on x

    want = torch.func.hessian(fn)(x).diagonal()
    assert torch.allclose(hessian_diagonal(fn, x, chunk=3), want, atol=1e-10)


def test_gaussians_on_z_map_to_the_pushforward_on_theta():
    target, _, _ = correlated()
    start = laplace_start(target)
    g = torch.Generator().manual_seed(2)
    mu_z, rho_z = torch.randn(4, generator=g, dtype=F64), torch.randn(4, generator=g, dtype=F64)
    chol_z = torch.linalg.cholesky(torch.eye(4, dtype=F64) + 0.3)
    for lam, family in ((DiagGaussianParams(mu=mu_z, rho=rho_z), DiagGaussian),
                        (FullGaussianParams(mean=mu_z, chol=chol_z), FullGaussian)):
        z = family(lam).sample(5, torch.Generator().manual_seed(3))
        theta = family(gaussian_to_theta(lam, start)).sample(5, torch.Generator().manual_seed(3))
        assert torch.allclose(theta, start.shift + start.scale * z, atol=1e-10)
        # densities differ by the Jacobian: q_θ(θ) = q_z(z) / Π s_i
        log_q = family(gaussian_to_theta(lam, start)).log_prob(theta)
        assert torch.allclose(log_q, family(lam).log_prob(z) - start.scale.log().sum())


def test_state_to_theta_maps_the_gaussians_and_keeps_the_rest():
    target, _, _ = correlated()
    start = laplace_start(target)
    algo = bdlkit.algorithms.get_method("score_vi").build(target)
    state = algo.init(torch.zeros(4, dtype=F64), generator=torch.Generator().manual_seed(0))
    back = state_to_theta(state, start)
    for name in ("lam", "anchor"):
        assert torch.allclose(getattr(back, name).mu, start.shift)
        assert torch.allclose(getattr(back, name).rho, state.lam.rho + start.scale.log())
    assert back.opt_state is state.opt_state and back.step == state.step
