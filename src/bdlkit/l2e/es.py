"""Antithetic evolution strategies and the outer Adam of L2E meta-training.

``docs/l2e.md`` (Meta-training). For meta-parameters φ (one flat vector), P antithetic pairs
δ_p = σ·z_p, z_p ~ N(0, I), and a loss evaluated with common random numbers inside each
pair (same task, initialisation, minibatches and noise for φ + δ_p and φ − δ_p)::

    ĝ = (1/P) Σ_p (L(φ + δ_p) − L(φ − δ_p)) · δ_p / (2σ²)

a non-finite loss difference counts as 0 (the pair is dropped from the sum, not the
mean). For a quadratic L the antithetic difference is exact, so E[ĝ] = ∇L(φ).

The outer optimiser is Adam in optax's form, with ``eps_root`` (learned_optimization's
``optax.adam(eps=1e-8, eps_root=1e-8)``), after a global-norm clip of ĝ::

    m ← β₁m + (1−β₁)ĝ;  v ← β₂v + (1−β₂)ĝ²;  φ ← φ − lr·m̂/(sqrt(v̂ + eps_root) + eps)

with m̂, v̂ bias-corrected. ``reset_each_step`` reproduces the released script, which
rebuilt Adam every outer step: then the update is always the step-1 update
``−lr·ĝ/(sqrt(ĝ² + 1e-8) + 1e-8)`` (sign-SGD for ``|ĝ| ≫ 1e-4``). Both are a few lines;
torch.optim.Adam has no ``eps_root``, hence written here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


def perturbations(dim: int, population: int, sigma: float,
                  generator: torch.Generator, dtype: torch.dtype = torch.float32) -> Tensor:
    """The P perturbations δ_p = σ·z_p, shape (P, dim)."""
    return sigma * torch.randn(population, dim, generator=generator, dtype=dtype)


def antithetic_points(phi: Tensor, deltas: Tensor) -> Tensor:
    """The 2P points to evaluate, pair-interleaved: [φ+δ₁, φ−δ₁, φ+δ₂, φ−δ₂, ...]."""
    return torch.stack([phi + deltas, phi - deltas], dim=1).reshape(-1, phi.numel())


def es_gradient(losses: Tensor, deltas: Tensor, sigma: float) -> tuple[Tensor, int]:
    """ĝ from the 2P pair-interleaved losses; returns (ĝ, number of dropped pairs)."""
    diff = losses[0::2] - losses[1::2]
    bad = ~torch.isfinite(diff)
    diff = torch.where(bad, torch.zeros_like(diff), diff)
    grad = (diff.unsqueeze(1) * deltas).mean(dim=0) / (2 * sigma**2)
    return grad, int(bad.sum())


def estimate(loss_fn: Callable[[Tensor], Tensor], phi: Tensor, population: int, sigma: float,
             generator: torch.Generator) -> tuple[Tensor, Tensor, int]:
    """One antithetic ES estimate: ``loss_fn`` maps (2P, dim) points to (2P,) losses and must
    use common random numbers within each pair. Returns (ĝ, losses, dropped pairs)."""
    deltas = perturbations(phi.numel(), population, sigma, generator, phi.dtype)
    losses = loss_fn(antithetic_points(phi, deltas))
    grad, dropped = es_gradient(losses, deltas, sigma)
    return grad, losses, dropped


def clip_by_global_norm(grad: Tensor, max_norm: float) -> Tensor:
    norm = grad.norm()
    return grad * (max_norm / norm) if norm > max_norm else grad


@dataclass
class Adam:
    """Adam with ``eps_root`` (optax form) and the optional per-step reset (module doc)."""

    lr: float = 0.01
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    eps_root: float = 1e-8
    reset_each_step: bool = False

    def init(self, phi: Tensor) -> dict[str, Tensor]:
        return {"m": torch.zeros_like(phi), "v": torch.zeros_like(phi),
                "t": torch.zeros((), dtype=torch.int64)}

    def update(self, phi: Tensor, grad: Tensor, state: dict[str, Tensor]
               ) -> tuple[Tensor, dict[str, Tensor]]:
        if self.reset_each_step:
            state = self.init(phi)
        t = int(state["t"]) + 1
        m = self.b1 * state["m"] + (1 - self.b1) * grad
        v = self.b2 * state["v"] + (1 - self.b2) * grad * grad
        m_hat, v_hat = m / (1 - self.b1**t), v / (1 - self.b2**t)
        phi = phi - self.lr * m_hat / (torch.sqrt(v_hat + self.eps_root) + self.eps)
        return phi, {"m": m, "v": v, "t": torch.tensor(t, dtype=torch.int64)}


__all__ = ["Adam", "antithetic_points", "clip_by_global_norm", "es_gradient", "estimate",
           "perturbations"]
