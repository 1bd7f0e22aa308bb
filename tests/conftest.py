"""Shared fixtures: small float64 problems with closed-form posteriors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bdlkit


def blr_data(n: int = 100, d: int = 3, noise: float = 1.0, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)[:d]
    y = x @ w + noise * torch.randn(n, generator=g, dtype=torch.float64)
    return x, y


def blr_posterior(x, y, noise: float, prior_scale: float, temperature: float = 1.0):
    """Exact N(mean, cov) of Bayesian linear regression (tempered by 1/T)."""
    precision = x.T @ x / noise**2 + torch.eye(x.shape[1], dtype=x.dtype) / prior_scale**2
    cov = torch.linalg.inv(precision) * temperature
    mean = torch.linalg.solve(precision, x.T @ y / noise**2)
    return mean, cov


@pytest.fixture
def blr():
    """A float64 BayesianModel for y = x·w + N(0, 1) noise and its exact posterior."""
    x, y = blr_data()
    net = nn.Linear(3, 1, bias=False).double()
    model = bdlkit.BayesianModel(
        net, likelihood=bdlkit.problems.Gaussian(noise=1.0), prior=2.0, num_data=len(x)
    )
    mean, cov = blr_posterior(x, y, 1.0, 2.0)
    return model, (x, y), mean, cov
