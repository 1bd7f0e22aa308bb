"""The diagonal Gaussian family: sampling moments, log density and score against torch.distributions."""

import math

import torch

from bdlkit.families import diag_gaussian as fam


def test_log_prob_and_score_match_torch_distributions():
    g = torch.Generator().manual_seed(0)
    lam = fam.DiagGaussianParams(mu={"w": torch.randn(3, 2, generator=g, dtype=torch.float64),
                                     "b": torch.randn(2, generator=g, dtype=torch.float64)},
                                 rho={"w": torch.randn(3, 2, generator=g, dtype=torch.float64),
                                      "b": torch.randn(2, generator=g, dtype=torch.float64)})
    theta = fam.sample(lam, 5, g)
    assert theta["w"].shape == (5, 3, 2) and theta["b"].shape == (5, 2)
    ref = sum(torch.distributions.Normal(lam.mu[k], lam.rho[k].exp()).log_prob(theta[k])
              .reshape(5, -1).sum(-1) for k in ("w", "b"))
    assert torch.allclose(fam.log_prob(lam, theta), ref)
    for k in ("w", "b"):
        t = theta[k].clone().requires_grad_(True)
        lp = torch.distributions.Normal(lam.mu[k], lam.rho[k].exp()).log_prob(t).sum()
        (grad,) = torch.autograd.grad(lp, t)
        assert torch.allclose(fam.score(lam, theta)[k], grad)


def test_sampling_moments_init_and_natural_round_trip():
    lam = fam.init(torch.tensor([1.0, -2.0], dtype=torch.float64), init_std=0.5)
    draws = fam.sample(lam, 200_000, torch.Generator().manual_seed(1))
    assert torch.allclose(draws.mean(0), lam.mu, atol=0.01)
    assert torch.allclose(draws.std(0), torch.full((2,), 0.5, dtype=torch.float64), atol=0.01)
    a, b = fam.natural(lam)
    assert torch.allclose(a, torch.full((2,), 4.0, dtype=torch.float64))
    back = fam.from_natural(a, b)
    assert torch.allclose(back.mu, lam.mu) and torch.allclose(back.rho, lam.rho)
    assert math.isclose(float(fam.sigma(lam)[0]), 0.5)
