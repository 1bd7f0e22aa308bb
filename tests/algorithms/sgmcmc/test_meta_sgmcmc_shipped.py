"""What the shipped Meta-SGMCMC networks do on posteriors with known moments.

The issue asks that the shipped meta-parameters sample the exact 2-D Bayesian linear
regression posterior, or that the measured behaviour be recorded and explained. These tests
record it (docs/meta_sgmcmc.md, "What the shipped sampler does"), with margins, so that a
change of the sampler or of the shipped file shows up. Measured at the committed file
(``python`` on this repository's tests, float64):

* 2-D Gaussian Target (N = 1, exact gradients, 100 chains, 3 000 steps, the second half
  kept): means 0.46 and 0.50 posterior stds off, stds 0.90 and 0.88 of the target's.
* 2-D regression posterior, N = 1 000, minibatches of 32, one chain of 6 000 steps (2 000
  burn-in): means 0.63 and 1.01 stds off, stds 0.77 and 1.19 of the exact ones.
"""

from pathlib import Path

import pytest
import torch
from sampler_helpers import correlated_target
from torch import nn

import bdlkit
from bdlkit.algorithms import meta_sgmcmc
from bdlkit.meta_sgmcmc.pretrained import load_pretrained, pretrained_path


def test_the_shipped_file_is_the_committed_meta_training_run():
    """The package's file is, byte for byte, the one the committed command wrote."""
    run = Path(__file__).parents[3] / "benchmarks/results/meta-sgmcmc-meta-train"
    assert pretrained_path().read_bytes() == (run / "meta_params.safetensors").read_bytes()
    info = load_pretrained().info
    assert info["outer_steps"] == "320" and "bdlkit meta-train meta-sgmcmc" in info["command"]


def test_shipped_networks_on_a_2d_gaussian_have_its_scale():
    """Exact gradients, N = 1 (ε = 0.084, D_f clamped at 1/ε): within 1 std of the mean and
    within 30 % of the stds (measured 0.46-0.50 std off; stds 0.88-0.90x)."""
    target, mean, cov = correlated_target(2)
    alg = meta_sgmcmc.build(target, meta_params=load_pretrained(torch.float64))
    start = mean + torch.randn(100, 2, generator=torch.Generator().manual_seed(0),
                               dtype=torch.float64) @ torch.linalg.cholesky(cov).T
    state = alg.init(start, generator=torch.Generator().manual_seed(0))
    draws = []
    for t in range(3000):
        state, _ = alg.step(state, None)
        if t >= 1500 and t % 10 == 0:
            draws.append(state.params.clone())
    draws = torch.cat(draws)
    std = cov.diagonal().sqrt()
    assert ((draws.mean(0) - mean) / std).abs().max() < 1.0
    ratio = draws.std(0) / std
    assert (ratio > 0.7).all() and (ratio < 1.3).all(), ratio


@pytest.mark.slow
def test_shipped_networks_on_a_2d_regression_posterior_have_its_scale():
    """Minibatch gradients, N = 1 000: one chain is centred within 2 posterior stds and
    spread within a factor 1.6 of the exact stds (measured: 0.63-1.01 std off; stds
    0.77-1.19x). Not exact moments: the chain mixes slowly (its learned Q_f is small where
    the energy is low), so one chain's mean is off by about one std."""
    from blr_helpers import blr_data, blr_posterior

    x, y = blr_data(n=1000, d=2)
    mean, cov = blr_posterior(x, y, 1.0, 2.0)
    net = nn.Linear(2, 1, bias=False).double()
    model = bdlkit.BayesianModel(net, likelihood=bdlkit.problems.Gaussian(noise=1.0),
                                 prior=2.0, num_data=len(x))
    res = bdlkit.infer(model, "meta_sgmcmc", data=(x, y), steps=6000, batch_size=32, seed=0,
                       burnin=2000, thin=10, progress=False)
    draws = res.samples["weight"].reshape(-1, 2)
    std = cov.diagonal().sqrt()
    assert ((draws.mean(0) - mean) / std).abs().max() < 2.0
    ratio = draws.std(0) / std
    assert (ratio > 1 / 1.6).all() and (ratio < 1.6).all(), ratio
