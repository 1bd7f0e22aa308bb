"""Reparameterised Fisher-divergence VI ("traditional score matching"), diagonal Gaussian.

Minimises the Fisher divergence between q_λ = N(μ, diag σ²), λ = (μ, ρ = log σ), and the
(tempered) posterior, through reparameterised draws θ = μ + σ⊙ε (``docs/vi.md``)::

    F(λ) = E_ε ‖∇_θ log q_λ(θ) − s(θ)‖²  =  E_ε ‖ε/σ + s(μ + σ⊙ε)‖²     (∇_θ log q = −ε/σ)
    L̂(λ) = (1/N²) · (1/S) Σ_k ‖ε_k/σ + s(θ_k)‖²

with s = ∇_θ log π̂ the score of the problem's *differentiable* log density:
``BayesianModel.log_posterior(params, batch)`` (the minibatch value, scaled exactly like
``value_and_score``: ``(1/T)[(N/|B|) Σ log p(y|x,θ) + log p(θ)]``), or ``Target.log_prob``. The
1/N² keeps the loss O(1) per datum; the argmin is unchanged. Unlike ADVI and score VI,
∇_λ L̂ differentiates *through* s(θ(λ)): it needs ∂s/∂θ·∂θ/∂λ, Hessian-vector products
of log π, computed with ``torch.func`` (a ``grad`` of a function that calls ``grad``).

For a Gaussian target in the family the optimum is exact: the residual ε/σ + s(θ)
vanishes for every ε when q = π, so the stochastic gradient is exactly zero there too.

Caveats:

- **Cost** (docs/vi.md, cost per iteration): per draw, one forward, one backward and one backward-of-backward through
  the network, i.e. about 2–3× the time and activation memory of an ADVI step. This is the
  failure mode reported for this baseline at ViT scale. Draws of a network are processed
  one at a time, so memory does not grow with S; a Target scores all draws in one call.
- **Bias** (docs/vi.md, Fisher-divergence VI): with a minibatch score ŝ, E‖ε/σ + ŝ‖² = ‖ε/σ + s‖² + tr Cov[ŝ(θ(λ))], and
  the trace depends on λ through θ. So the minibatch gradient is biased (it also fits the
  minibatch noise), unlike the score-VI gradient. Use full batches (``batch_size ≥ N``) to
  remove the bias.
- **Networks.** On a network with minibatches the bias term wins: the minimiser of
  tr Cov[ŝ] is a flat function, and every network problem of the defaults study
  (``bdlkit bench defaults``: digits, MNIST subsets, a two-class set, CIFAR-10 with a CNN)
  ends near a constant predictor, at or near the majority class, at every lr tried
  (1e-3, 1e-2). Building it on a :class:`~bdlkit.BayesianModel` therefore warns
  (:class:`~bdlkit.core.errors.DefaultsWarning`) before the run: it is a baseline for Targets
  and full-batch runs.
- The model must be traceable by ``torch.func`` twice (``BayesianModel(oracle="module")``
  is not used here: the functional ``log_posterior`` is).
- **Divergence.** If the loss, its gradient or λ become NaN or infinite (a too large
  ``lr``, σ collapsing or exploding), ``step`` raises :class:`bdlkit.NonFiniteError`
  ("fisher_vi diverged at step t: ...") instead of silently continuing.

Scale, optimiser, ``init_std``, state and approximation follow :mod:`.advi`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.vi import common as vi
from bdlkit.algorithms.vi.schedule import Annealing
from bdlkit.core import rng
from bdlkit.core.errors import DefaultsWarning, NonFiniteError, caller_stacklevel
from bdlkit.core.protocol import Batch, Info, Problem
from bdlkit.core.schedules import Schedule
from bdlkit.core.tree import TensorTree, all_finite, device_of, index, tree_leaves, tree_map
from bdlkit.families.diag_gaussian import DiagGaussianParams
from bdlkit.problems import Target

KIND = "vi"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm

FisherVIState = vi.VIState
LogDensity = Callable[[TensorTree, Batch], Tensor]


def differentiable_log_density(problem: Problem) -> LogDensity:
    """``log π̂(params, batch)`` as a scalar function ``torch.func`` can differentiate twice.

    A Target sums ``log_prob`` over the rows of a stacked ``(S, d)`` input (its gradient is
    then the per-row score); a model provides ``log_posterior(params, batch)``.
    """
    if isinstance(problem, Target):
        return lambda theta, batch: problem.log_prob(theta).sum()
    fn = getattr(problem, "log_posterior", None)
    if not callable(fn):
        raise TypeError(
            f"fisher_vi needs a differentiable log density: {type(problem).__name__} has no "
            "log_posterior(params, batch) (a BayesianModel has one; a Target uses log_prob)"
        )
    return fn


NETWORK_WARNING = (
    "fisher_vi on a network: with minibatch scores its loss also fits the gradient noise, "
    "whose minimiser is a flat function, so it ends near a constant predictor (at or near "
    "the majority class on the network problems of `bdlkit bench defaults`); use advi or score_vi, or "
    "full batches (--batch-size >= the training rows) if you need this baseline")


@dataclass(frozen=True)
class FisherVI(Annealing, vi.DiagGaussianVI):
    """``λ ← λ + optimizer_update(∇_λ L̂)`` with the Fisher loss L̂ of the module docstring.

    Args:
        lr: learning rate on λ = (μ, log σ), a float or a schedule of the step; too large
            a one diverges (:class:`bdlkit.NonFiniteError`).
        optimizer: "adam" or "sgd".
        momentum: SGD's momentum in [0, 1) (unused by Adam).
        num_samples: S reparameterised draws per step (processed one at a time on a
            network).
        init_std: σ of q₀ around the initial parameters.
    """

    problem: Problem
    lr: float | Schedule = 1e-3
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = 0.9
    num_samples: int = 1
    init_std: float = 1e-3
    name: str = "fisher_vi"
    VERSION: ClassVar[int] = 2  # 2: a network's noise drawn in chunks (bdlkit.core.noise)
    data_parallel: ClassVar[bool] = False  # differentiates problem.log_posterior itself
    objective: ClassVar[str] = "loss"  # the Fisher divergence it minimises
    _opt: Any = field(init=False, repr=False, compare=False)
    _log_density: LogDensity = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        vi.setup(self)
        self.check_annealing()
        object.__setattr__(self, "_log_density", differentiable_log_density(self.problem))
        if not isinstance(self.problem, Target):
            warnings.warn(NETWORK_WARNING, DefaultsWarning, stacklevel=caller_stacklevel())

    def init(
        self, params: TensorTree | DiagGaussianParams | None = None, *,
        generator: torch.Generator,
    ) -> FisherVIState:
        return vi.init_state(self, params, generator)

    # --------------------------------------------------------------------- the loss
    def _chunk_loss(
        self, mu: TensorTree, rho: TensorTree, eps: TensorTree, batch: Batch
    ) -> tuple[Tensor, Tensor]:
        """Σ over the draws of ``eps`` (leading dim) of ‖ε/σ + s(θ)‖²/N², and Σ log π̂(θ)."""
        theta = tree_map(lambda m, r, e: m + r.exp() * e, mu, rho, eps)
        if isinstance(self.problem, Target):  # per-row scores of all draws at once
            score, value = torch.func.grad_and_value(self._log_density)(theta, batch)
        else:  # one draw (leading dim 1) through the network
            score, value = torch.func.grad_and_value(self._log_density)(index(theta, 0), batch)
            score = tree_map(lambda s: s.unsqueeze(0), score)
        resid = tree_map(lambda e, r, s: e * (-r).exp() + s, eps, rho, score)
        n = float(self.problem.effective_num_data)
        loss = sum((x * x).sum() for x in tree_leaves(resid)) / (n * n)
        return loss, value.detach()

    def _chunks(self, eps: TensorTree) -> list[TensorTree]:
        if isinstance(self.problem, Target):
            return [eps]
        return [tree_map(lambda e, k=k: e[k : k + 1], eps) for k in range(vi.num_draws(eps))]

    def loss(self, lam: DiagGaussianParams, eps: TensorTree, batch: Batch) -> Tensor:
        """L̂(λ) for the stacked standard normal draws ``eps`` (S, ...), differentiable in λ."""
        total = sum(self._chunk_loss(lam.mu, lam.rho, e, batch)[0] for e in self._chunks(eps))
        return total / vi.num_draws(eps)

    def loss_and_grad(
        self, lam: DiagGaussianParams, eps: TensorTree, batch: Batch
    ) -> tuple[Tensor, DiagGaussianParams, Tensor]:
        """``(L̂(λ), ∇_λ L̂(λ), mean log π̂ of the draws)`` for fixed draws ``eps`` (S, ...).

        The gradient of each draw (chunk) is taken separately and averaged, so only one
        second-order graph is alive at a time.
        """
        grad_fn = torch.func.grad_and_value(self._chunk_loss, argnums=(0, 1), has_aux=True)
        s = vi.num_draws(eps)
        loss: Any = 0.0
        value: Any = 0.0
        g_mu: Any = None
        g_rho: Any = None
        for chunk in self._chunks(eps):
            (gm, gr), (chunk_loss, chunk_value) = grad_fn(lam.mu, lam.rho, chunk, batch)
            loss, value = loss + chunk_loss.detach(), value + chunk_value
            g_mu = gm if g_mu is None else tree_map(torch.add, g_mu, gm)
            g_rho = gr if g_rho is None else tree_map(torch.add, g_rho, gr)
        grads = DiagGaussianParams(mu=tree_map(lambda g: g / s, g_mu),
                                   rho=tree_map(lambda g: g / s, g_rho))
        return loss / s, grads, value / s

    # --------------------------------------------------------------------- the step
    def step(self, state: FisherVIState, batch: Batch) -> tuple[FisherVIState, Info]:
        gen = rng.from_state(state.rng_state, device=device_of(state.lam.mu))
        eps = vi.draw_eps(state.lam, self.num_samples, gen)
        lr = self.rate(state.step)
        loss, grads, value = self.loss_and_grad(state.lam, eps, batch)
        if not (bool(torch.isfinite(loss)) and all_finite(grads)):
            what = "its gradient is" if bool(torch.isfinite(loss)) else "the loss is"
            self._diverged(state, f"{what} NaN or infinite (loss={float(loss):.4g})", lr)
        new = vi.apply_grads(self._opt, state, grads, lr, gen)
        sigma_ok = all(bool(torch.isfinite(r.exp()).all() and (r.exp() > 0).all())
                       for r in tree_leaves(new.lam.rho))
        if not (all_finite(new.lam) and sigma_ok):
            self._diverged(state, "the update made μ or σ NaN, infinite or zero", lr)
        return self.advance_average(new), {"log_prob": value, "loss": loss}

    def _diverged(self, state: FisherVIState, what: str, lr: float) -> None:

        rhos = torch.cat([r.detach().flatten() for r in tree_leaves(state.lam.rho)])
        raise NonFiniteError(
            f"fisher_vi diverged at step {state.step + 1}: {what}; σ was in "
            f"[{float(rhos.min().exp()):.3g}, {float(rhos.max().exp()):.3g}] before the step. "
            f"Lower lr (now {lr:g}), e.g. by 10x, or start from a different init_std; "
            "reparameterised Fisher VI differentiates the score and is fragile where the "
            "curvature is large (advi and score_vi are more robust)"
        )


build = builder(FisherVI)

__all__ = ["FisherVI", "FisherVIState", "build", "differentiable_log_density"]


ALGORITHM = FisherVI
