"""The proximal (closed-form) SSM-prox step for the diagonal Gaussian (``docs/score_vi.md``).

Per iteration the paper's objective E_{q_t}[α‖∇log q − ∇log q_t‖² + ‖∇log q − ŝ‖²] is a
quadratic in the natural parameters a = 1/σ², b = a·μ of each coordinate, so its argmin
is exact: a per-coordinate regression of the score on θ. With the anchor q_t = N(μ_t, σ_t²)
and S draws θ_k ~ q_t::

    ŝ̄ = mean_k ŝ_k
    â = −Ĉ / v                 Stein: E[â] = E_{q_t}[−∂²_ii log π]  (a diagonal Hessian)
    ā = EMA_β(â)               curvature averaged over steps (β = ``curvature_decay``)
    a_new = (α a_t + ā) / (1 + α),   b_new = (α b_t + ŝ̄ + ā m1) / (1 + α)
    a ← max((1 − ω) a + ω a_new, a_min),   μ ← μ + ω (ŝ̄ + ā (m1 − μ_t)) / ((1 + α) a)

``loss="rb"`` (Rao-Blackwellised): m1 = μ_t, v = σ_t² and the *centred* cross-covariance
Ĉ = Σ_k (θ_k − μ_t)(ŝ_k − ŝ̄)/(S − 1), unbiased for E[(θ − μ_t) ŝ] and free of the noise
∝ ``|μ_t − mode|/σ_t`` that the uncentred mean_k (θ_k − μ_t) ŝ_k carries (it blew up from a
tiny σ₀). With antithetic pairs θ = μ_t ± σ_t ε the draws sum to μ_t, so Ĉ = mean_k
(θ_k − μ_t) ŝ_k is already centred and unbiased: it is the finite-difference Hutchinson
estimate ε ⊙ H(σ_t ε)/σ_t of the Hessian diagonal, whose noise comes from the Hessian's
off-diagonal coupling only. The minibatch noise of ŝ cancels when the pair shares one
minibatch, and no part of it grows as σ_t shrinks. ``loss="mc"``: the exact least squares
of the Monte Carlo loss (m1 = mean θ_k, v the 1/S variance). The μ form of the last line
is algebra on the damped b update. It stays bounded when a is clipped at ``a_min``, where
b/a would not be.

Damping ω is a stronger proximal weight (α_eff = (1 + α)/ω − 1): the step is a natural
gradient step of size ω/(1 + α) on the mean, and the precision relaxes to ā at that rate,
so σ moves by a fixed fraction per step whatever its scale (tiny σ₀ are no problem). On a
Gaussian target N(m, Λ⁻¹), D = diag Λ, the mean iteration converges iff
ω·λ_max(D⁻¹Λ) < 2(1 + α).

The divergence guard: ``δ_t = max_i |Δμ_i|·√a_i``, averaged per window of ``GUARD_WINDOW``
steps. When the window mean grows by more than ``GUARD_GROWTH`` over the previous one in
``GUARD_PATIENCE`` windows in a row (one window's growth is often minibatch noise on a
network), or λ becomes non-finite, or a draw's score does, λ is restored from the start
of the earlier window and ω halved; after ``GUARD_MAX_HALVINGS`` halvings it raises,
recommending the gradient solver. The growth test waits while σ itself is still moving
(median ``|Δ log σ|`` over the window above ``SETTLED_LOG_SIGMA``: as σ grows from a tiny σ₀
the standardised step grows with it, which is not divergence) and ignores means below
``GUARD_TOL`` σ (convergence). A non-finite â is dropped from the average and a precision
below ``a_min`` clipped, both counted in ``info``. The window sizes are tuning values,
not derived.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import ClassVar

import torch
from torch import Tensor

from bdlkit.core.errors import NonFiniteError
from bdlkit.core.tree import (
    TensorTree,
    all_finite,
    pytree_dataclass,
    tree_leaves,
    tree_map,
    unzip_pairs,
    zeros_like,
)
from bdlkit.families.diag_gaussian import DiagGaussianParams

GUARD_WINDOW = 10
GUARD_GROWTH = 2.0
GUARD_MAX_HALVINGS = 5
GUARD_PATIENCE = 2  # growing windows in a row before backing off (minibatch noise)
GUARD_TOL = 1e-6  # mean standardised steps below this are convergence, not divergence
SETTLED_LOG_SIGMA = 0.35  # the growth test waits while the median σ changes by > √2 a window


@pytree_dataclass
class ClosedFormState:
    """The closed form's solver state. ``GAUSSIAN_FIELDS`` hold iterates of q and
    ``PRECISION_FIELDS`` a precision average: a change of variables (``bdlkit.algorithms.vi.laplace``)
    maps them with λ."""

    GAUSSIAN_FIELDS: ClassVar[tuple[str, ...]] = ("saved_prev", "saved_cur")
    PRECISION_FIELDS: ClassVar[tuple[str, ...]] = ("curvature",)

    omega: Tensor  # current damping
    halvings: int
    saved_prev: DiagGaussianParams  # λ at the start of the previous window
    saved_cur: DiagGaussianParams  # λ at the start of the current window
    delta_sum: Tensor  # Σ δ over the current window
    prev_mean: Tensor  # mean δ of the previous window (NaN: none yet)
    grown: int  # consecutive windows whose mean δ grew by more than GUARD_GROWTH
    window_steps: int  # steps in the current window (a back-off starts a new one)
    curvature: TensorTree  # Σ_j β^(t−j) (1 − β) â_j: the un-normalised average of â
    weight: TensorTree  # Σ_j β^(t−j) (1 − β) over the steps whose â was finite


def init(lam: DiagGaussianParams, omega: float) -> ClosedFormState:
    ref = tree_leaves(lam.mu)[0]
    scalar = {"dtype": torch.float64, "device": ref.device}
    return ClosedFormState(
        omega=torch.tensor(float(omega), **scalar), halvings=0, saved_prev=lam, saved_cur=lam,
        delta_sum=torch.zeros((), **scalar), prev_mean=torch.tensor(math.nan, **scalar), grown=0,
        window_steps=0,
        curvature=zeros_like(lam.mu), weight=zeros_like(lam.mu))


def anchor_covariance(theta: Tensor, mu_t: Tensor, s: Tensor, antithetic: bool) -> Tensor:
    """The unbiased estimate of E[(θ − μ_t) ŝ] from draws of the anchor: the centred
    Σ_k (θ_k − μ_t)(ŝ_k − ŝ̄)/(S − 1), or for antithetic pairs, whose θ_k − μ_t sum to
    zero, Σ_k (θ_k − μ_t) ŝ_k/S (the same sum, already centred)."""
    dev = theta - mu_t
    if antithetic:
        return (dev * s).mean(0)
    return (dev * (s - s.mean(0))).sum(0) / (theta.shape[0] - 1)


def curvature(anchor: DiagGaussianParams, thetas: TensorTree, scores: TensorTree, loss: str,
              antithetic: bool) -> tuple[TensorTree, TensorTree]:
    """``(â, m1)`` per coordinate from draws of the anchor (module docstring)."""
    def per_leaf(mu_t: Tensor, rho_t: Tensor, theta: Tensor, s: Tensor):
        if loss == "mc":
            m1 = theta.mean(0)
            v = ((theta - m1) ** 2).mean(0)
            c = ((theta - m1) * (s - s.mean(0))).mean(0)
            return -c / v, m1
        return -anchor_covariance(theta, mu_t, s, antithetic) * (-2 * rho_t).exp(), mu_t

    return unzip_pairs(tree_map(per_leaf, anchor.mu, anchor.rho, thetas, scores))


def step(lam: DiagGaussianParams, anchor: DiagGaussianParams, thetas: TensorTree,
         scores: TensorTree, alpha: float, state: ClosedFormState, *, a_min: TensorTree,
         decay: float, loss: str, antithetic: bool, max_step: float, t: int
         ) -> tuple[DiagGaussianParams, ClosedFormState, dict[str, float]]:
    """One damped argmin update of λ with the averaged curvature, checked by the guard."""
    omega = float(state.omega)
    a_hat, m1 = curvature(anchor, thetas, scores, loss, antithetic)
    counts: dict[str, list[Tensor]] = {"curvature_nonfinite": [], "precision_clipped": [],
                                       "step_clipped": []}  # summed once: one host sync

    def average(c: Tensor, w: Tensor, ah: Tensor):
        ok = torch.isfinite(ah)
        counts["curvature_nonfinite"].append((~ok).sum())
        c = torch.where(ok, decay * c + (1 - decay) * ah, decay * c)
        w = torch.where(ok, decay * w + (1 - decay), decay * w)
        return c, w

    curv, weight = unzip_pairs(tree_map(average, state.curvature, state.weight, a_hat))

    def update(a, mu, mu_t, rho_t, c, w, s, m, floor):
        a_t = (-2 * rho_t).exp()
        a_bar = torch.where(w > 0, c / w.clamp_min(1e-300), a_t)  # no finite â yet: keep a_t
        a_new = (alpha * a_t + a_bar) / (1 + alpha)
        a_next = (1 - omega) * a + omega * a_new
        low = a_next < floor
        counts["precision_clipped"].append(low.sum())
        a_next = torch.where(low, floor, a_next)
        move = omega * (s.mean(0) + a_bar * (m - mu_t)) / ((1 + alpha) * a_next)
        bound = max_step * a_next.rsqrt()
        far = move.abs() > bound
        counts["step_clipped"].append(far.sum())
        mu_next = mu + torch.where(far, bound.copysign(move), move)
        steps.append(((mu_next - mu).abs() * a_next.sqrt()).max())
        return a_next, mu_next

    steps: list[Tensor] = []  # per leaf: the largest standardised move of μ
    a_cur = tree_map(lambda r: (-2 * r).exp(), lam.rho)
    a_next, mu_next = unzip_pairs(tree_map(update, a_cur, lam.mu, anchor.mu, anchor.rho, curv,
                                      weight, scores, m1, a_min))
    new = DiagGaussianParams(mu=mu_next, rho=tree_map(lambda a: -0.5 * a.log(), a_next))
    summary = torch.stack([torch.stack(v).sum().double() for v in counts.values()]
                          + [torch.stack(steps).max().double()]).tolist()
    info = {**dict(zip(counts, summary[:-1])), "omega": omega}
    delta = summary[-1]
    if not math.isfinite(delta) or not all_finite(new):
        lam_b, state_b = back_off(state, t, "μ or σ became non-finite")
        return lam_b, state_b, info
    delta_sum = state.delta_sum + delta
    state = dataclasses.replace(state, curvature=curv, weight=weight)
    window_steps = state.window_steps + 1
    if window_steps < GUARD_WINDOW:
        return new, dataclasses.replace(state, delta_sum=delta_sum,
                                        window_steps=window_steps), info
    mean = delta_sum / window_steps
    moving = _median_log_sigma_change(new, state.saved_cur) > SETTLED_LOG_SIGMA
    grew = not moving and bool(torch.isfinite(state.prev_mean)) and mean > GUARD_TOL \
        and mean > GUARD_GROWTH * state.prev_mean.clamp_min(GUARD_TOL)
    grown = state.grown + 1 if grew else 0
    if grown >= GUARD_PATIENCE:
        lam_b, state_b = back_off(state, t, f"the mean step grew {GUARD_PATIENCE} windows in a "
                                  f"row, to {float(mean):.3g}")
        return lam_b, state_b, info
    return new, dataclasses.replace(state, saved_prev=state.saved_cur, saved_cur=new,
                                    delta_sum=torch.zeros_like(delta_sum), prev_mean=mean,
                                    grown=grown, window_steps=0), info


def _median_log_sigma_change(new: DiagGaussianParams, old: DiagGaussianParams) -> float:
    """Median over coordinates of ``|Δ log σ|`` across the window."""
    diffs = [(n - o).abs().reshape(-1) for n, o in zip(tree_leaves(new.rho),
                                                        tree_leaves(old.rho))]
    return float(torch.cat(diffs).median())


def back_off(state: ClosedFormState, t: int, why: str
              ) -> tuple[DiagGaussianParams, ClosedFormState]:
    halvings = state.halvings + 1
    if halvings > GUARD_MAX_HALVINGS:
        raise NonFiniteError(
            f"score_vi closed-form solver diverged at step {t + 1} ({why}) even after halving "
            f"omega {GUARD_MAX_HALVINGS} times (now {float(state.omega):.3g}); the posterior "
            "is too strongly coupled for this damping: pass a smaller omega or use "
            "solver='gradient'"
        )
    omega = state.omega / 2
    warnings.warn(f"score_vi closed form: {why} at step {t + 1}; restoring the iterate of "
                  f"{GUARD_WINDOW}-{2 * GUARD_WINDOW} steps ago and halving omega to "
                  f"{float(omega):.3g}", stacklevel=3)
    restored = state.saved_prev
    return restored, dataclasses.replace(
        state, omega=omega, halvings=halvings, saved_prev=restored, saved_cur=restored,
        delta_sum=torch.zeros_like(state.delta_sum),
        prev_mean=torch.full_like(state.prev_mean, math.nan), grown=0, window_steps=0)


__all__ = ["ClosedFormState", "GUARD_MAX_HALVINGS", "GUARD_WINDOW", "back_off", "curvature",
           "init", "step"]
