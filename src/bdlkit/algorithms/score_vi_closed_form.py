"""The closed-form SSM-prox step for the diagonal Gaussian, damped and guarded (``algorithms.md`` B.4.4).

In natural parameters a = 1/σ², b = a·μ the loss is quadratic per coordinate; with the
Rao-Blackwellised moments of the anchor q_t (m1 = μ_t, v = σ_t², Ĉ = mean_k (θ_k − μ_t) ŝ_k)::

    â = −Ĉ / v
    a_new = (α a_t + â) / (1 + α),     b_new = (α b_t + ŝ̄ + â m1) / (1 + α)
    a ← (1 − ω) a + ω a_new,           b ← (1 − ω) b + ω b_new,      a ≥ a_min

Undamped it is a Jacobi iteration on the mean that converges iff
ω·λ_max(D⁻¹Λ) < 2(1 + α) on a Gaussian target N(m, Λ⁻¹), D = diag Λ (B.4.5). The guard:
δ_t = max_i |Δμ_i|·√a_i; per window of ``GUARD_WINDOW`` steps, if the window's mean δ grew
by more than ``GUARD_GROWTH`` over the previous window's (or a, b became non-finite), restore
(a, b) from the start of the earlier window and halve ω (also at once when a precision
had to be clipped at a_min, the first sign of overshooting); after ``GUARD_MAX_HALVINGS``
halvings raise, recommending the gradient solver. Window sizes are tuning values, not derived.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from ..errors import NonFiniteError
from ..families import diag_gaussian as family
from ..families.diag_gaussian import DiagGaussianParams
from ..tree import TensorTree, pytree_dataclass, tree_leaves, tree_map

GUARD_WINDOW = 10
GUARD_GROWTH = 2.0
GUARD_MAX_HALVINGS = 5


@pytree_dataclass
class GuardState:
    omega: Tensor  # current damping
    halvings: int
    saved_prev: DiagGaussianParams  # λ at the start of the previous window
    saved_cur: DiagGaussianParams  # λ at the start of the current window
    delta_sum: Tensor  # Σ δ over the current window
    prev_mean: Tensor  # mean δ of the previous window (NaN: none yet)


def init_guard(lam: DiagGaussianParams, omega: float) -> GuardState:
    ref = tree_leaves(lam.mu)[0]
    scalar = {"dtype": torch.float64, "device": ref.device}
    return GuardState(omega=torch.tensor(float(omega), **scalar), halvings=0, saved_prev=lam,
                      saved_cur=lam, delta_sum=torch.zeros((), **scalar),
                      prev_mean=torch.tensor(math.nan, **scalar))


def step(lam: DiagGaussianParams, anchor: DiagGaussianParams, thetas: TensorTree,
         scores: TensorTree, alpha: float, guard: GuardState, a_min: float,
         t: int) -> tuple[DiagGaussianParams, GuardState]:
    """One damped closed-form update of λ, checked by the divergence guard."""
    omega = float(guard.omega)
    a_cur, b_cur = family.natural(lam)
    a_t, b_t = family.natural(anchor)

    def update(a, b, at, bt, mu_t, theta, s):
        v = 1.0 / at
        a_hat = -((theta - mu_t) * s).mean(0) / v
        a_new = (alpha * at + a_hat) / (1 + alpha)
        b_new = (alpha * bt + s.mean(0) + a_hat * mu_t) / (1 + alpha)
        a_next = (1 - omega) * a + omega * a_new
        clipped.append(bool((a_next < a_min).any()))
        return a_next.clamp_min(a_min), (1 - omega) * b + omega * b_new

    clipped: list[bool] = []

    pairs = tree_map(update, a_cur, b_cur, a_t, b_t, anchor.mu, thetas, scores)
    if isinstance(pairs, tuple):
        a_next, b_next = pairs
    else:
        a_next = {k: v[0] for k, v in pairs.items()}
        b_next = {k: v[1] for k, v in pairs.items()}
    new = family.from_natural(a_next, b_next)
    finite = all(bool(torch.isfinite(x).all()) for x in tree_leaves((a_next, b_next)))
    delta = max(float(((m1 - m0).abs() * a.sqrt()).max()) for m1, m0, a in
                zip(tree_leaves(new.mu), tree_leaves(lam.mu), tree_leaves(a_next)))
    delta_sum = guard.delta_sum + (delta if finite else math.inf)
    if not finite:
        return _back_off(guard, t, "a or b became non-finite")
    if any(clipped):
        # a precision went non-positive: the iteration is overshooting (B.4.4 caveat)
        return _back_off(guard, t, f"a precision fell below a_min={a_min:g}")
    if (t + 1) % GUARD_WINDOW:
        return new, GuardState(guard.omega, guard.halvings, guard.saved_prev, guard.saved_cur,
                               delta_sum, guard.prev_mean)
    mean = delta_sum / GUARD_WINDOW
    if torch.isfinite(guard.prev_mean) and mean > GUARD_GROWTH * guard.prev_mean:
        return _back_off(guard, t, f"the mean step grew from {float(guard.prev_mean):.3g} "
                                   f"to {float(mean):.3g}")
    zero = torch.zeros_like(guard.delta_sum)
    return new, GuardState(guard.omega, guard.halvings, guard.saved_cur, new, zero, mean)


def _back_off(guard: GuardState, t: int, why: str) -> tuple[DiagGaussianParams, GuardState]:
    halvings = guard.halvings + 1
    if halvings > GUARD_MAX_HALVINGS:
        raise NonFiniteError(
            f"score_vi closed-form solver diverged at step {t + 1} ({why}) even after halving "
            f"omega {GUARD_MAX_HALVINGS} times (now {float(guard.omega):.3g}); the posterior "
            "is too strongly coupled for the Jacobi iteration: use solver='gradient'"
        )
    omega = guard.omega / 2
    warnings.warn(f"score_vi closed form: {why} at step {t + 1}; restoring the iterate of "
                  f"{GUARD_WINDOW}-{2 * GUARD_WINDOW} steps ago and halving omega to "
                  f"{float(omega):.3g}", stacklevel=3)
    restored = guard.saved_prev
    nan = torch.full_like(guard.prev_mean, math.nan)
    return restored, GuardState(omega, halvings, restored, restored,
                                torch.zeros_like(guard.delta_sum), nan)
