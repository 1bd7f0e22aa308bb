"""SGLD recovers Gaussian moments (Targets) and the exact BLR posterior (networks)."""

import torch

import bdlkit
from bdlkit.algorithms.sgmcmc import sgld


def correlated_gaussian():
    cov = torch.tensor([[1.0, 0.8], [0.8, 2.0]], dtype=torch.float64)
    mean = torch.tensor([1.0, -1.0], dtype=torch.float64)
    prec = torch.linalg.inv(cov)

    def log_prob(th):
        d = th - mean
        return -0.5 * ((d @ prec) * d).sum(-1)

    return bdlkit.Target(log_prob, dim=2, dtype=torch.float64), mean, cov


def test_recovers_correlated_gaussian_moments():
    target, mean, cov = correlated_gaussian()
    res = bdlkit.infer(target, "sgld", steps=3000, chains=200, lr=0.02, seed=1, thin=10)
    draws = res.sample(res.num_kept)
    assert torch.allclose(draws.mean(0), mean, atol=0.05)
    # Euler bias at lr=0.02 is ~1 %; Monte Carlo error ~3 %
    assert torch.allclose(torch.cov(draws.T), cov, rtol=0.08, atol=0.04)


def test_same_seed_same_chain_and_different_seed_differs():
    target, _, _ = correlated_gaussian()
    a = bdlkit.infer(target, "sgld", steps=50, seed=3).sample(10)
    b = bdlkit.infer(target, "sgld", steps=50, seed=3).sample(10)
    c = bdlkit.infer(target, "sgld", steps=50, seed=4).sample(10)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_step_is_pure_and_state_carries_the_rng():
    target, _, _ = correlated_gaussian()
    alg = sgld.build(target, lr=0.1)
    s0 = alg.init(generator=torch.Generator().manual_seed(0))
    s1, _ = alg.step(s0, None)
    s1b, _ = alg.step(s0, None)
    assert torch.equal(s1.params, s1b.params)  # same state in, same state out
    assert s1.step == 1 and s0.step == 0


def test_blr_posterior_on_a_network(blr):
    model, data, mean, cov = blr
    res = bdlkit.infer(
        model,
        "sgld",
        data=data,
        batch_size=100,
        steps=6000,
        lr=0.05,
        seed=0,
        burnin=1000,
        thin=5,
        max_samples=1000,
    )
    w = res.samples["weight"].reshape(-1, 3)
    std = cov.diagonal().sqrt()
    assert ((w.mean(0) - mean).abs() / std).max() < 0.35
    assert torch.allclose(w.std(0), std, rtol=0.25)
