"""Bayesian linear regression data and its exact posterior (float64), importable by name
from any test (``from blr_helpers import ...``; a ``conftest`` import can resolve to a
sub-folder's conftest under pytest-xdist)."""

import torch


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
