"""The proximal (closed-form) SSM-prox step for the diagonal Gaussian (``docs/score_vi.md``).

Per iteration the paper's objective E_{q_t}[α‖∇log q − ∇log q_t‖² + ‖∇log q − ŝ‖²] is a
quadratic in the natural parameters a = 1/σ², b = a·μ of each coordinate, so its argmin
is exact: a per-coordinate regression of the score on θ. With the anchor q_t = N(μ_t, σ_t²),
S draws θ_k ~ q_t, their scores split into the likelihood part L̂_k and the prior's exact
score s_p and precision P (:mod:`.prior_split`; s_p = P = 0 on a Target)::

    â   = P − Ĉ / v                   Ĉ: a covariance of θ − μ_t with L̂ (``estimator``)
    ā   = average of â over steps     (``curvature_decay`` β; ``hess_init``; ``curvature_update``)
    a'  = max((1 − d) a_t + d (α a_t + ā) / (1 + α), a_min)   the argmin's precision
    ĝ   = EMA_β1(mean_k L̂_k) / (1 − β1^t) + s_p  [+ ā (m1 − μ_t) for loss="mc"]
    μ'  = μ_t + ω_t ĝ / ((1 + α) a'),  each coordinate within ``max_step``·σ'

At β = β1 = 0 and ω_t = d = 1 this is the argmin itself. d is the precision's damping:
1 when the average starts at ``hess_init`` (it is the slow part then), the unscheduled ω
when it starts at the first estimate (``hess_init="estimate"``: a single Hutchinson sample
is too noisy to jump to, and the relaxation at rate ω/(1 + α) from 1/σ₀² is what keeps a
tiny σ₀ safe). ``estimator``: "pair" (antithetic
pairs θ = μ_t ± σ_t ε sharing a minibatch: Ĉ = mean_k (θ_k − μ_t) L̂_k is already centred,
the finite-difference Hutchinson estimate ε ⊙ H σ_t ε/σ_t of the Hessian diagonal, with no
minibatch noise and none growing as σ_t shrinks), "centred" (independent draws,
Σ (θ_k − μ_t)(L̂_k − L̂̄)/(S − 1), S ≥ 2) or "price" (IVON's uncentred mean_k (θ_k − μ_t) L̂_k:
any S, but its noise grows with the size of L̂(μ_t) over σ_t). ``loss="mc"``: the exact least squares of
the Monte Carlo loss (m1 = mean θ_k, v their 1/S variance) instead.

The curvature average: with ``hess_init`` h0 (per datum) it starts at IVON's
a₀ = λ0·h0 + P (λ0 = N_eff/T) and ``curvature_update="riemannian"`` is IVON's
positivity-preserving ā ← β ā + (1 − β) â + ½(1 − β)²(ā − â)²/ā ("linear": without the last
term); with ``hess_init=None`` it is the bias-corrected EMA Σ_j β^{t−j}(1 − β) â_j /
Σ_j β^{t−j}(1 − β), which starts at the first estimate. Non-finite estimates are dropped
from it and counted. The settings that turn this step into IVON's exactly (``docs/ivon.md``):
α = 0, estimator "price" with S = 1, ω = lr·(h0 + δ), hess_init h0, β = β2, β1, riemannian,
no clip and an inactive floor.

ω_t is ``omega`` times the cosine factor of :mod:`.schedule`. On a Target the divergence
guard watches ``δ_t = max_i |Δμ_i|·√a_i``, averaged per window of ``GUARD_WINDOW`` steps: when
the window mean grows by more than ``GUARD_GROWTH`` over the previous one in
``GUARD_PATIENCE`` windows in a row, or λ or a draw's score becomes non-finite, λ is
restored from the start of the earlier window and ω halved; after ``GUARD_MAX_HALVINGS``
halvings it raises, recommending the gradient solver. The growth test waits while σ
itself is still moving (median ``|Δ log σ|`` over the window above ``SETTLED_LOG_SIGMA``)
and ignores means below ``GUARD_TOL`` σ. On a network the guard is off (minibatch noise
makes the step's size a poor divergence signal); a non-finite step stops the run with the
runner's NaN report. The window sizes are tuning values, not derived.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from bdlkit.algorithms.vi.common import positive_average, unzip
from bdlkit.algorithms.vi.prior_split import PriorTerms, likelihood_scores, unchecked
from bdlkit.core.errors import NonFiniteError
from bdlkit.core.tree import (
    TensorTree,
    all_finite,
    pytree_dataclass,
    tree_leaves,
    tree_map,
    zeros_like,
)
from bdlkit.families.diag_gaussian import DiagGaussianParams

GUARD_WINDOW = 10
GUARD_GROWTH = 2.0
GUARD_MAX_HALVINGS = 5
GUARD_PATIENCE = 2  # growing windows in a row before backing off (minibatch noise)
GUARD_TOL = 1e-6  # mean standardised steps below this are convergence, not divergence
SETTLED_LOG_SIGMA = 0.35  # the growth test waits while the median σ changes by > √2 a window
ESTIMATORS = ("pair", "centred", "price")
CURVATURE_UPDATES = ("riemannian", "linear")


@dataclass(frozen=True)
class Settings:
    """One step's settings, resolved by :class:`~.score_vi.ScoreVI` (its docstring)."""

    alpha: float  # α_t
    omega: float  # ω_t: the scheduled damping of the mean
    damping: float  # d: the precision's damping (1 with hess_init, else ω)
    decay: float  # β of the curvature average
    start: bool  # the average starts at a₀ (hess_init) rather than at the first estimate
    riemannian: bool  # IVON's second-order term in the average
    momentum: float  # β1
    estimator: str
    loss: str
    max_step: float
    guard: bool  # the divergence guard (Targets)


