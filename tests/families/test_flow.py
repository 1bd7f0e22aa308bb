"""The flow family: q₀ is the diagonal Gaussian, the density is normalised and its score is
its gradient, draws follow the generator, gradients reach every parameter."""

import math

import pytest
import torch

from bdlkit.core.serialization import state_from_tensors, state_to_tensors
from bdlkit.families.flow import FlowApproximation, FlowFamily

F64 = torch.float64


def _bent(family, seed=0, scale=0.3):
    """λ with every parameter non-zero: f is a real, curved spline flow."""
    gen = torch.Generator().manual_seed(seed)
    lam = family.init(torch.tensor([0.5, -1.0][: family.features], dtype=F64), 0.8, gen)
    return {k: v + scale * torch.randn(v.shape, generator=gen, dtype=F64)
            if k.startswith("flow.") else v for k, v in lam.items()}


def test_the_initial_flow_is_the_diagonal_gaussian():
    family = FlowFamily(3, dtype=F64)
    mean = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    lam = family.init(mean, 0.5, torch.Generator().manual_seed(0))
    theta = torch.randn(16, 3, dtype=F64, generator=torch.Generator().manual_seed(1))
    normal = torch.distributions.Normal(mean, 0.5)
    assert torch.allclose(family.log_prob(lam, theta), normal.log_prob(theta).sum(-1),
                          atol=1e-12)
    assert torch.allclose(family.score(lam, theta), -(theta - mean) / 0.25, atol=1e-12)


def test_a_bent_flow_is_a_normalised_density_whose_score_is_its_gradient():
    family = FlowFamily(2, transforms=2, bins=6, hidden=16, dtype=F64)
    lam = _bent(family)
    grid = torch.linspace(-12, 12, 601, dtype=F64)
    xx, yy = torch.meshgrid(grid, grid, indexing="ij")
    points = torch.stack([xx.reshape(-1), yy.reshape(-1)], -1)
    density = family.log_prob(lam, points).detach().exp()
    cell = (grid[1] - grid[0]) ** 2
    assert float(density.sum() * cell) == pytest.approx(1.0, abs=5e-3)
    theta = torch.randn(8, 2, dtype=F64, generator=torch.Generator().manual_seed(2))
    score = family.score(lam, theta)
    h = 1e-5
    for i in range(2):
        step = torch.zeros(2, dtype=F64)
        step[i] = h
        diff = (family.log_prob(lam, theta + step) - family.log_prob(lam, theta - step)) / (2 * h)
        assert torch.allclose(score[:, i], diff.detach(), atol=1e-6)
    draws = family.sample(lam, 20000, torch.Generator().manual_seed(3)).detach()
    grid_mean = (points * density[:, None]).sum(0) * cell
    se = draws.std(0) / math.sqrt(len(draws))
    assert torch.all((draws.mean(0) - grid_mean).abs() < 4 * se)


def test_draws_follow_the_generator_and_are_reparameterised():
    family = FlowFamily(2, dtype=F64)
    lam = {k: v.requires_grad_(True) for k, v in _bent(family).items()}
    a = family.sample(lam, 64, torch.Generator().manual_seed(5))
    b = family.sample(lam, 64, torch.Generator().manual_seed(5))
    c = family.sample(lam, 64, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    (a**2).sum().backward()  # E[θ²] by reparameterisation: every parameter gets a gradient
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in lam.values())


def test_the_score_can_be_differentiated_in_the_parameters():
    family = FlowFamily(2, dtype=F64)
    lam = {k: v.requires_grad_(True) for k, v in _bent(family).items()}
    theta = torch.randn(4, 2, dtype=F64)
    s = family.score(lam, theta, create_graph=True)
    (s**2).sum().backward()  # the score-matching loss's path
    assert lam["log_scale"].grad is not None and lam["log_scale"].grad.abs().sum() > 0


def test_parameters_round_trip_and_the_approximation_draws_without_a_graph():
    family = FlowFamily(2, dtype=F64)
    lam = _bent(family)
    back = state_from_tensors(family.init(torch.zeros(2, dtype=F64), 1.0,
                                          torch.Generator().manual_seed(9)),
                              state_to_tensors(lam))
    assert all(torch.equal(back[k], lam[k]) for k in lam)
    q = FlowApproximation(family, {k: v.requires_grad_(True) for k, v in lam.items()})
    draws = q.sample(10, torch.Generator().manual_seed(0))
    assert draws.shape == (10, 2) and not draws.requires_grad
    assert q.mean.shape == q.std.shape == (2,)


def test_one_coordinate_and_bad_options():
    family = FlowFamily(1, dtype=F64)
    lam = family.init(torch.zeros(1, dtype=F64), 2.0, torch.Generator().manual_seed(0))
    assert family.sample(lam, 5, torch.Generator().manual_seed(0)).shape == (5, 1)
    for bad, message in (({"features": 0}, "features must be an integer >= 1"),
                         ({"features": 2, "bins": 1}, "bins must be an integer >= 2"),
                         ({"features": 2, "transforms": 0}, "transforms must be")):
        with pytest.raises(ValueError, match=message):
            FlowFamily(**bad)
    with pytest.raises(ValueError, match="has 2 features but the point has 3"):
        FlowFamily(2).init(torch.zeros(3), 1.0, torch.Generator())
