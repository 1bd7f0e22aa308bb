"""The full-covariance Gaussian family of GSM and BaM (``docs/vi.md``).

q = N(μ, Σ) on a flat parameter vector θ ∈ R^d (a Target), stored as λ = (μ, L) with
L the lower Cholesky factor of Σ = L Lᵀ, so sampling and the density cost O(d²) per draw
after the O(d³) factorisation the update already paid for::

    sample:    θ = μ + L ε,  ε ~ N(0, I)
    log q(θ) = −½ d log 2π − Σ_i log L_ii − ½ ‖L⁻¹(θ − μ)‖²
    score:     ∇_θ log q(θ) = −Σ⁻¹(θ − μ)

Updates that produce a covariance go through :func:`from_cov`, which symmetrises it and
returns ``None`` instead of raising when the Cholesky factorisation fails (not positive
definite, NaN or inf): the algorithms report that as a rejected update.
A d × d family is for Targets only; a network's parameters use the diagonal family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from bdlkit.core.tree import pytree_dataclass


@pytree_dataclass
class FullGaussianParams:
    """λ = (μ, L): the mean ``(d,)`` and the lower Cholesky factor ``(d, d)`` of Σ."""

    mean: Tensor
    chol: Tensor


def init(params: Tensor, init_std: float) -> FullGaussianParams:
    """λ centred at ``params`` ``(d,)`` with Σ = init_std² I."""
    if not isinstance(params, Tensor) or params.ndim != 1:
        shape = tuple(params.shape) if isinstance(params, Tensor) else type(params).__name__
        raise ValueError(
            f"the full-covariance family needs one flat parameter vector (d,), got {shape}; "
            f"use covariance='diag' for networks or stacks of chains"
        )
    if not init_std > 0 or not math.isfinite(init_std):
        raise ValueError(f"init_std must be a finite number > 0, got {init_std!r}")
    d = params.shape[0]
    eye = torch.eye(d, dtype=params.dtype, device=params.device)
    return FullGaussianParams(mean=params.detach().clone(), chol=init_std * eye)


def cov(lam: FullGaussianParams) -> Tensor:
    """Σ = L Lᵀ."""
    return lam.chol @ lam.chol.T


def from_cov(mean: Tensor, sigma: Tensor) -> FullGaussianParams | None:
    """λ from a mean and a covariance, or ``None`` if Σ is not a finite positive definite
    matrix (the Cholesky factorisation fails)."""
    if not (bool(torch.isfinite(mean).all()) and bool(torch.isfinite(sigma).all())):
        return None
    chol, info = torch.linalg.cholesky_ex(0.5 * (sigma + sigma.T))
    if int(info) != 0 or not bool(torch.isfinite(chol).all()):
        return None
    return FullGaussianParams(mean=mean, chol=chol)


def sample(lam: FullGaussianParams, n: int, generator: torch.Generator) -> Tensor:
    """``n`` draws θ = μ + L ε stacked as ``(n, d)``."""
    eps = torch.randn((n, lam.mean.shape[0]), generator=generator, dtype=lam.mean.dtype,
                      device=lam.mean.device)
    return lam.mean + eps @ lam.chol.T


def log_prob(lam: FullGaussianParams, theta: Tensor) -> Tensor:
    """``log q(θ)`` of stacked draws ``(n, d)``: shape ``(n,)``."""
    z = torch.linalg.solve_triangular(lam.chol, (theta - lam.mean).T, upper=False)
    d = lam.mean.shape[0]
    return (-0.5 * d * math.log(2 * math.pi) - lam.chol.diagonal().log().sum()
            - 0.5 * (z * z).sum(0))


def score(lam: FullGaussianParams, theta: Tensor) -> Tensor:
    """``∇_θ log q(θ) = −Σ⁻¹(θ − μ)`` for ``(d,)`` or ``(n, d)``."""
    diff = (theta - lam.mean).reshape(-1, lam.mean.shape[0]).T
    return -torch.cholesky_solve(diff, lam.chol).T.reshape(theta.shape)


def entropy(lam: FullGaussianParams) -> Tensor:
    """``H(q) = ½ d (1 + log 2π) + Σ_i log L_ii``."""
    d = lam.mean.shape[0]
    return 0.5 * d * (1.0 + math.log(2 * math.pi)) + lam.chol.diagonal().log().sum()


@dataclass(frozen=True)
class FullGaussian:
    """The approximation object VI algorithms return: sampling, density, moments."""

    params: FullGaussianParams

    @property
    def mean(self) -> Tensor:
        return self.params.mean

    @property
    def cov(self) -> Tensor:
        return cov(self.params)

    @property
    def std(self) -> Tensor:
        return self.params.chol.pow(2).sum(1).sqrt()

    def sample(self, n: int, generator: torch.Generator) -> Tensor:
        return sample(self.params, n, generator)

    def log_prob(self, theta: Tensor) -> Tensor:
        return log_prob(self.params, theta)

    def score(self, theta: Tensor) -> Tensor:
        return score(self.params, theta)

    def entropy(self) -> Tensor:
        return entropy(self.params)


__all__ = [
    "FullGaussian", "FullGaussianParams", "cov", "entropy", "from_cov", "init", "log_prob",
    "sample", "score",
]