@pytree_dataclass
class ClosedFormState:
    """The closed form's solver state. ``GAUSSIAN_FIELDS`` hold iterates of q and
    ``PRECISION_FIELDS`` a precision average: a change of variables (``bdlkit.algorithms.vi.laplace``)
    maps them with λ."""

    GAUSSIAN_FIELDS: ClassVar[tuple[str, ...]] = ("saved_prev", "saved_cur")
    PRECISION_FIELDS: ClassVar[tuple[str, ...]] = ("curvature",)

    omega: Tensor  # the damping ω (halved by the guard; the schedule multiplies it)
    halvings: int
    saved_prev: DiagGaussianParams  # λ at the start of the previous window
    saved_cur: DiagGaussianParams  # λ at the start of the current window
    delta_sum: Tensor  # Σ δ over the current window
    prev_mean: Tensor  # mean δ of the previous window (NaN: none yet)
    grown: int  # consecutive windows whose mean δ grew by more than GUARD_GROWTH
    window_steps: int  # steps in the current window (a back-off starts a new one)
    curvature: TensorTree  # ā (hess_init given), or Σ_j β^(t−j)(1 − β) â_j (bias-corrected)
    weight: TensorTree  # 1, or Σ_j β^(t−j)(1 − β) over the steps whose â was finite
    momentum: TensorTree  # the EMA of mean_k L̂_k (β1), not debiased


def init(lam: DiagGaussianParams, omega: float, a0: float | None) -> ClosedFormState:
    """The state at λ₀: the curvature average at ``a0`` (IVON's start) or empty."""
    ref = tree_leaves(lam.mu)[0]
    scalar = {"dtype": torch.float64, "device": ref.device}

    def full(value: float) -> TensorTree:
        return tree_map(lambda m: torch.full_like(m, value), lam.mu)

    return ClosedFormState(
        omega=torch.tensor(float(omega), **scalar), halvings=0, saved_prev=lam, saved_cur=lam,
        delta_sum=torch.zeros((), **scalar), prev_mean=torch.tensor(math.nan, **scalar), grown=0,
        window_steps=0, curvature=zeros_like(lam.mu) if a0 is None else full(a0),
        weight=zeros_like(lam.mu) if a0 is None else full(1.0), momentum=zeros_like(lam.mu))


def anchor_covariance(theta: Tensor, mu_t: Tensor, s: Tensor, estimator: str) -> Tensor:
    """The estimate of E[(θ − μ_t) s] from draws of the anchor: for antithetic pairs, whose
    θ_k − μ_t sum to zero, Σ_k (θ_k − μ_t) s_k/S (already centred); for independent draws
    the centred Σ_k (θ_k − μ_t)(s_k − s̄)/(S − 1); "price": the uncentred mean."""
    dev = theta - mu_t
    if estimator == "centred":
        return (dev * (s - s.mean(0))).sum(0) / (theta.shape[0] - 1)
    return (dev * s).mean(0)


