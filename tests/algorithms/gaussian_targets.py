"""Gaussian Targets with known answers, shared by the VI algorithm tests (float64)."""

import torch

import bdlkit

F64 = torch.float64


def diag_gaussian(std: torch.Tensor, seed: int = 0):
    """N(m, diag std²) with m = std ⊙ N(0, I) (seeded); returns the target and m."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(len(std), generator=g, dtype=F64) * std
    target = bdlkit.Target(lambda th: -0.5 * (((th - mean) / std) ** 2).sum(-1), dim=len(std),
                           dtype=F64)
    return target, mean


def correlated_gaussian(d: int = 5, seed: int = 1):
    """N(m, Σ*) with Σ* = AAᵀ + 0.5 I (``algorithms.md`` Part E); returns the target, m, Σ*
    and Λ = Σ*⁻¹."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=F64)
    cov = a @ a.T + 0.5 * torch.eye(d, dtype=F64)
    prec = torch.linalg.inv(cov)
    mean = torch.randn(d, generator=g, dtype=F64)

    def log_prob(th):
        z = th - mean
        return -0.5 * ((z @ prec) * z).sum(-1)

    return bdlkit.Target(log_prob, dim=d, dtype=F64), mean, cov, prec
