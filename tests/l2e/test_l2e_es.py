"""Antithetic ES and the outer Adam of L2E meta-training."""

import math

import pytest
import torch

from bdlkit.l2e import es

F64 = torch.float64


def _quadratic(dim=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(dim, dim, generator=g, dtype=F64)
    a = a @ a.T + torch.eye(dim, dtype=F64)
    b = torch.randn(dim, generator=g, dtype=F64)

    def loss(points):  # (n, dim) -> (n,)
        return 0.5 * ((points @ a) * points).sum(-1) + points @ b

    return loss, a, b


def test_es_gradient_on_a_quadratic_is_unbiased():
    """E[ĝ] = ∇L for a quadratic (the antithetic difference is exact): the mean of many
    estimates is within 4 standard errors of the true gradient, coordinate by coordinate."""
    loss, a, b = _quadratic()
    phi = torch.tensor([0.3, -1.0, 2.0, 0.5, -0.2], dtype=F64)
    true = a @ phi + b
    gen = torch.Generator().manual_seed(1)
    draws = torch.stack([es.estimate(loss, phi, 2, 0.05, gen)[0] for _ in range(4000)])
    se = draws.std(0) / math.sqrt(len(draws))
    err = (draws.mean(0) - true).abs()
    assert (err < 4 * se).all(), f"ES mean {draws.mean(0)} vs gradient {true} (se {se})"
    assert (se < 0.05 * true.norm()).all()  # the check has power


def test_es_estimate_is_the_mean_over_pairs_and_drops_non_finite_pairs():
    deltas = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=F64)
    losses = torch.tensor([3.0, 1.0, float("nan"), 0.0], dtype=F64)  # pair 2 diverged
    grad, dropped = es.es_gradient(losses, deltas, sigma=0.5)
    assert dropped == 1
    # ((3 - 1) * [1, 0] + 0 * [0, 2]) / 2 pairs / (2 * 0.25)
    torch.testing.assert_close(grad, torch.tensor([2.0, 0.0], dtype=F64))


def test_antithetic_points_interleave_the_pairs():
    phi = torch.zeros(3)
    d = torch.arange(6.0).reshape(2, 3)
    pts = es.antithetic_points(phi, d)
    torch.testing.assert_close(pts, torch.stack([d[0], -d[0], d[1], -d[1]]))


def test_adam_matches_torch_adam_without_eps_root():
    g = torch.Generator().manual_seed(0)
    phi = torch.randn(7, generator=g, dtype=F64)
    ref = phi.clone().requires_grad_(True)
    opt = torch.optim.Adam([ref], lr=0.01, eps=1e-8)
    adam = es.Adam(lr=0.01, eps_root=0.0)
    state = adam.init(phi)
    for _ in range(5):
        grad = torch.randn(7, generator=g, dtype=F64)
        phi, state = adam.update(phi, grad, state)
        ref.grad = grad.clone()
        opt.step()
    torch.testing.assert_close(phi, ref.detach(), rtol=1e-12, atol=1e-14)
    assert int(state["t"]) == 5


def test_reset_adam_reproduces_the_step_one_formula():
    """The released script's fresh Adam every step: −lr·ĝ/(sqrt(ĝ² + 1e-8) + 1e-8)."""
    adam = es.Adam(lr=0.01, reset_each_step=True)
    phi = torch.zeros(4, dtype=F64)
    state = adam.init(phi)
    grad = torch.tensor([1.0, -3e-5, 1e-6, 0.0], dtype=F64)
    for _ in range(3):  # the state never accumulates
        new, state = adam.update(phi, grad, state)
    want = -0.01 * grad / (torch.sqrt(grad**2 + 1e-8) + 1e-8)
    torch.testing.assert_close(new, want, rtol=1e-12, atol=0.0)
    assert new[0] == pytest.approx(-0.01, rel=1e-6)  # sign-SGD for |g| >> 1e-4


def test_clip_by_global_norm():
    g = torch.tensor([3.0, 4.0])
    torch.testing.assert_close(es.clip_by_global_norm(g, 1.0), torch.tensor([0.6, 0.8]))
    torch.testing.assert_close(es.clip_by_global_norm(g, 10.0), g)
