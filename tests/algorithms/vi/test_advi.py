"""Mean-field ADVI: recovery of Gaussian targets, the mean-field optimum of correlated ones,
sticking the landing, unbiased gradients and checkpointable states."""

import pytest
import torch
from torch import nn
from vi_helpers import assert_restores, correlated_gaussian, diag_gaussian

import bdlkit
from bdlkit.algorithms.vi import advi
from bdlkit.engine.runner import Runner
from bdlkit.families.diag_gaussian import DiagGaussianParams

F64 = torch.float64


def exp_decay(lr0: float, lr1: float, steps: int):
    """``lr0 → lr1`` geometrically over ``steps`` (Robbins–Monro-like annealing for Adam)."""
    return lambda t: lr0 * (lr1 / lr0) ** (t / steps)


def fit(alg, steps, seed=0, data=None, batch_size=128):
    res = Runner(alg, data, seed=seed, batch_size=batch_size).fit(steps)
    return res, alg.approximation(res.state)


def test_recovers_a_diagonal_gaussian_with_stds_over_three_decades():
    std = torch.logspace(-2, 1, 10, dtype=F64)
    target, mean = diag_gaussian(std)
    steps = 2500
    # default init_std=1e-3: σ grows into every scale (starting above the smallest std
    # would make its ρ-gradient huge and Adam's second moment slow for ~1/(1-β₂) steps)
    alg = advi.build(target, lr=exp_decay(0.1, 1e-4, steps), num_samples=64)
    res, q = fit(alg, steps)
    assert ((q.mean - mean).abs() / std).max() < 0.03
    assert ((q.std - std).abs() / std).max() < 0.03
    assert torch.equal(alg.params(res.state), q.mean)
    assert res.sample(7).shape == (7, 10)
    assert {"log_prob", "elbo"} <= set(res.history[-1])


@pytest.mark.parametrize("stl", [False, True])
def test_correlated_gaussian_converges_to_the_mean_field_optimum(stl):
    """On N(m, Λ⁻¹) the mean-field optimum is μ = m, σ_i² = 1/Λ_ii (not the marginal var)."""
    target, mean, _, prec = correlated_gaussian(d=4)
    sd = prec.diagonal().rsqrt()
    assert (torch.linalg.inv(prec).diagonal().sqrt() / sd).max() > 1.2  # a real difference
    steps = 1500
    alg = advi.build(target, lr=exp_decay(0.05, 1e-4, steps), num_samples=32, init_std=1.0,
                     stl=stl)
    _, q = fit(alg, steps)
    assert ((q.mean - mean).abs() / sd).max() < 0.03
    assert ((q.std - sd).abs() / sd).max() < 0.03


def test_stl_has_zero_variance_at_the_optimum_of_a_target_in_the_family():
    """With q = π the STL residual ŝ_k + ε_k/σ is zero for every draw, so a *constant* lr
    converges to machine precision; the analytic-entropy estimator keeps jittering."""
    std = torch.logspace(-0.5, 0.5, 6, dtype=F64)
    target, mean = diag_gaussian(std)
    errors = {}
    for stl in (True, False):
        alg = advi.build(target, lr=0.05, num_samples=4, init_std=1.0, stl=stl)
        _, q = fit(alg, 1000)
        errors[stl] = max(((q.mean - mean).abs() / std).max(), ((q.std - std).abs() / std).max())
    assert errors[True] < 1e-8
    assert errors[False] > 1e-3


@pytest.mark.parametrize("stl", [False, True])
def test_gradient_estimator_is_unbiased(stl):
    """The average of many draws equals the analytic ELBO gradient on N(m, Λ⁻¹):
    ∇_μ = −Λ(μ − m),  ∇_ρ_i = 1 − Λ_ii σ_i²."""
    target, mean, _, prec = correlated_gaussian(d=4)
    alg = advi.build(target, stl=stl)
    lam = DiagGaussianParams(mu=mean + torch.tensor([0.5, -0.3, 0.2, 1.0], dtype=F64),
                             rho=torch.tensor([-0.5, 0.0, 0.3, -1.0], dtype=F64))
    sigma = lam.rho.exp()
    exact_mu = -prec @ (lam.mu - mean)
    exact_rho = 1.0 - prec.diagonal() * sigma**2
    g = torch.Generator().manual_seed(0)
    chunks = [alg.elbo_grad(lam, torch.randn(2000, 4, generator=g, dtype=F64), None)[0]
              for _ in range(50)]
    for est, exact in ((torch.stack([c.mu for c in chunks]), exact_mu),
                       (torch.stack([c.rho for c in chunks]), exact_rho)):
        se = est.std(0) / len(chunks) ** 0.5
        assert (se < 0.05).all()  # the check has power
        assert ((est.mean(0) - exact).abs() < 5 * se).all(), (est.mean(0), exact, se)


