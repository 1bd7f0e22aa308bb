"""Plumbing shared by the diagonal-Gaussian VI methods (ADVI, Fisher VI, ...).

Every such method keeps the same state and differs only in how it turns draws into a
gradient for λ = (μ, ρ = log σ) (``bdlkit.families.diag_gaussian``)::

    gen    = rng.from_state(state.rng_state)
    noise, thetas = gaussian_draws(μ, σ, S, gen)      # σ ε_k and θ_k = μ + σ ε_k, (S, ...)
    value, scores = minibatch_scores(problem, thetas, batch)   # if the method needs ŝ(θ_k)
    grads  = <method-specific ∇_λ loss>               # a DiagGaussianParams
    state  = apply_grads(opt, state, grads, lr, gen)  # optimiser step, rng saved, step + 1

The optimisers are bdlkit's functional ones (:mod:`bdlkit.core.optim`), applied to the
:class:`DiagGaussianParams` pytree, so the whole state (λ, optimiser moments, generator
state, step) flattens into a checkpoint.

On flat storage (:mod:`bdlkit.algorithms.storage`) each leaf is one vector of all the
network's values, so each line above is one element-wise pass over it: the step of
``advi`` is exp (σ), the draw, σ·ε in place, μ + σε, the oracle, the two gradients (one
pass each, :func:`elbo_gradients`) and Adam (copies of λ, m, v finished by one fused
kernel, :meth:`bdlkit.core.optim.Adam.apply`). Denormals from a confident network's softmax
are not flushed (:mod:`bdlkit.core.denormals` says why).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from bdlkit.core import rng
from bdlkit.core.optim import SGD, Adam, make_optimizer
from bdlkit.core.protocol import Batch, Problem, Variational
from bdlkit.core.schedules import Schedule
from bdlkit.core.tree import (
    TensorTree,
    detach_clone,
    device_of,
    num_draws,
    pytree_dataclass,
    randn_like,
    stack,
    tree_leaves,
    tree_map,
    unzip,
)
from bdlkit.families import diag_gaussian as family
from bdlkit.families.diag_gaussian import ENTROPY_CONST, DiagGaussian, DiagGaussianParams
from bdlkit.problems import Target


@pytree_dataclass
class VIState:
    """λ of the current q, the optimiser state over λ, the noise generator state, the step,
    and the running average of λ over the run's last part (None when the run does not
    average: :mod:`bdlkit.algorithms.vi.schedule`)."""

    lam: DiagGaussianParams
    opt_state: Any  # AdamState | SGDState, shaped like lam
    rng_state: Tensor
    step: int
    average: Any  # a schedule.RunningMean, or None


class DiagGaussianVI(Variational):
    """What every diagonal-Gaussian VI method answers the same way (state has ``lam``)."""

    def params(self, state: Any) -> TensorTree:
        """The variational mean μ."""
        return state.lam.mu

    def approximation(self, state: Any) -> DiagGaussian:
        return DiagGaussian(state.lam)


def check_hyper(
    lr: float | Schedule, optimizer: str, momentum: float, num_samples: int, init_std: float
) -> None:
    """Validate the hyperparameters every diagonal-Gaussian VI method shares."""
    if not callable(lr) and not lr > 0:
        raise ValueError(f"lr must be > 0 (or a schedule), got {lr!r}")
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    if not init_std > 0 or not math.isfinite(init_std):
        raise ValueError(f"init_std must be a finite number > 0, got {init_std!r}")


def setup(alg: Any) -> None:
    """``__post_init__`` of a diagonal-Gaussian VI method with the shared options ``lr``,
    ``optimizer``, ``momentum``, ``num_samples`` and ``init_std``: check and coerce them and
    set its optimiser ``_opt``."""
    check_hyper(alg.lr, alg.optimizer, alg.momentum, alg.num_samples, alg.init_std)
    object.__setattr__(alg, "num_samples", int(alg.num_samples))
    object.__setattr__(alg, "init_std", float(alg.init_std))
    object.__setattr__(alg, "_opt", make_opt(alg.optimizer, alg.momentum))


def make_opt(optimizer: str, momentum: float) -> SGD | Adam:
    """The functional optimiser (``momentum`` is used by SGD only)."""
    return make_optimizer(optimizer, **({"momentum": momentum} if optimizer == "sgd" else {}))


def initial_lam(problem: Problem, params: TensorTree | DiagGaussianParams | None,
                init_std: float, generator: torch.Generator) -> DiagGaussianParams:
    """λ₀ centred at ``params`` with σ = ``init_std``.

    ``params`` may be a point (μ₀; default ``problem.init_params``) or a full
    :class:`DiagGaussianParams` (warm start from another VI run; ``init_std`` is ignored).
    """
    if params is None:
        params = problem.init_params(generator)
    if isinstance(params, DiagGaussianParams):
        lam = DiagGaussianParams(mu=detach_clone(params.mu), rho=detach_clone(params.rho))
    else:
        lam = family.init(params, init_std)
    if isinstance(problem, Target) and lam.mu.ndim != 1:
        raise ValueError(
            f"VI on a Target fits one approximation: the starting point must have shape "
            f"({problem.dim},), got {tuple(lam.mu.shape)} (chains= is for samplers)"
        )
    return lam


def init_state(
    alg: Any,
    params: TensorTree | DiagGaussianParams | None,
    generator: torch.Generator,
) -> VIState:
    """The initial state of ``alg`` (an :class:`~.schedule.Annealing` method with
    ``problem``, ``_opt`` and ``init_std``): λ₀ from :func:`initial_lam`, the optimiser
    state, the noise, and the average's start."""
    lam = initial_lam(alg.problem, params, alg.init_std, generator)
    noise = rng.split(generator, device=device_of(lam.mu))
    return VIState(lam=lam, opt_state=alg._opt.init(lam), rng_state=rng.state_of(noise),
                   step=0, average=alg.initial_average(lam))


