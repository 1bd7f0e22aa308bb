"""The ``l2e`` sampler: its SGHMC limit, chain stacks, options and bad input."""

import pytest
import torch
from sampler_helpers import correlated_target, small_classifier
from torch import nn

import bdlkit
from bdlkit.algorithms.sgmcmc import l2e, sghmc
from bdlkit.core.serialization import CorruptFileError
from bdlkit.l2e import Constants, Pretrained, init_meta_params, save_meta_params


@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_identity_kinetic_is_sghmc(temperature):
    """α = 0, β = r, paper noise, grad_scale = N: SGHMC with lr = ε²N and friction εC, the
    same draws of noise, step after step (float64 rounding)."""
    model, (x, y) = small_classifier(temperature)
    eps, c, n = 0.02, 0.5, model.num_data
    ref = sghmc.build(model, lr=eps**2 * n, alpha=eps * c)
    alg = l2e.build(model, kinetic="identity", eps=eps, grad_scale=float(n), friction=c,
                    noise_mode="paper")
    s_ref = ref.init(generator=torch.Generator().manual_seed(5))
    s = alg.init(generator=torch.Generator().manual_seed(5))
    for t in range(25):
        batch = (x[t % 4 * 16:(t % 4 + 1) * 16], y[t % 4 * 16:(t % 4 + 1) * 16])
        s_ref, _ = ref.step(s_ref, batch)
        s, _ = alg.step(s, batch)
    for k in s.params:
        torch.testing.assert_close(s.params[k], s_ref.params[k], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(eps * s.momentum[k], s_ref.momentum[k], rtol=1e-9,
                                   atol=1e-12)
    moved = max((s.params[k] - model.init_params()[k]).abs().max().item() for k in s.params)
    assert moved > 1e-3  # the comparison is not between two frozen chains


def _pretrained(seed=0, **constants):
    meta = {k: v.double() for k, v in init_meta_params(torch.Generator().manual_seed(seed)).items()}
    return Pretrained(meta, Constants(**constants))


def test_chain_stack_of_a_target_is_normalised_per_chain():
    """Chains stacked as (c, d) on a Target evolve exactly as each chain alone (noise off,
    so the chains see the same update): the features are normalised per chain."""
    target, _, _ = correlated_target(3)
    pre = _pretrained(precond_mult=1.0, eps=0.01, grad_scale=1.0)
    alg = l2e.build(target, meta_params=pre, noise_mult=0.0)
    start = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def run(init):
        state = alg.init(init, generator=torch.Generator().manual_seed(1))
        for _ in range(10):
            state, _ = alg.step(state, None)
        return state.params

    stacked = run(start)
    torch.testing.assert_close(stacked, torch.stack([run(start[i]) for i in range(4)]),
                               rtol=1e-10, atol=1e-12)
    assert (stacked - start).abs().max() > 1e-4


def test_constants_come_from_the_meta_parameter_file(tmp_path):
    model, _ = small_classifier()
    path = save_meta_params(tmp_path / "m.safetensors",
                            init_meta_params(torch.Generator().manual_seed(0)),
                            Constants(eps=0.004, precond_mult=0.7), {"seed": 3})
    alg = l2e.build(model, meta_params=str(path))
    assert alg.constants.eps == 0.004 and alg.constants.precond_mult == 0.7
    alg = l2e.build(model, meta_params=str(path), eps=0.001, noise_mode="paper")
    assert alg.constants.eps == 0.001 and alg.constants.noise_mode == "paper"
    assert alg.constants.precond_mult == 0.7


def test_bad_meta_parameter_files_fail_clearly(tmp_path):
    model, _ = small_classifier()
    with pytest.raises(FileNotFoundError, match="meta-train l2e"):
        l2e.build(model, meta_params=str(tmp_path / "missing.safetensors"))
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(CorruptFileError):
        l2e.build(model, meta_params=str(junk))
    with pytest.raises(ValueError, match="kinetic"):
        l2e.build(model, kinetic="quadratic")
    with pytest.raises(ValueError, match="noise_mode"):
        l2e.build(model, kinetic="identity", noise_mode="loud")


def test_shipped_meta_parameters_load():
    pre = bdlkit.l2e.load_pretrained()
    assert sum(v.numel() for v in pre.meta.values()) == 1442
    assert all(torch.isfinite(v).all() for v in pre.meta.values())
    assert pre.constants.eps > 0 and pre.info.get("command", "").startswith("bdlkit meta-train")


def test_fit_l2e_on_a_small_model_runs_and_moves():
    model, (x, y) = small_classifier()
    res = bdlkit.infer(model, "l2e", data=(x, y), steps=60, batch_size=16, seed=0)
    draws = res.sample(5)
    assert all(torch.isfinite(v).all() for v in draws.values())
    spread = max(v.std(0).max().item() for v in draws.values())
    assert spread > 0  # distinct draws: the chain moves


def _gaussian_run(alg, start, steps=3000, keep_from=1500, every=10):
    state = alg.init(start, generator=torch.Generator().manual_seed(0))
    draws = []
    for t in range(steps):
        state, _ = alg.step(state, None)
        if t >= keep_from and t % every == 0:
            draws.append(state.params.clone())
    return torch.cat(draws)


def test_shipped_meta_parameters_on_a_2d_gaussian_find_the_mean_but_not_the_spread():
    """What the shipped L2E does on a 2-D Gaussian with exact gradients (N = 1, so
    grad_scale = 1 and paper noise: the T = 1 setting of the SGHMC limit). Its 100 chains
    reach the mean, but their spread collapses to a small fraction of the target's: L2E's
    learned step is a normalised optimiser step and, without minibatch gradient noise,
    nothing spreads the chains. The issue asked for correct moments here; L2E gives no
    such guarantee (β_φ is not ∇_r of a kinetic energy; features include g and θ), and
    this test records the measured behaviour so that a change in either shows up."""
    target, mean, cov = correlated_target(2)
    pre = bdlkit.l2e.load_pretrained(torch.float64)
    alg = l2e.build(target, meta_params=pre, grad_scale=1.0, noise_mode="paper")
    start = mean + torch.randn(100, 2, generator=torch.Generator().manual_seed(0),
                               dtype=torch.float64) @ torch.linalg.cholesky(cov).T
    draws = _gaussian_run(alg, start)
    std = cov.diagonal().sqrt()
    assert ((draws.mean(0) - mean) / std).abs().max() < 0.05
    assert (draws.std(0) / std).max() < 0.2  # far colder than the target


def test_shipped_meta_parameters_on_a_2d_regression_posterior_have_its_scale():
    """With minibatch gradients (the regime L2E is meta-trained in) the shipped sampler's
    draws of a 2-D Bayesian linear regression posterior (N = 1 000, exact Gaussian) are
    centred within one posterior std of its mean and spread within a factor 2 of its stds
    (measured: about 1.2x); not exact moments, the right scale."""
    from blr_helpers import blr_data, blr_posterior

    x, y = blr_data(n=1000, d=2)
    mean, cov = blr_posterior(x, y, 1.0, 2.0)
    net = nn.Linear(2, 1, bias=False).double()
    model = bdlkit.BayesianModel(net, likelihood=bdlkit.problems.Gaussian(noise=1.0),
                                 prior=2.0, num_data=len(x))
    res = bdlkit.infer(model, "l2e", data=(x, y), steps=6000, batch_size=32, seed=0,
                       burnin=2000, thin=10)
    draws = res.samples["weight"].reshape(-1, 2)
    std = cov.diagonal().sqrt()
    assert ((draws.mean(0) - mean) / std).abs().max() < 1.0
    ratio = draws.std(0) / std
    assert (ratio > 0.5).all() and (ratio < 2.0).all(), ratio