def test_stl_changes_only_the_entropy_term():
    """stl=True replaces the entropy gradient (0, 1) by (ε/σ, ε²), draw by draw."""
    target, *_ = correlated_gaussian(d=4)
    lam = DiagGaussianParams(mu=torch.zeros(4, dtype=F64), rho=torch.full((4,), -0.7, dtype=F64))
    eps = torch.randn(1, 4, generator=torch.Generator().manual_seed(3), dtype=F64)
    plain, _ = advi.build(target).elbo_grad(lam, eps, None)
    stl, _ = advi.build(target, stl=True).elbo_grad(lam, eps, None)
    sigma = lam.rho.exp()
    assert torch.allclose(stl.mu - plain.mu, eps[0] / sigma)
    assert torch.allclose(stl.rho - plain.rho, eps[0] ** 2 - 1)


def test_hand_chain_rule_matches_autograd_of_the_reparameterised_elbo_on_a_network():
    """Fixed ε: the element-wise gradient equals torch.func.grad of
    mean_k log π(μ + σ ε_k) + Σ ρ on a tiny MLP (dict parameters)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(10, 2, generator=g, dtype=F64)
    y = torch.randn(10, generator=g, dtype=F64)
    model = bdlkit.BayesianModel(net, likelihood=bdlkit.problems.Gaussian(noise=0.5),
                                 num_data=40)
    alg = advi.build(model)
    mu = model.init_params()
    rho = {k: -1.0 + 0.2 * torch.randn(v.shape, generator=g, dtype=F64) for k, v in mu.items()}
    eps = {k: torch.randn((3, *v.shape), generator=g, dtype=F64) for k, v in mu.items()}
    grad, _ = alg.elbo_grad(DiagGaussianParams(mu=mu, rho=rho), eps, (x, y))

    def elbo(mu, rho):
        values = [model.log_posterior({k: mu[k] + rho[k].exp() * eps[k][i] for k in mu}, (x, y))
                  for i in range(3)]
        return torch.stack(values).mean() + sum(r.sum() for r in rho.values())

    ref_mu, ref_rho = torch.func.grad(elbo, argnums=(0, 1))(mu, rho)
    for k in mu:
        assert torch.allclose(grad.mu[k], ref_mu[k], rtol=1e-10, atol=1e-12)
        assert torch.allclose(grad.rho[k], ref_rho[k], rtol=1e-10, atol=1e-12)


def test_blr_network_reaches_the_mean_field_optimum_of_the_exact_posterior(blr):
    model, data, mean, cov = blr
    sd = torch.linalg.inv(cov).diagonal().rsqrt()
    steps = 1000
    alg = advi.build(model, lr=exp_decay(0.05, 1e-4, steps), num_samples=2, init_std=0.1,
                     stl=True)
    res, q = fit(alg, steps, data=data, batch_size=100)
    assert ((q.mean["weight"].flatten() - mean).abs() / sd).max() < 0.05
    assert ((q.std["weight"].flatten() - sd).abs() / sd).max() < 0.08  # Monte Carlo: ~2 %
    assert res.sample(5)["weight"].shape == (5, 1, 3)


def test_state_round_trips_through_a_checkpoint_and_step_is_pure():
    target, *_ = correlated_gaussian(d=4)
    alg = advi.build(target, lr=0.01, num_samples=3)
    state = alg.init(generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        state, _ = alg.step(state, None)
    template = alg.init(generator=torch.Generator().manual_seed(5))
    restored, s1 = assert_restores(alg, state, template)
    assert restored.step == 3
    s3, _ = alg.step(state, None)  # same state in, same state out
    assert torch.equal(s1.lam.mu, s3.lam.mu) and torch.equal(s1.lam.rho, s3.lam.rho)


def test_init_accepts_a_point_or_full_variational_parameters():
    target, *_ = correlated_gaussian(d=4)
    alg = advi.build(target, init_std=0.5)
    gen = torch.Generator().manual_seed(0)
    point = torch.arange(4, dtype=F64)
    s = alg.init(point, generator=gen)
    assert torch.equal(s.lam.mu, point)
    assert torch.allclose(s.lam.rho.exp(), torch.full((4,), 0.5, dtype=F64))
    lam = DiagGaussianParams(mu=point, rho=torch.full((4,), -2.0, dtype=F64))
    s = alg.init(lam, generator=gen)
    assert torch.equal(s.lam.rho, lam.rho) and s.lam.mu is not point
    with pytest.raises(ValueError, match="one approximation"):
        alg.init(torch.zeros(2, 4, dtype=F64), generator=gen)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"lr": 0.0}, "lr"), ({"num_samples": 0}, "num_samples"), ({"init_std": -1.0}, "init_std"),
     ({"optimizer": "rmsprop"}, "optimizer"), ({"stl": "yes"}, "stl")],
)
def test_build_rejects_bad_hyperparameters(kwargs, match):
    target, *_ = correlated_gaussian(d=4)
    with pytest.raises(ValueError, match=match):
        advi.build(target, **kwargs)
