"""The Stein gradient estimator and Meta-SGMCMC's cross-chain KL surrogate.

Stein gradient estimator (Li & Turner, ICLR 2018), as Meta-SGMCMC uses it
(``docs/meta_sgmcmc.md``, Meta-training): for M draws x_1..x_M of q (rows of ``x``), the RBF
kernel ``K_ij = exp(−‖x_i − x_j‖²/(2h))`` with h = median_ij ‖x_i − x_j‖² / 2 (the median over
all M² pairs, the diagonal zeros included) and ``(ΣK)_i = Σ_j ∇_{x_j} K_ij = Σ_j K_ij·(x_i −
x_j)/h``, the estimate of ∇log q at the draws is::

    Ĝ = −(K + λI)^{-1} ΣK          λ = 0.05

The cross-chain KL surrogate of KL(q_t ‖ π) at one time, from the M chains' states θ_m::

    L = −(1/M) Σ_m ∇log π(θ_m)·θ_m + (1/M) Σ_m Ĝ_m·θ_m

with ∇log π and Ĝ held fixed (detached): its gradient in the sampler's meta-parameters
(through θ) is that of E_q[log q − log π] (the entropy term by the Stein identity). Written
here because no maintained library has the estimator in PyTorch.
"""

from __future__ import annotations

import torch
from torch import Tensor

LAMBDA = 0.05


def median_bandwidth(x: Tensor) -> Tensor:
    """h = median of the M² squared pairwise distances / 2 (``x``: (M, d); the lower of
    the two middle values of the even count, as ``torch.median`` takes it)."""
    sq = torch.cdist(x, x).square()
    return sq.reshape(-1).median() / 2.0


def stein_score(x: Tensor, lam: float = LAMBDA, bandwidth: Tensor | float | None = None
                ) -> Tensor:
    """Ĝ ≈ ∇log q at the rows of ``x`` (module docstring); detached, shape of ``x``."""
    x = x.detach()
    if x.dim() != 2 or x.shape[0] < 2:
        raise ValueError(f"the Stein estimator needs (draws >= 2, dim) samples, got shape "
                         f"{tuple(x.shape)}")
    h = (median_bandwidth(x) if bandwidth is None
         else torch.as_tensor(bandwidth, dtype=x.dtype, device=x.device))
    h = h.clamp_min(torch.finfo(x.dtype).tiny)  # all draws equal: K = 1, ΣK = 0
    diff = x.unsqueeze(1) - x.unsqueeze(0)  # (M, M, d): x_i − x_j
    k = torch.exp(-0.5 * diff.square().sum(-1) / h)
    grad_k = (k.unsqueeze(-1) * diff).sum(1) / h
    eye = torch.eye(x.shape[0], dtype=x.dtype, device=x.device)
    return -torch.linalg.solve(k + lam * eye, grad_k)


def kl_surrogate(theta: Tensor, score: Tensor, lam: float = LAMBDA) -> Tensor:
    """L of the module docstring for the chains' states ``theta`` (M, d) and their target
    scores ``score`` = ∇log π(θ_m) (M, d); differentiable through ``theta`` only."""
    coef = stein_score(theta, lam) - score.detach()
    return (coef * theta).sum(-1).mean()


__all__ = ["LAMBDA", "kl_surrogate", "median_bandwidth", "stein_score"]
