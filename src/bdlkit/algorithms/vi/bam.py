"""BaM: batch and match VI (Cai et al., ICML 2024; ``docs/vi.md``).

Each step draws B = ``num_samples`` points x_1..x_B ~ q_t = N(μ_t, Σ_t) with scores
g_b = ∇log π(x_b) and moves q to the minimiser of the batch's covariance-weighted score
mismatch plus (2/λ_t)·KL(q_t ‖ q).
With moments normalised by **1/B** (the normalisation that makes this the exact batch argmin;
not AdvancedVI's 1/(B−1))::

    x̄ = mean_b x_b,   C = (1/B) Σ_b (x_b − x̄)(x_b − x̄)ᵀ
    ḡ = mean_b g_b,   Γ = (1/B) Σ_b (g_b − ḡ)(g_b − ḡ)ᵀ
    U = λΓ + (λ/(1+λ))·ḡḡᵀ
    V = Σ_t + λC + (λ/(1+λ))·(μ_t − x̄)(μ_t − x̄)ᵀ
    Σ_{t+1} = 2V·(I + (I + 4UV)^{1/2})⁻¹
    μ_{t+1} = μ_t/(1+λ) + (λ/(1+λ))·(Σ_{t+1}·ḡ + x̄)

**Σ_{t+1}, symmetric form** (``covariance="full"``). With V = LLᵀ and W = LᵀUL = QwQᵀ
(symmetric PSD), I + 4UV = L⁻ᵀ(I + 4W)Lᵀ, so its principal square root is L⁻ᵀ(I + 4W)^{1/2}Lᵀ
and::

    Σ_{t+1} = L·Q·diag(2/(1 + √(1 + 4w)))·QᵀLᵀ,      2/(1 + √(1 + 4w)) = (√(1 + 4w) − 1)/(2w)

symmetric and positive definite by construction. GSM-VI's code computes the same matrix as
2·solve((I + sqrtm(I + 4UV))ᵀ, Vᵀ) (mind the 2) and adds 1e-6·I jitter; bdlkit adds none.
A failed Cholesky factorisation of V, a
NaN, or an eigenvalue w clearly below zero (U is PSD in exact arithmetic; only roundoff-level
negatives are set to 0) rejects the update (:mod:`.gaussian_projection`).

**Low rank** (``covariance="lowrank"``). U = QQᵀ exactly with the d × (B+1) factor
Q = [√(λ/B)(g_b − ḡ) for b = 1..B, √(λ/(1+λ))·ḡ] (no truncated SVD needed). Since
f(w) = 2/(1 + √(1 + 4w)) =
1 − w·(½ + (w + ¼)^{1/2})⁻², pushing the function through W = (LᵀQ)(LᵀQ)ᵀ gives::

    Σ_{t+1} = V − A·(½I + (QᵀVQ + ¼I)^{1/2})⁻²·Aᵀ,      A = VQ

with an (B+1) × (B+1) eigendecomposition instead of a d × d one: O(d²B + B³), plus the
d × d matrix V and the O(d³/3) Cholesky factorisation of Σ_{t+1} that every full update
pays (positive-definiteness check and sampling).
It is the same Σ_{t+1} as the full form (to roundoff).

**Diagonal** (``covariance="diag"``, any pytree). The weighted norm and the KL separate per
coordinate, so the exact diagonal-family update is the scalar version (U_i, V_i from C_ii,
Γ_ii, ḡ_i, μ_i − x̄_i; σ²_new,i = 2V_i/(1 + √(1 + 4U_i V_i))). It recovers a diagonal Gaussian
exactly; on a correlated target N(m, Λ⁻¹) its fixed point is μ = m and 1/σ_i² = (ΛSΛ)_ii with
S = diag(σ²), **not** the mean-field value Λ_ii.

**Step size.** t = ``state.step``, the number of steps taken before this one (from 0;
rejected steps count, so λ keeps shrinking after a failure), d = number of parameters:

- ``schedule="inverse"`` (default, AdvancedVI.jl): λ_t = lam_scale·B·d/(t + 1);
- ``schedule="constant"``: λ_t = lam_scale·B·d;
- ``lam_scale=None`` (default): 1 on a Target, 1/(4d) on a network, so a network's
  schedule is λ_t = B/(4(t + 1)) (λ₀ = 4 at B = 16). AdvancedVI's B·d is tuned on Targets
  of a few dozen coordinates; with the d ≈ 10⁴–10⁵ weights of an MLP, λ₀ ≈ 10⁶ makes the
  first steps jump to the match of one minibatch's noisy scores. The factor was picked by
  30-epoch runs (``bdlkit bench defaults``; test accuracy or RMSE, seed 0; -: not run):

  ====================  =============  ==========  ===========  ===========
  problem               lam_scale 1    1/d         1/(4d)       1/(16d)
  ====================  =============  ==========  ===========  ===========
  digits                (NLL 3 345)    0.972       0.978        0.919
  MNIST-500             -              0.853       0.878        0.842
  MNIST-5000            0.87           0.945       0.946        0.916
  two-class MNIST       0.27           0.867       0.962        0.907
  CIFAR-10 1000, CNN    0.15           0.104       0.334        0.307
  yacht / concrete      8.3 / 9.3      4.5 / 7.0   5.9 / 7.3    10.4 / 10.8
  ====================  =============  ==========  ===========  ===========

  At λ₀ = 16 (1/d) the first updates on the CNN move its wide dense layer to σ ≈ 1 (the
  prior: one weight of a 40 000-weight layer is barely constrained by 1 000 images) while
  its mean shrinks to 0; the predictive is then the majority class. At λ₀ = 4 that layer
  also ends near σ = 1 but its mean grows and the BMA accuracy is 0.33. Smaller λ₀ moves
  the mean too slowly in 240 steps (λ₀ = 0.1 left every σ and the mean where they began);
- a callable ``t -> λ_t`` gives λ_t itself (``lam_scale`` must stay 1). GSM-VI's example
  ``100/(1+i)`` with its counter from 1 is ``lambda t: 100 / (t + 2)`` here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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
    field_choices,
    leafwise,
    setup,
)
from bdlkit.core.protocol import Batch, Info, Problem
from bdlkit.core.tree import TensorTree, tree_leaves
from bdlkit.families import full_gaussian
from bdlkit.families.diag_gaussian import DiagGaussianParams
from bdlkit.families.full_gaussian import FullGaussianParams
from bdlkit.problems import Target

KIND = "vi"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm

BaMState = ProjectionState
#: lam_scale·d on a network when lam_scale is None — λ_t = B/(4(t + 1)) (module docstring).
NETWORK_LAM_SCALE = 0.25


def _sym(m: Tensor) -> Tensor:
    return 0.5 * (m + m.T)


def _psd_eigh(m: Tensor) -> tuple[Tensor, Tensor] | None:
    """Eigendecomposition of the symmetric PSD (in exact arithmetic) ``m``; eigenvalues
    below zero by roundoff are set to 0; clearly negative ones, NaN or a failed
    decomposition give ``None``."""
    if not bool(torch.isfinite(m).all()):
        return None
    try:
        w, q = torch.linalg.eigh(_sym(m))
    except torch.linalg.LinAlgError:  # no convergence (there is no eigh_ex): reject
        return None
    tol = 8 * m.shape[0] * torch.finfo(m.dtype).eps * float(w.abs().max())
    if not bool(torch.isfinite(w).all()) or float(w.min()) < -tol:
        return None
    return w.clamp_min(0), q


def moments(mean: Tensor, cov: Tensor, thetas: Tensor, scores: Tensor,
            lam: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """U and V of q_t = N(``mean``, ``cov``) and the batch (1/B moments), the centred
    scores g_b − ḡ, ḡ and x̄."""
    b = thetas.shape[0]
    xbar, gbar = thetas.mean(0), scores.mean(0)
    xc, gc = thetas - xbar, scores - gbar
    w = lam / (1 + lam)
    dm = mean - xbar
    u = lam * (gc.T @ gc) / b + w * torch.outer(gbar, gbar)
    v = cov + lam * (xc.T @ xc) / b + w * torch.outer(dm, dm)
    return u, v, gc, gbar, xbar


def match_cov(u: Tensor, v: Tensor) -> Tensor | None:
    """Σ = 2V(I + (I + 4UV)^{1/2})⁻¹ in the symmetric form L·Q·diag(2/(1+√(1+4w)))·QᵀLᵀ,
    or ``None`` (V not positive definite, U not PSD, NaN)."""
    chol, info = torch.linalg.cholesky_ex(_sym(v))
    if int(info) != 0 or not bool(torch.isfinite(chol).all()):
        return None
    eig = _psd_eigh(chol.T @ u @ chol)
    if eig is None:
        return None
    w, q = eig
    lq = chol @ q
    return _sym((lq * (2 / (1 + torch.sqrt(1 + 4 * w)))) @ lq.T)


def lowrank_cov(v: Tensor, factor: Tensor) -> Tensor | None:
    """Σ = V − A(½I + (QᵀVQ + ¼I)^{1/2})⁻²Aᵀ, A = VQ, for U = QQᵀ (``factor`` Q, d × r)."""
    a = v @ factor
    eig = _psd_eigh(factor.T @ a)
    if eig is None:
        return None
    e, r = eig
    ar = a @ r
    return _sym(v - (ar * (0.5 + torch.sqrt(e + 0.25)) ** -2) @ ar.T)


def full_update(lam_t: FullGaussianParams, thetas: Tensor, scores: Tensor, lam: float,
                lowrank: bool = False) -> FullGaussianParams | None:
    """One full (or low-rank) BaM update from draws and scores ``(B, d)``; ``None`` if it
    fails numerically."""
    mean = lam_t.mean
    u, v, gc, gbar, xbar = moments(mean, full_gaussian.cov(lam_t), thetas, scores, lam)
    if lowrank:
        factor = torch.cat([math.sqrt(lam / thetas.shape[0]) * gc.T,
                            math.sqrt(lam / (1 + lam)) * gbar[:, None]], dim=1)
        cov = lowrank_cov(v, factor)
    else:
        cov = match_cov(u, v)
    if cov is None:
        return None
    w = lam / (1 + lam)
    return full_gaussian.from_cov(mean / (1 + lam) + w * (cov @ gbar + xbar), cov)


def diag_update_leaf(lam: float) -> Callable[..., tuple[Tensor, Tensor]]:
    """The scalar BaM update of one leaf (draws along dimension 0): new mean, new variance."""
    w = lam / (1 + lam)

    def update(mu: Tensor, rho: Tensor, thetas: Tensor,
               scores: Tensor) -> tuple[Tensor, Tensor]:
        xbar, gbar = thetas.mean(0), scores.mean(0)
        u = lam * ((scores - gbar) ** 2).mean(0) + w * gbar**2
        v = ((2 * rho).exp() + lam * ((thetas - xbar) ** 2).mean(0) + w * (mu - xbar) ** 2)
        var = 2 * v / (1 + torch.sqrt(1 + 4 * u * v))
        return mu / (1 + lam) + w * (var * gbar + xbar), var

    return update


def num_params(lam: DiagGaussianParams | FullGaussianParams) -> int:
    """d: the number of coordinates q is over."""
    mean = lam.mean if isinstance(lam, FullGaussianParams) else lam.mu
    return sum(t.numel() for t in tree_leaves(mean))


@dataclass(frozen=True)
class BaM(GaussianProjectionVI):
    """Batch and match: proximal covariance-weighted score matching (module docstring).

    Args:
        num_samples: B draws (and scores) per step.
        covariance: "full" or "lowrank" (the same Σ, O(d²B + B³) per step; both Targets
            only), or "diag" (any pytree); None: full on a Target, diag on a network.
        lam_scale: the factor of the built-in schedules' step size λ_t; None: 1 on a
            Target, 1/(4d) on a network (module docstring). Must stay None or 1 with a callable
            ``schedule``.
        schedule: λ_t after t steps, d parameters: "inverse" (lam_scale·B·d/(t + 1)),
            "constant" (lam_scale·B·d), or a callable t -> λ_t.
        init_std: σ of q₀ around the initial parameters; None: 1 on a Target, 0.01 on a
            network.
        patience: rejected updates in a row before :meth:`GaussianProjectionVI.status` reports
            ``"numerical_failure"``.
    """

    problem: Problem
    num_samples: int = 16
    covariance: Literal["full", "diag", "lowrank"] | None = None
    lam_scale: float | None = None
    schedule: Literal["inverse", "constant"] | Callable[[int], float] = "inverse"
    init_std: float | None = None
    patience: int = DEFAULT_PATIENCE
    name: str = "bam"
    VERSION: ClassVar[int] = 2  # 2: a network's noise drawn in chunks (bdlkit.core.noise)

    def __post_init__(self) -> None:
        setup(self)
        if self.lam_scale is None:
            network = not (callable(self.schedule) or isinstance(self.problem, Target))
            d = sum(t.numel() for t in tree_leaves(self.problem.init_params(torch.Generator())))
            object.__setattr__(self, "lam_scale", NETWORK_LAM_SCALE / d if network else 1.0)
        schedules = field_choices(self, "schedule")
        if not self.lam_scale > 0 or not math.isfinite(self.lam_scale):
            raise ValueError(f"lam_scale must be a finite number > 0, got {self.lam_scale!r}")
        if callable(self.schedule):
            if self.lam_scale != 1.0:
                raise ValueError("lam_scale applies to the built-in schedules only; fold it "
                                 "into the callable schedule")
        elif self.schedule not in schedules:
            raise ValueError(f"schedule must be one of {schedules} or a callable t -> λ_t, "
                             f"got {self.schedule!r}")
        object.__setattr__(self, "lam_scale", float(self.lam_scale))

    def step_size(self, t: int, d: int) -> float:
        """λ_t after t steps, for d parameters (module docstring)."""
        if callable(self.schedule):
            lam = float(self.schedule(t))
            if not lam > 0 or not math.isfinite(lam):
                raise ValueError(f"schedule({t}) must be a finite number > 0, got {lam!r}")
            return lam
        base = self.lam_scale * self.num_samples * d
        return base / (t + 1) if self.schedule == "inverse" else base

    def update(self, lam_t: DiagGaussianParams | FullGaussianParams, thetas: TensorTree,
               scores: TensorTree, lam: float) -> DiagGaussianParams | FullGaussianParams | None:
        """q_{t+1} from the draws and their scores at step size ``lam``, or ``None``."""
        if isinstance(lam_t, FullGaussianParams):
            return full_update(lam_t, thetas, scores, lam, self.covariance == "lowrank")
        mean, var = leafwise(diag_update_leaf(lam), lam_t.mu, lam_t.rho, thetas, scores)
        return diag_from_var(mean, var)

    def step(self, state: BaMState, batch: Batch) -> tuple[BaMState, Info]:
        gen, thetas, value, scores = self.draw(state, batch)
        lam = self.step_size(state.step, num_params(state.lam))
        return accept_or_reject(state, self.update(state.lam, thetas, scores, lam), gen, value)


build = builder(BaM)

__all__ = ["BaM", "BaMState", "build", "diag_update_leaf", "full_update", "lowrank_cov",
           "match_cov", "moments"]


ALGORITHM = BaM
