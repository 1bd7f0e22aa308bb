"""GSM: Gaussian score matching VI (Modi et al., NeurIPS 2023; ``docs/vi.md``).

Each step draws B = ``num_samples`` points x_1..x_B ~ q_t = N(μ, Σ) and their scores
g_b = ∇log π(x_b). For one sample, q' = argmin_q KL(q_t ‖ q) subject to ∇log q(x) = g has
the closed form::

    ρ   = ½·√(1 + 4·(gᵀΣg + ((μ − x)ᵀg)²)) − ½
    ε₀  = Σg − μ + x
    μ'  = μ + (1/(1+ρ)) · [ I − (μ − x)·gᵀ / (1 + ρ + (μ − x)ᵀg) ] · ε₀
    Σ'  = Σ + (μ − x)(μ − x)ᵀ − (μ' − x)(μ' − x)ᵀ

A batch averages the increments: μ ← μ + mean_b (μ'_b − μ), Σ ← Σ + mean_b (Σ'_b − Σ).
ρ is computed as 2a/(1 + √(1 + 4a)), a = gᵀΣg + ((μ − x)ᵀg)², the same number without
the cancellation of √(1 + 4a) − 1 at small a. There is no step size. A Gaussian target is
a fixed point, reached geometrically (5-D, B = 2: error 1e-6 after about 90 iterations).

``covariance="full"`` keeps λ = (μ, L), Σ = LLᵀ (:mod:`bdlkit.families.full_gaussian`),
for a :class:`~bdlkit.problems.Target` only; all B updates are vectorised, O(Bd²), plus
the O(d³) Cholesky factorisation of the new Σ. An update whose Σ has no Cholesky factor
(or any NaN or inf) is rejected (:mod:`.gaussian_projection`), as GSM-VI's code does.

``covariance="diag"`` is the exact diagonal-family solution (docs/vi.md, GSM): KL and
score constraint separate per coordinate, so the scalar formula (Σ → σ_i², gᵀΣg → σ_i² g_i²,
(μ − x)ᵀg → (μ_i − x_i) g_i) applies to every coordinate, where the bracket reduces to
μ'_i = μ_i + ε₀_i / (1 + ρ_i + (μ_i − x_i) g_i). It matches the score at x exactly,
coordinate by coordinate, on any target. It works on any pytree (a Target's vector or a
network's dict of tensors), λ = (μ, ρ = log σ); a non-positive variance is rejected. Scores
come from :func:`.common.minibatch_scores` (one oracle call per draw for a network);
GSM was designed for exact scores, so minibatch scores of a network make it a heuristic.
On a network regression it says so before the run (a
:class:`~bdlkit.core.errors.DefaultsWarning`, ``REGRESSION_WARNING``): there its short
runs depend strongly on the seed.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import Tensor

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.vi.gaussian_projection import (
    DEFAULT_PATIENCE,
    GaussianProjectionVI,
    ProjectionState,
    accept_or_reject,
    diag_from_var,
    leafwise,
    setup,
)
from bdlkit.core.errors import DefaultsWarning, caller_stacklevel
from bdlkit.core.protocol import Batch, Info, Problem
from bdlkit.core.tree import TensorTree
from bdlkit.families import full_gaussian
from bdlkit.families.diag_gaussian import DiagGaussianParams
from bdlkit.families.full_gaussian import FullGaussianParams

KIND = "vi"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm

GSMState = ProjectionState


def full_update(mean: Tensor, cov: Tensor, thetas: Tensor,
                scores: Tensor) -> tuple[Tensor, Tensor]:
    """The batch-averaged GSM update of (μ, Σ) from draws ``thetas`` and scores ``scores``
    (both ``(B, d)``), all B closed-form updates at once. Σ' may be unusable (checked by
    the caller)."""
    diff = mean - thetas  # μ − x_b, (B, d)
    sg = scores @ cov  # (Σ g_b)ᵀ, Σ symmetric
    dg = (diff * scores).sum(-1)  # (μ − x)ᵀg
    a = (scores * sg).sum(-1) + dg * dg  # gᵀΣg + ((μ − x)ᵀg)²
    rho = 2 * a / (1 + torch.sqrt(1 + 4 * a))
    eps0 = sg - diff
    proj = (scores * eps0).sum(-1) / (1 + rho + dg)  # gᵀε₀ / (1 + ρ + (μ − x)ᵀg)
    new_means = mean + (eps0 - diff * proj[:, None]) / (1 + rho)[:, None]
    new_diff = new_means - thetas
    delta_cov = (diff.T @ diff - new_diff.T @ new_diff) / thetas.shape[0]
    return new_means.mean(0), cov + delta_cov


def diag_update_leaf(mu: Tensor, rho_log_sigma: Tensor, thetas: Tensor,
                     scores: Tensor) -> tuple[Tensor, Tensor]:
    """The per-coordinate GSM update of one leaf: new mean and new variance (draws along
    dimension 0)."""
    var = (2 * rho_log_sigma).exp()
    diff = mu - thetas
    dg = diff * scores
    a = var * scores * scores + dg * dg
    rho = 2 * a / (1 + torch.sqrt(1 + 4 * a))
    eps0 = var * scores - diff
    new_means = mu + eps0 / (1 + rho + dg)
    new_var = var + (diff * diff - (new_means - thetas) ** 2).mean(0)
    return new_means.mean(0), new_var


REGRESSION_WARNING = (
    "gsm on a network regression: its update uses minibatch scores as if exact, and short "
    "runs depend strongly on the seed (UCI yacht at 30 epochs, seeds 0-3: test RMSE 16.8, "
    "9.8, 12.5, 8.7 against 15.4 for the training mean; advi 1.9); use advi or score_vi, "
    "or compare with the mean predictor (the run's health check does)")


@dataclass(frozen=True)
class GSM(GaussianProjectionVI):
    """Gaussian score matching: KL projection onto the score constraints (module docstring).

    Args:
        num_samples: B draws (and scores) per step.
        covariance: "full" (λ = (μ, L), Σ = LLᵀ: Targets only) or "diag" (any pytree);
            None: full on a Target, diag on a network.
        init_std: σ of q₀ around the initial parameters; None: 1 on a Target, 0.01 on a
            network.
        patience: rejected updates in a row before :meth:`GaussianProjectionVI.status` reports
            ``"numerical_failure"``.
    """

    problem: Problem
    num_samples: int = 2
    covariance: Literal["full", "diag"] | None = None
    init_std: float | None = None
    patience: int = DEFAULT_PATIENCE
    name: str = "gsm"
    VERSION: ClassVar[int] = 2  # 2: a network's noise drawn in chunks (bdlkit.core.noise)

    def __post_init__(self) -> None:
        setup(self)
        if getattr(getattr(self.problem, "likelihood", None), "task", None) == "regression":
            warnings.warn(REGRESSION_WARNING, DefaultsWarning, stacklevel=caller_stacklevel())

    def update(self, lam: DiagGaussianParams | FullGaussianParams, thetas: TensorTree,
               scores: TensorTree) -> DiagGaussianParams | FullGaussianParams | None:
        """q_{t+1} from the draws and their scores, or ``None`` if it is not a valid Gaussian."""
        if isinstance(lam, FullGaussianParams):
            mean, cov = full_update(lam.mean, full_gaussian.cov(lam), thetas, scores)
            return full_gaussian.from_cov(mean, cov)
        mean, var = leafwise(diag_update_leaf, lam.mu, lam.rho, thetas, scores)
        return diag_from_var(mean, var)

    def step(self, state: GSMState, batch: Batch) -> tuple[GSMState, Info]:
        gen, thetas, value, scores = self.draw(state, batch)
        return accept_or_reject(state, self.update(state.lam, thetas, scores), gen, value)


build = builder(GSM)

__all__ = ["GSM", "GSMState", "build", "diag_update_leaf", "full_update"]


ALGORITHM = GSM