def draw_eps(lam: DiagGaussianParams, n: int, generator: torch.Generator) -> TensorTree:
    """``n`` standard normal draws per coordinate, stacked along a new leading dimension."""
    return randn_like(lam.mu, generator, n)


def gaussian_draws(mu: TensorTree, sigma: TensorTree, n: int, generator: torch.Generator
                   ) -> tuple[TensorTree, TensorTree]:
    """``(σ ε_k, θ_k = μ + σ ε_k)`` for ``n`` draws stacked along a new leading dimension
    (two passes after the draw: ε is scaled in place, then shifted into a fresh tensor)."""
    noise = tree_map(torch.Tensor.mul_, randn_like(mu, generator, n), sigma)
    return noise, tree_map(torch.add, noise, mu)


def elbo_gradients(scores: TensorTree, noise: TensorTree, scale: float,
                   entropy: bool = True) -> DiagGaussianParams:
    """``scale`` times the reparameterisation gradients of the ELBO (``docs/vi.md``) from
    the draws' scores ŝ_k and offsets σε_k: ``mean_k ŝ_k`` for μ and ``mean_k ŝ_k ⊙ σε_k
    + 1`` for ρ (the 1, ∇_ρ H, left out with ``entropy=False``). One pass each for one
    draw; ``scale = −1/N`` gives the loss gradients of ADVI and of score_vi at K = 1."""
    def grad_mu(s: Tensor) -> Tensor:
        return torch.mul(s[0], scale) if s.shape[0] == 1 else s.mean(0).mul_(scale)

    def grad_rho(s: Tensor, e: Tensor) -> Tensor:
        if s.shape[0] == 1:  # scale·(1 + ŝ σε) in one pass
            return torch.addcmul(s.new_full((), scale if entropy else 0.0), s[0], e[0],
                                 value=scale)
        mean = torch.mul(s, e).mean(0)
        return (mean.add_(1.0) if entropy else mean).mul_(scale)

    return DiagGaussianParams(mu=tree_map(grad_mu, scores),
                              rho=tree_map(grad_rho, scores, noise))


