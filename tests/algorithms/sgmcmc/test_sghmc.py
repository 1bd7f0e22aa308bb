"""SGHMC's conventions: T = 0 is SGD with momentum, α = 1 is SGLD, the noise estimate."""

import pytest
import torch
from sampler_helpers import correlated_target, small_classifier

import bdlkit
from bdlkit.algorithms.sgmcmc import sghmc, sgld
from bdlkit.algorithms.sgmcmc.common import loss_gradient, noise_variance
from bdlkit.core.serialization import state_from_tensors, state_to_tensors
from bdlkit.core.tree import tree_leaves, tree_map


def test_temperature_zero_is_sgd_with_momentum():
    """The SGHMC step with T = 0 follows torch.optim.SGD(momentum=1-α) on the per-datum loss
    to float64 rounding, step after step (the T → 0 limit of the convention)."""
    model, (x, y) = small_classifier()
    lr, alpha = 0.05, 0.1
    params = model.init_params()
    torch_params = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    opt = torch.optim.SGD(torch_params.values(), lr=lr, momentum=1 - alpha)
    momentum = tree_map(torch.zeros_like, params)
    gen = torch.Generator().manual_seed(0)
    for t in range(30):
        batch = (x[t % 4 * 16:(t % 4 + 1) * 16], y[t % 4 * 16:(t % 4 + 1) * 16])
        _, score = model.value_and_score(params, batch)
        grad = loss_gradient(model, score)
        var = noise_variance(lr, alpha, 0.0, model.num_data)  # T = 0
        params, momentum = sghmc.momentum_step(params, momentum, grad, lr=lr, alpha=alpha,
                                               noise_var=var, generator=gen)
        opt.zero_grad()
        loss = -model.log_posterior(torch_params, batch) / model.num_data
        loss.backward()
        opt.step()
    for k in params:
        torch.testing.assert_close(params[k], torch_params[k].detach(), rtol=1e-12, atol=1e-13)


def test_noise_free_sghmc_step_is_sgd_with_momentum():
    """The sampler's own step with the noise off (T → 0; the exploration phase of cSGHMC)
    follows torch.optim.SGD(momentum=1-α) at a constant lr, step after step."""
    model, (x, y) = small_classifier()
    lr, alpha = 0.05, 0.1
    alg = sghmc.build(model, lr=lr, alpha=alpha)
    state = alg.init(model.init_params(), generator=torch.Generator().manual_seed(0))
    torch_params = {k: v.clone().requires_grad_(True) for k, v in model.init_params().items()}
    opt = torch.optim.SGD(torch_params.values(), lr=lr, momentum=1 - alpha)
    for t in range(30):
        batch = (x[t % 4 * 16:(t % 4 + 1) * 16], y[t % 4 * 16:(t % 4 + 1) * 16])
        state, info = alg.advance(state, batch, lr, noise=False)
        opt.zero_grad()
        (-model.log_posterior(torch_params, batch) / model.num_data).backward()
        opt.step()
        assert info["noise"] == 0.0
    for k, v in state.params.items():
        torch.testing.assert_close(v, torch_params[k].detach(), rtol=1e-12, atol=1e-13)


def test_alpha_one_is_sgld_draw_for_draw():
    target, _, _ = correlated_target()
    start = target.init_params(torch.Generator().manual_seed(0), 5)
    a = bdlkit.infer(target, "sghmc", steps=50, init=start, seed=4, lr=0.05, alpha=1.0,
                     burnin=0, thin=1)
    b = bdlkit.infer(target, "sgld", steps=50, init=start, seed=4, lr=0.05, burnin=0, thin=1)
    torch.testing.assert_close(a.samples, b.samples, rtol=0, atol=1e-12)
    state = sghmc.build(target, alpha=1.0).init(start, generator=torch.Generator())
    assert state.momentum is None  # no momentum memory when α = 1


def test_sgld_and_sghmc_use_the_problem_temperature():
    """Drift −lr·g with g = −T·ŝ/N (independent of T) and noise variance 2·lr·α·T/N."""
    for temperature in (1.0, 0.1):
        model, data = small_classifier(temperature)
        _, score = model.value_and_score(model.init_params(), data)
        untempered, _ = small_classifier(1.0)
        _, score1 = untempered.value_and_score(untempered.init_params(), data)
        for k, g in loss_gradient(model, score).items():
            torch.testing.assert_close(g, -score1[k] / 64)
    assert noise_variance(0.1, 0.5, 0.2, 10) == pytest.approx(2 * 0.1 * 0.5 * 0.2 / 10)


def test_noise_estimate_lowers_the_injected_noise():
    """With minibatch gradient noise V̂ > 0 the injected variance 2·lr·α·T/N − lr²·V̂ is
    smaller: with the same noise stream the chains move less than without the estimate."""
    model, data = small_classifier()
    spread = {}
    for estimate in (False, True):
        res = bdlkit.infer(model, "sghmc", data=data, batch_size=8, steps=300, seed=0,
                           lr=0.5, alpha=0.05, noise_estimate=estimate, noise_decay=0.9,
                           burnin=100, thin=1)
        spread[estimate] = sum(float(v.std(0).mean()) for v in res.samples.values())
        clipped = [h.get("noise_clipped") for h in res.history]
        assert all(c is None for c in clipped) if not estimate else all(
            0 <= c <= 1 for c in clipped)
    assert spread[True] < spread[False]


def test_state_round_trip_and_purity_with_noise_estimate():
    model, data = small_classifier()
    alg = sghmc.build(model, lr=0.01, noise_estimate=True)
    state = alg.init(generator=torch.Generator().manual_seed(0))
    batch = (data[0][:16], data[1][:16])
    for _ in range(3):
        state, _ = alg.step(state, batch)
    restored = state_from_tensors(alg.init(generator=torch.Generator()), state_to_tensors(state))
    a, _ = alg.step(state, batch)
    b, _ = alg.step(restored, batch)
    c, _ = alg.step(state, batch)
    for x, y, z in zip(tree_leaves(a), tree_leaves(b), tree_leaves(c), strict=True):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y) and torch.equal(x, z)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"lr": 0.0}, "lr must be > 0"), ({"alpha": 0.0}, "alpha"), ({"alpha": 1.5}, "alpha"),
    ({"noise_decay": 1.0}, "noise_decay"),
])
def test_bad_hyperparameters_are_named(kwargs, match):
    target, _, _ = correlated_target()
    with pytest.raises(ValueError, match=match):
        sghmc.build(target, **kwargs)
    if "lr" in kwargs:
        with pytest.raises(ValueError, match=match):
            sgld.build(target, **kwargs)
