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


def test_a_flow_on_the_leading_coordinates_times_a_gaussian_on_the_rest():
    """flowed = m < d: log q = log q_flow(θ[:m]) + log N(θ[m:]; loc, e^{2ℓ}), and the
    draws' trailing coordinates are that Gaussian."""
    part = FlowFamily(2, transforms=2, bins=6, hidden=16, dtype=F64)
    whole = FlowFamily(5, transforms=2, bins=6, hidden=16, dtype=F64, flowed=2)
    lam = _bent(part)
    loc, log_scale = torch.tensor([0.3, -0.7, 2.0], dtype=F64), torch.tensor([0.1, -0.5, 0.4],
                                                                             dtype=F64)
    joint = {**lam, "loc": torch.cat([lam["loc"], loc]),
             "log_scale": torch.cat([lam["log_scale"], log_scale])}
    theta = torch.randn(32, 5, dtype=F64, generator=torch.Generator().manual_seed(4))
    gaussian = torch.distributions.Normal(loc, log_scale.exp()).log_prob(theta[:, 2:]).sum(-1)
    expected = part.log_prob(lam, theta[:, :2]) + gaussian
    assert torch.allclose(whole.log_prob(joint, theta), expected, atol=1e-12)
    draws = whole.sample(joint, 20000, torch.Generator().manual_seed(6)).detach()
    se = log_scale.exp() / math.sqrt(len(draws))
    assert torch.all((draws[:, 2:].mean(0) - loc).abs() < 4 * se)
    assert torch.allclose(draws[:, 2:].std(0), log_scale.exp(), rtol=0.03)
    with pytest.raises(ValueError, match="the flow acts on 1 to 5 coordinates"):
        FlowFamily(5, flowed=0)


def test_the_spline_family_starts_gaussian_and_is_a_normalised_density():
    from bdlkit.families.spline import SplineFamily

    family = SplineFamily((1,), bins=6, dtype=F64)
    lam = family.init(torch.tensor([0.5], dtype=F64), 0.7, torch.Generator())
    theta = torch.randn(64, 1, dtype=F64, generator=torch.Generator().manual_seed(0))
    normal = torch.distributions.Normal(0.5, 0.7).log_prob(theta).sum(-1)
    assert torch.allclose(family.log_prob(lam, theta), normal, atol=1e-12)  # q₀ = N
    gen = torch.Generator().manual_seed(1)
    bent = {k: v + 0.5 * torch.randn(v.shape, generator=gen, dtype=F64)
            if k.startswith("spline.") else v for k, v in lam.items()}
    grid = torch.linspace(-12, 12, 48001, dtype=F64)[:, None]
    density = family.log_prob(bent, grid).exp()
    step = float(grid[1] - grid[0])
    assert float(density.sum() * step) == pytest.approx(1.0, abs=1e-4)
    assert float(density.max() / normal.exp().max()) != pytest.approx(1.0, abs=0.02)  # bent
    mean, std = family.moments(bent)
    grid_mean = float((grid[:, 0] * density).sum() * step)
    grid_std = float((((grid[:, 0] - grid_mean) ** 2 * density).sum() * step) ** 0.5)
    assert float(mean) == pytest.approx(grid_mean, abs=0.03)  # 4096 draws: se 0.011
    assert float(std) == pytest.approx(grid_std, rel=0.03)
    score = family.score(bent, theta)
    h = 1e-5
    diff = (family.log_prob(bent, theta + h) - family.log_prob(bent, theta - h)) / (2 * h)
    assert torch.allclose(score[:, 0], diff, atol=1e-6)


def test_the_spline_family_shares_one_spline_per_tensor():
    from bdlkit.families.spline import SplineFamily

    family = SplineFamily((3, 2), bins=4, dtype=F64)
    lam = family.init(torch.zeros(5, dtype=F64), 1.0, torch.Generator())
    assert lam["spline.widths"].shape == (2, 4) and lam["spline.derivatives"].shape == (2, 3)
    lam["spline.heights"] = torch.tensor([[4.0, 0, 0, -4.0], [0.0, 0, 0, 0]], dtype=F64)
    z = torch.linspace(-6, 6, 101, dtype=F64)[:, None].expand(101, 5)
    h = family._each(family._splines(lam), z, lambda spline, part: spline(part))
    assert torch.equal(h[:, 1], h[:, 0]) and torch.equal(h[:, 2], h[:, 0])  # one spline
    assert torch.allclose(h[:, 3:], z[:, 3:], atol=1e-12)  # the other tensor's: identity
    assert (h[:, 0] - z[:, 0]).abs().max() > 0.5 and bool((h[1:, 0] > h[:-1, 0]).all())
    draws = family.sample(lam, 50_000, torch.Generator().manual_seed(2))
    skew = ((draws - draws.mean(0)) ** 3).mean(0) / draws.std(0) ** 3
    assert bool((skew[:3] < -0.3).all()) and skew[3:].abs().max() < 0.05  # measured −0.5, 0.01
    with pytest.raises(ValueError, match="spline bins must be an integer >= 2"):
        SplineFamily((3,), bins=1)


def test_the_stable_spline_inverse_is_zukos_where_that_is_finite_and_finite_everywhere():
    from zuko.transforms import MonotonicRQSTransform

    from bdlkit.families.flow import stable_spline

    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(2000, k, generator=gen) * 3 for k in (8, 8, 7)]  # float32
    y = (torch.rand(2000, 200, generator=gen) * 12 - 6).T[..., None].expand(200, 2000, 1)[..., 0]
    ours = stable_spline()(*params).inv(y)
    theirs = MonotonicRQSTransform(*params).inv(y)
    finite = torch.isfinite(theirs)
    assert bool(torch.isfinite(ours).all())
    assert torch.allclose(ours[finite], theirs[finite], atol=1e-5)
    error = (stable_spline()(*params)(ours) - y).abs()
    assert float(error.quantile(0.99)) < 1e-4  # it is the inverse (steep bins: float32)