def reparam(lam: DiagGaussianParams, eps: TensorTree) -> TensorTree:
    """``θ = μ + σ ε`` (``eps`` with or without a leading draw dimension)."""
    return tree_map(lambda m, r, e: torch.addcmul(m, r.exp(), e), lam.mu, lam.rho, eps)


def minibatch_scores(
    problem: Problem, thetas: TensorTree, batch: Batch
) -> tuple[Tensor, TensorTree]:
    """Mean value and stacked minibatch scores ŝ(θ_k) of the stacked draws ``thetas``.

    No graph is kept. A Target scores all rows in one call (its scores are per row); a
    network takes one oracle call (forward + backward) per draw. The problem's own KL
    discount (``BayesianModel(kld=...)``) is in its score already.
    """
    if isinstance(problem, Target):
        value, score = problem.value_and_score(thetas, batch)
        return value / thetas.shape[0], score
    if num_draws(thetas) == 1:  # no copy: the one score, viewed with its draw dimension
        value, score = problem.value_and_score(tree_map(lambda t: t[0], thetas), batch)
        return value, tree_map(lambda t: t.unsqueeze(0), score)
    values, scores = [], []
    for k in range(num_draws(thetas)):
        theta = tree_map(lambda t, k=k: t[k], thetas)
        value, score = problem.value_and_score(theta, batch)
        values.append(value)
        scores.append(score)
    return torch.stack(values).mean(), stack(scores)


def entropy(lam: DiagGaussianParams) -> Tensor:
    """``H(q) = Σ_i [ρ_i + ½(1 + log 2π)]`` (the constant is
    :data:`~bdlkit.families.diag_gaussian.ENTROPY_CONST`)."""
    return sum(r.sum() + ENTROPY_CONST * r.numel() for r in tree_leaves(lam.rho))


def positive_average(h: Tensor, h_hat: Tensor, beta: float, shifted: Tensor | float
                     ) -> Tensor:
    """``β h + (1 − β) ĥ + ½ (1 − β)² (h − ĥ)² / (h + δ)``: IVON's positivity-preserving
    average of a curvature (``shifted``: h + δ, or δ alone; ``h_hat`` is used up). Used by
    :mod:`~bdlkit.algorithms.vi.ivon` and by score_vi's closed form
    (:mod:`~bdlkit.algorithms.vi.score_vi_closed_form`, ``curvature_update="riemannian"``,
    with δ = 0 on its precision average).

    With x = (1 − β)(h − ĥ) and a = h + δ > 0 the new h + δ is a(1 − x/a + x²/(2a²)) > 0,
    whatever ĥ's sign: the second-order term of the Riemannian gradient step keeps the
    precision positive (Lin, Schmidt & Khan, ICML 2020)."""
    if not isinstance(shifted, Tensor):
        shifted = h + shifted
    new = torch.lerp(h, h_hat, 1 - beta)
    return new.addcdiv_(h_hat.sub_(h).square_(), shifted, value=0.5 * (1 - beta) ** 2)


def apply_grads(
    opt: SGD | Adam, state: VIState, grads: DiagGaussianParams, lr: float,
    generator: torch.Generator,
) -> VIState:
    """One optimiser step on λ (``grads`` of the loss to *minimise*; Adam's fused kernel);
    saves the generator (the average is the caller's to advance)."""
    lam, opt_state = opt.apply(grads, state.opt_state, state.lam, lr, fused=True)
    return VIState(lam=lam, opt_state=opt_state, rng_state=rng.state_of(generator),
                   step=state.step + 1, average=state.average)


__all__ = [
    "VIState",
    "apply_grads",
    "check_hyper",
    "draw_eps",
    "elbo_gradients",
    "entropy",
    "gaussian_draws",
    "init_state",
    "initial_lam",
    "make_opt",
    "minibatch_scores",
    "num_draws",
    "positive_average",
    "reparam",
    "setup",
    "unzip",
]
