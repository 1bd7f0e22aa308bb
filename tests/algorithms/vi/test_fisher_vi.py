"""Reparameterised Fisher-divergence VI: exact recovery of a Gaussian target, a gradient that
matches finite differences through a network, honest failure on divergence, checkpoints."""

import pytest
import torch
from torch import nn
from vi_helpers import assert_restores, diag_gaussian

import bdlkit
from bdlkit.algorithms.vi import fisher_vi
from bdlkit.core.tree import all_finite, tree_map
from bdlkit.engine.runner import NonFiniteError, Runner
from bdlkit.families.diag_gaussian import DiagGaussianParams

F64 = torch.float64


def tiny_mlp_problem(num_data: int = 20):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1)).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(num_data, 2, generator=g, dtype=F64)
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(num_data, generator=g, dtype=F64)
    model = bdlkit.BayesianModel(net, likelihood=bdlkit.problems.Gaussian(noise=0.5), prior=1.0,
                                 num_data=num_data)
    return model, (x, y)


def test_recovers_a_diagonal_gaussian_target_exactly():
    """Gaussian family, Gaussian target: the residual ε/σ + s(θ) is zero for every ε at q = π,
    so the optimum is exact and a constant lr converges to machine precision."""
    std = torch.logspace(-0.5, 0.5, 6, dtype=F64)
    target, mean = diag_gaussian(std)
    alg = fisher_vi.build(target, lr=0.05, num_samples=4, init_std=1.0, schedule="constant",
                          average=0.0)
    res = Runner(alg, None, seed=0).fit(600)
    q = alg.approximation(res.state)
    assert ((q.mean - mean).abs() / std).max() < 1e-8
    assert ((q.std - std).abs() / std).max() < 1e-8
    assert res.history[-1]["loss"] < 1e-20
    assert res.sample(3).shape == (3, 6)


def test_network_step_runs_and_gradient_matches_finite_differences():
    model, data = tiny_mlp_problem()
    alg = fisher_vi.build(model, lr=1e-2, num_samples=2, init_std=0.1)
    res = Runner(alg, data, seed=0, batch_size=8).fit(2)  # minibatches of 8 of N = 20
    assert res.state.step == 2 and all_finite(res.state.lam)
    assert set(res.history[-1]) >= {"log_prob", "loss"}

    gen = torch.Generator().manual_seed(0)
    lam = res.state.lam
    lam = DiagGaussianParams(mu=lam.mu, rho=tree_map(lambda r: r + 0.3 * torch.randn(
        r.shape, generator=gen, dtype=F64), lam.rho))  # σ differing per coordinate
    eps = tree_map(lambda m: torch.randn((2, *m.shape), generator=gen, dtype=F64), lam.mu)
    batch = (data[0][:8], data[1][:8])
    loss, grads, _ = alg.loss_and_grad(lam, eps, batch)
    assert torch.allclose(loss, alg.loss(lam, eps, batch))
    h = 1e-6
    checked = 0
    for part in ("mu", "rho"):
        for name, leaf in getattr(lam, part).items():
            for i in range(0, leaf.numel(), 3):
                def shifted(delta, part=part, name=name, i=i):
                    tree = {k: v.clone() for k, v in getattr(lam, part).items()}
                    tree[name].view(-1)[i] += delta
                    other = lam.rho if part == "mu" else lam.mu
                    new = DiagGaussianParams(mu=tree, rho=other) if part == "mu" else \
                        DiagGaussianParams(mu=other, rho=tree)
                    return alg.loss(new, eps, batch)

                fd = (shifted(h) - shifted(-h)) / (2 * h)
                analytic = getattr(grads, part)[name].view(-1)[i]
                assert torch.allclose(analytic, fd, rtol=1e-5, atol=1e-9), (part, name, i)
                checked += 1
    assert checked >= 10


@pytest.mark.parametrize("optimizer, lr", [("adam", 1e8), ("sgd", 1e6)])
def test_divergence_raises_non_finite_error_naming_the_method(optimizer, lr):
    target, _ = diag_gaussian(torch.ones(3, dtype=F64))
    alg = fisher_vi.build(target, lr=lr, optimizer=optimizer, momentum=0.0, init_std=1.0)
    with pytest.raises(NonFiniteError, match="fisher_vi diverged at step"):
        Runner(alg, None, seed=0).fit(50)


def test_divergence_on_a_network_is_reported_not_a_torch_traceback():
    model, data = tiny_mlp_problem()
    alg = fisher_vi.build(model, lr=1e8, init_std=0.1)
    with pytest.raises(NonFiniteError, match="fisher_vi"):
        Runner(alg, data, seed=0, batch_size=20).fit(20)


def test_state_round_trips_through_a_checkpoint():
    model, data = tiny_mlp_problem()
    alg = fisher_vi.build(model, lr=1e-2, num_samples=2)
    batch = (data[0][:5], data[1][:5])
    state = alg.init(generator=torch.Generator().manual_seed(0))
    state, _ = alg.step(state, batch)
    template = alg.init(generator=torch.Generator().manual_seed(9))
    restored, _ = assert_restores(alg, state, template, batch)
    assert restored.step == 1


def test_rejects_a_problem_without_a_differentiable_log_density():
    class Opaque:
        num_data, temperature = 1, 1.0

        def value_and_score(self, params, batch):
            raise NotImplementedError

    with pytest.raises(TypeError, match="differentiable log density"):
        fisher_vi.build(Opaque())


def test_building_it_on_a_network_warns_before_the_run_and_on_a_target_does_not():
    import warnings

    from bdlkit.core.errors import DefaultsWarning

    with pytest.warns(DefaultsWarning, match="constant predictor"):
        fisher_vi.build(tiny_mlp_problem()[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DefaultsWarning)
        fisher_vi.build(diag_gaussian(torch.ones(2, dtype=F64))[0])