def curvature(anchor: DiagGaussianParams, thetas: TensorTree, scores: TensorTree, loss: str,
              estimator: str) -> tuple[TensorTree, TensorTree]:
    """``(−Ĉ/v, m1)`` per coordinate from draws of the anchor and their (likelihood)
    scores (module docstring)."""
    noise = tree_map(torch.sub, thetas, anchor.mu)
    c_hat, shift = _curvature(noise, tree_map(_precision, anchor.rho), scores, loss, estimator)
    return c_hat, anchor.mu if shift is None else tree_map(torch.add, anchor.mu, shift)


def _precision(rho: Tensor) -> Tensor:
    """a = 1/σ² = exp(−2ρ)."""
    return torch.mul(rho, -2.0).exp_()


def _curvature(noise: TensorTree, a_t: TensorTree, scores: TensorTree, loss: str,
               estimator: str, plus: float = 0.0) -> tuple[TensorTree, TensorTree | None]:
    """``−Ĉ/v + plus`` from the draws' offsets ``noise`` = θ_k − μ_t and the anchor's
    precisions ``a_t`` (both left untouched), and m1 − μ_t (None for loss="rb", where
    m1 = μ_t). For loss="rb" three passes: the product, the sum over draws, the rest."""
    if loss == "rb":
        centred, start = estimator == "centred", unchecked(plus, tree_leaves(noise)[0].device)

        def rb(e: Tensor, a: Tensor, s: Tensor) -> Tensor:
            total = torch.mul(e, s - s.mean(0) if centred else s).sum(0)
            count = e.shape[0] - 1 if centred else e.shape[0]
            return torch.addcmul(start, total, a, value=-1.0 / count)

        return tree_map(rb, noise, a_t, scores), None

    def mc(e: Tensor, s: Tensor) -> tuple[Tensor, Tensor]:
        shift = e.mean(0)  # m1 − μ_t
        dev = e - shift
        v = dev.square().mean(0)
        return dev.mul_(s - s.mean(0)).mean(0).div_(v).neg_().add_(plus), shift

    return unzip(tree_map(mc, noise, scores), 2)


