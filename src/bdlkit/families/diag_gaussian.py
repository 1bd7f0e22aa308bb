"""The diagonal (mean-field) Gaussian family shared by every VI method (``docs/vi.md``).

q_λ = N(μ, diag σ²) with λ = (μ, ρ = log σ), one (μ, ρ) pair per parameter tensor of a
network (a dict of tensors) or per coordinate of a Target (a tensor)::

    sample:    θ = μ + σ ⊙ ε,  ε ~ N(0, I)
    log q(θ) = Σ_i [ −½ log 2π − ρ_i − (θ_i − μ_i)² / (2σ_i²) ]
    score:     ∇_θ log q(θ) = −(θ − μ) / σ²
    natural:   a = 1/σ²,  b = a·μ           (so ∇_θ log q = −a·θ + b, affine in θ)

Everything works on pytrees (a tensor or a dict of tensors), so the same code serves
Targets and networks. ``sample`` returns draws stacked along a new leading dimension,
the layout every bdlkit draw consumer expects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from bdlkit.core.tree import TensorTree, pytree_dataclass, randn_like, tree_leaves, tree_map

#: ½(1 + log 2π), the entropy of N(0, 1) — each coordinate's share of
#: H(q) = Σ_i [ρ_i + ½(1 + log 2π)].
ENTROPY_CONST = 0.5 * (1.0 + math.log(2 * math.pi))


@pytree_dataclass
class DiagGaussianParams:
    """λ = (μ, ρ = log σ), each a pytree shaped like the model's parameters."""

    mu: TensorTree
    rho: TensorTree


def init(params: TensorTree, init_std: float) -> DiagGaussianParams:
    """λ centred at ``params`` (e.g. the initial, MAP or pretrained weights) with σ = ``init_std``."""
    if not init_std > 0:
        raise ValueError(f"init_std must be > 0, got {init_std}")
    mu = tree_map(lambda p: p.detach().clone(), params)
    rho = tree_map(lambda p: torch.full_like(p, math.log(init_std)), params)
    return DiagGaussianParams(mu=mu, rho=rho)


def sigma(lam: DiagGaussianParams) -> TensorTree:
    return tree_map(torch.exp, lam.rho)


def sample(lam: DiagGaussianParams, n: int, generator: torch.Generator) -> TensorTree:
    """``n`` draws θ = μ + σ ε stacked along a new leading dimension."""
    eps = randn_like(lam.mu, generator, n)
    return tree_map(lambda m, r, e: torch.addcmul(m, r.exp(), e), lam.mu, lam.rho, eps)


def log_prob(lam: DiagGaussianParams, theta: TensorTree) -> Tensor:
    """``log q(θ)`` for stacked draws ``theta`` (leading dimension n): shape ``(n,)``."""
    terms = tree_map(
        lambda t, m, r: (-0.5 * math.log(2 * math.pi) - r - 0.5 * ((t - m) * (-r).exp()) ** 2)
        .reshape(t.shape[0], -1).sum(-1),
        theta, lam.mu, lam.rho,
    )
    return sum(tree_leaves(terms))


def score(lam: DiagGaussianParams, theta: TensorTree) -> TensorTree:
    """``∇_θ log q(θ) = −(θ − μ)/σ²`` (θ with or without a leading draw dimension)."""
    return tree_map(lambda t, m, r: -(t - m) * (-2 * r).exp(), theta, lam.mu, lam.rho)


def natural(lam: DiagGaussianParams) -> tuple[TensorTree, TensorTree]:
    """Natural parameters ``(a, b) = (1/σ², μ/σ²)``."""
    a = tree_map(lambda r: (-2 * r).exp(), lam.rho)
    return a, tree_map(lambda aa, m: aa * m, a, lam.mu)


def from_natural(a: TensorTree, b: TensorTree) -> DiagGaussianParams:
    """λ from natural parameters (``a`` must be positive)."""
    return DiagGaussianParams(mu=tree_map(lambda aa, bb: bb / aa, a, b),
                              rho=tree_map(lambda aa: -0.5 * aa.log(), a))


@dataclass(frozen=True)
class DiagGaussian:
    """The approximation q as an object (:class:`bdlkit.core.protocol.Approximation`)."""

    params: DiagGaussianParams

    @property
    def mean(self) -> TensorTree:
        return self.params.mu

    @property
    def std(self) -> TensorTree:
        return sigma(self.params)

    def sample(self, n: int, generator: torch.Generator) -> TensorTree:
        return sample(self.params, n, generator)

    def log_prob(self, theta: TensorTree) -> Tensor:
        return log_prob(self.params, theta)

    def score(self, theta: TensorTree) -> TensorTree:
        return score(self.params, theta)


SIGMA_QUANTILES = (0.1, 0.5, 0.9)
QUANTILE_MAX = 2**24


def sigma_summary(lam: DiagGaussianParams) -> list[dict[str, float | str | int]]:
    """Per-tensor (per-layer) quantiles of σ, then one row ``"all"`` over every coordinate.

    Each row: ``{"tensor", "size", "q10", "median", "q90"}`` (σ in the parameters' units).
    A Target's single tensor is named ``"theta"``. This is what tells a real posterior
    from a point estimate: a VI run whose σ stayed at ``init_std`` is MAP in disguise.
    """
    rho = lam.rho if isinstance(lam.rho, dict) else {"theta": lam.rho}
    rows: list[dict[str, float | str | int]] = []
    q = torch.tensor(SIGMA_QUANTILES, dtype=torch.float64)

    def row(name: str, values: Tensor) -> dict[str, float | str | int]:
        v = values.detach().reshape(-1).to(torch.float64).exp()
        if v.numel() > QUANTILE_MAX:  # torch.quantile's limit: a fixed random subset
            keep = torch.randperm(v.numel(), generator=torch.Generator().manual_seed(0))
            v = v[keep[:QUANTILE_MAX].to(v.device)]
        lo, mid, hi = torch.quantile(v, q.to(v.device)).tolist()
        return {"tensor": name, "size": int(v.numel()), "q10": lo, "median": mid, "q90": hi}

    for name, r in rho.items():
        rows.append(row(name, r))
    if len(rho) > 1:
        rows.append(row("all", torch.cat([r.detach().reshape(-1) for r in rho.values()])))
    return rows