def step(lam: DiagGaussianParams, anchor: DiagGaussianParams, noise: TensorTree,
         scores: TensorTree, prior: PriorTerms, state: ClosedFormState, cfg: Settings, *,
         a_min: float, t: int) -> tuple[DiagGaussianParams, ClosedFormState, dict]:
    """One argmin update of λ from the averaged curvature and momentum, checked by the
    guard on a Target. ``noise`` holds the draws' offsets θ_k − μ_t from the anchor.

    Each line of the module docstring is one element-wise pass or two over fresh tensors
    (the settings' trivial terms skipped: ā = c with ``hess_init``, no clip at an infinite
    ``max_step``, no term in m1 − μ_t for loss="rb")."""
    lik = likelihood_scores(scores, noise, prior)
    a_t = tree_map(_precision, anchor.rho)
    a_hat, shift = _curvature(noise, a_t, lik, cfg.loss, cfg.estimator, prior.precision)
    counts: dict[str, list[Tensor]] = {"curvature_nonfinite": [], "precision_clipped": [],
                                       "step_clipped": []}  # summed once: one host sync
    b, b1, alpha, omega = cfg.decay, cfg.momentum, cfg.alpha, cfg.omega
    debias = 1.0 - b1 ** (t + 1)

    def average(c: Tensor, w: Tensor, ah: Tensor):  # ah = â = −Ĉ/v + P
        ok = torch.sub(ah, ah).eq(0)  # finite (inf − inf and NaN are NaN): two passes
        counts["curvature_nonfinite"].append(ok.numel() - ok.sum())
        if cfg.start:  # w = 1: the average is ā itself
            ah = torch.where(ok, ah, c)  # a dropped estimate: no change
            if cfg.riemannian:  # IVON's average, δ = 0: ā is the precision itself
                return positive_average(c, ah, b, c), w
            return torch.lerp(c, ah, 1 - b), w
        ah = torch.where(ok, ah, c / w.clamp_min(1e-300))
        return torch.where(ok, b * c + (1 - b) * ah, b * c), torch.where(ok, b * w + (1 - b),
                                                                         b * w)

    curv, weight = unzip(tree_map(average, state.curvature, state.weight, a_hat), 2)
    steps: list[Tensor] = []  # per leaf: the largest standardised move of μ

    def update(mu, rho, a_t, c, w, g_lik, s_p, g_mom, shift=None):
        a_bar = c if cfg.start else torch.where(w > 0, c / w.clamp_min(1e-300), a_t)
        a_next = torch.lerp(a_bar, a_t, alpha / (1 + alpha))  # (α a_t + ā)/(1 + α)
        if cfg.damping != 1.0:
            a_next = torch.lerp(_precision(rho), a_next, cfg.damping)
        counts["precision_clipped"].append((a_next < a_min).sum())
        a_next.clamp_min_(a_min)
        g_mom = torch.lerp(g_mom, g_lik.mean(0), 1 - b1)
        g = torch.add(s_p, g_mom, alpha=1 / debias)
        if shift is not None:
            g.addcmul_(a_bar, shift)  # ā (m1 − μ_t)
        if cfg.max_step == math.inf:  # no trust region: μ + ω g / ((1 + α) a')
            mu_next = torch.addcdiv(mu, g, a_next, value=omega / (1 + alpha))
            counts["step_clipped"].append(torch.zeros((), dtype=torch.int64))
        else:
            move = g.mul_(omega / (1 + alpha)).div_(a_next)
            bound = a_next.rsqrt().mul_(cfg.max_step)
            far = move.abs() > bound
            counts["step_clipped"].append(far.sum())
            mu_next = mu + torch.where(far, bound.copysign(move), move)
        if cfg.guard:  # the largest standardised move of μ, which the guard watches
            steps.append(((mu_next - mu).abs() * a_next.sqrt()).max())
        return a_next, mu_next, g_mom

    fields = (lam.mu, lam.rho, a_t, curv, weight, lik, prior.score, state.momentum)
    a_next, mu_next, momentum = unzip(tree_map(update, *fields) if shift is None
                                       else tree_map(update, *fields, shift), 3)
    new = DiagGaussianParams(mu=mu_next, rho=tree_map(lambda a: a.log().mul_(-0.5), a_next))
    state = dataclasses.replace(state, curvature=curv, weight=weight, momentum=momentum)
    if not cfg.guard:
        summary = torch.stack([torch.stack(v).sum().double() for v in counts.values()]).tolist()
        return new, state, {**dict(zip(counts, summary)), "omega": omega}
    summary = torch.stack([torch.stack(v).sum().double() for v in counts.values()]
                          + [torch.stack(steps).max().double()]).tolist()
    info = {**dict(zip(counts, summary[:-1])), "omega": omega}
    return (*guard(new, state, summary[-1], t), info)


def guard(new: DiagGaussianParams, state: ClosedFormState, delta: float,
          t: int) -> tuple[DiagGaussianParams, ClosedFormState]:
    """The divergence guard of a Target (module docstring): the step's λ and state, or the
    restored ones after a back-off."""
    if not math.isfinite(delta) or not all_finite(new):
        return back_off(state, t, "μ or σ became non-finite")
    delta_sum = state.delta_sum + delta
    window_steps = state.window_steps + 1
    if window_steps < GUARD_WINDOW:
        return new, dataclasses.replace(state, delta_sum=delta_sum, window_steps=window_steps)
    mean = delta_sum / window_steps
    moving = _median_log_sigma_change(new, state.saved_cur) > SETTLED_LOG_SIGMA
    grew = not moving and bool(torch.isfinite(state.prev_mean)) and mean > GUARD_TOL \
        and mean > GUARD_GROWTH * state.prev_mean.clamp_min(GUARD_TOL)
    grown = state.grown + 1 if grew else 0
    if grown >= GUARD_PATIENCE:
        return back_off(state, t, f"the mean step grew {GUARD_PATIENCE} windows in a row, to "
                        f"{float(mean):.3g}")
    return new, dataclasses.replace(state, saved_prev=state.saved_cur, saved_cur=new,
                                    delta_sum=torch.zeros_like(delta_sum), prev_mean=mean,
                                    grown=grown, window_steps=0)


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


__all__ = ["CURVATURE_UPDATES", "ClosedFormState", "ESTIMATORS", "GUARD_MAX_HALVINGS",
           "GUARD_WINDOW", "Settings", "anchor_covariance", "back_off", "curvature", "init",
           "step"]
