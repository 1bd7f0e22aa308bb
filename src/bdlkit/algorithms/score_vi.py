"""Proximal stochastic-gradient score-based VI (SSM-prox), diagonal Gaussian family.

M. Kim, "Large-scale Score-based Variational Posterior Inference for Bayesian Deep
Neural Networks", arXiv 2602.05873 (2026); derivations in ``algorithms.md`` B.2-B.5.
Per anchor q_t (frozen) the current q_λ descends, for K = ``inner_steps`` steps::

    L̂(λ) = (1/S) Σ_k [ α_t ‖∇log q_λ(θ_k) − ∇log q_t(θ_k)‖² + ‖∇log q_λ(θ_k) − ŝ(θ_k)‖² ],
    θ_k ~ q_t (no reparameterisation),  α_t = α_max · min(1, t / warmup)

with ŝ the unbiased minibatch score (one ordinary forward/backward per sample; no graph
through the network). The λ-gradients are closed forms (B.4.2 Monte Carlo, B.4.3
Rao-Blackwellised: the default, far lower variance), scaled by 1/N² (argmin unchanged)
and applied with a functional optimiser (Adam by default). ``precondition`` (default on)
multiplies both gradients by σ² per coordinate: the raw ones scale as 1/σ², so while σ
grows or shrinks over decades Adam's second-moment estimate lags by orders of magnitude
and the steps stall; the rescaled ones stay O(1), like ADVI's (same fixed points). In
fact with K = 1 they *are* ADVI's up to constants: σ²∂μ = −2·mean ŝ and
σ²∂ρ = −4(1 + mean (θ−μ)ŝ) are 2× and 4× the negative-ELBO gradients, so under Adam the
iterates coincide with ``advi`` (tested); score_vi differs through K > 1 with α, the
Monte Carlo loss and the closed-form solver. With K = 1 the proximal term
has zero gradient at λ = λ_t, so α has no effect (B.3). ``solver="closed_form"`` applies
the exact per-iteration argmin in natural parameters instead (B.4.4), damped by ``omega``
with precision clipping and a divergence guard (:mod:`.score_vi_closed_form`): opt-in,
because undamped it is a Jacobi iteration that diverges on coupled posteriors (B.4.5).
``kld`` < 1 inflates the likelihood by 1/kld (BayesDLL's KL discount, B.2):
ŝ = ∇log p + (1/kld)(ŝ − ∇log p). Memory: λ, the anchor and the optimiser state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .. import rng
from ..families import diag_gaussian as family
from ..families.diag_gaussian import DiagGaussianParams
from ..optim import make_optimizer
from ..problems import Target
from ..schedules import Schedule, resolve
from ..tree import TensorTree, device_of, pytree_dataclass, tree_map
from ..types import Batch, Info, Problem
from . import score_vi_closed_form as closed_form
from ._vi_common import DiagGaussianVI, minibatch_scores

KIND = "vi"  # what the algorithm returns: see bdlkit.types.Algorithm


@pytree_dataclass
class ScoreVIState:
    lam: DiagGaussianParams  # the current q_λ
    anchor: DiagGaussianParams  # the frozen q_t
    opt_state: Any  # optimiser state (gradient solver) or guard state (closed form)
    rng_state: Tensor
    step: int


@dataclass(frozen=True)
class ScoreVI(DiagGaussianVI):
    problem: Problem
    lr: float | Schedule = 3e-3
    optimizer: str = "adam"
    num_samples: int = 1
    inner_steps: int = 1
    alpha_max: float = 0.5
    warmup: int = 1000
    init_std: float = 1e-3
    loss: str = "rb"
    solver: str = "gradient"
    omega: float | None = None
    a_min: float = 1e-8
    kld: float = 1.0
    precondition: bool = True
    name: str = "score_vi"
    kind: str = KIND

    def __post_init__(self) -> None:
        object.__setattr__(self, "_opt", make_optimizer(self.optimizer))

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator
             ) -> ScoreVIState:
        if params is None:
            params = self.problem.init_params(generator)
        lam = family.init(params, self.init_std)
        noise = rng.split(generator, device=device_of(params))
        opt = closed_form.init_guard(lam, self.omega) if self.solver == "closed_form" \
            else self._opt.init(lam)
        return ScoreVIState(lam=lam, anchor=lam, opt_state=opt, rng_state=rng.state_of(noise),
                            step=0)

    def alpha(self, step: int) -> float:
        """α_t = α_max · min(1, t / warmup) (B.5)."""
        return self.alpha_max * min(1.0, step / self.warmup) if self.warmup else self.alpha_max

    def step(self, state: ScoreVIState, batch: Batch) -> tuple[ScoreVIState, Info]:
        t = state.step
        anchor = state.lam if t % self.inner_steps == 0 else state.anchor
        alpha = self.alpha(t // self.inner_steps * self.inner_steps)
        gen = rng.from_state(state.rng_state, device=device_of(anchor.mu))
        thetas = family.sample(anchor, self.num_samples, gen)  # (S, ...) from q_t, no grad
        value, scores = minibatch_scores(self.problem, thetas, batch, self.kld)
        if self.solver == "closed_form":
            lam, opt_state = closed_form.step(state.lam, anchor, thetas, scores, alpha,
                                              state.opt_state, self.a_min, t)
        else:
            grads = self._gradients(state.lam, anchor, thetas, scores, alpha)
            updates, opt_state = self._opt.update(grads, state.opt_state, state.lam,
                                                  resolve(self.lr, t))
            lam = tree_map(lambda p, u: p + u, state.lam, updates)
        new = ScoreVIState(lam=lam, anchor=anchor, opt_state=opt_state,
                           rng_state=rng.state_of(gen), step=t + 1)
        return new, {"log_prob": value, "alpha": alpha}

    def _gradients(self, lam: DiagGaussianParams, anchor: DiagGaussianParams,
                   thetas: TensorTree, scores: TensorTree, alpha: float) -> DiagGaussianParams:
        """The λ-gradient of the loss, scaled by 1/N² and, with ``precondition``, by σ²."""
        scale = 1.0 / float(self.problem.num_data) ** 2
        if self.precondition and self.loss == "rb" and anchor is lam:  # K = 1: fast path
            return anchored_rb_gradients(lam, thetas, scores, scale)
        grads = (rb_gradients if self.loss == "rb" else mc_gradients)(
            lam, anchor, thetas, scores, alpha)
        if not self.precondition:
            return tree_map(lambda g: g * scale, grads)
        var = tree_map(lambda r: (2 * r).exp() * scale, lam.rho)
        return DiagGaussianParams(mu=tree_map(lambda g, v: g * v, grads.mu, var),
                                  rho=tree_map(lambda g, v: g * v, grads.rho, var))



def rb_gradients(lam: DiagGaussianParams, anchor: DiagGaussianParams, thetas: TensorTree,
                 scores: TensorTree, alpha: float) -> DiagGaussianParams:
    """∇_λ of the Rao-Blackwellised loss (B.4.3), per coordinate, with a = 1/σ²::

        ∂μ = 2(1+α) a² (μ − μ_t) − 2a·mean_k ŝ_k
        ∂a = α[2a(μ − μ_t)² − 2(a_t − a)σ_t²] + 2a(σ_t² + (μ_t − μ)²) + 2·mean_k (θ_k − μ) ŝ_k
        ∂ρ = −2a · ∂a
    """
    def per_leaf(mu, rho, mu_t, rho_t, theta, s):
        a, a_t = (-2 * rho).exp(), (-2 * rho_t).exp()
        var_t, dm = 1.0 / a_t, mu - mu_t
        s_bar, cross = s.mean(0), ((theta - mu) * s).mean(0)
        g_mu = 2 * (1 + alpha) * a**2 * dm - 2 * a * s_bar
        g_a = alpha * (2 * a * dm**2 - 2 * (a_t - a) * var_t) + 2 * a * (var_t + dm**2) \
            + 2 * cross
        return g_mu, -2 * a * g_a

    return _per_leaf(per_leaf, lam, anchor, thetas, scores)


def anchored_rb_gradients(lam: DiagGaussianParams, thetas: TensorTree, scores: TensorTree,
                          scale: float) -> DiagGaussianParams:
    """σ²-preconditioned :func:`rb_gradients` at λ = λ_t (the K = 1 case), times ``scale``:
    ``σ²∂μ = −2·mean_k ŝ_k`` and ``σ²∂ρ = −4(1 + mean_k (θ_k − μ) ŝ_k)`` (α drops out)."""
    mu = tree_map(lambda s: s.mean(0) * (-2 * scale), scores)
    rho = tree_map(lambda t, m, s: (1 + ((t - m) * s).mean(0)) * (-4 * scale), thetas, lam.mu,
                   scores)
    return DiagGaussianParams(mu=mu, rho=rho)


def mc_gradients(lam: DiagGaussianParams, anchor: DiagGaussianParams, thetas: TensorTree,
                 scores: TensorTree, alpha: float) -> DiagGaussianParams:
    """∇_λ of the plain Monte Carlo loss (B.4.2), R_k = (1+α) g_λ(θ_k) − α g_t(θ_k) − ŝ_k::

        ∂μ = mean_k 2 R_k / σ²,   ∂ρ = mean_k 4 R_k (θ_k − μ) / σ²
    """
    def per_leaf(mu, rho, mu_t, rho_t, theta, s):
        a, a_t = (-2 * rho).exp(), (-2 * rho_t).exp()
        r = (1 + alpha) * (-(theta - mu) * a) + alpha * (theta - mu_t) * a_t - s
        return (2 * r * a).mean(0), (4 * r * (theta - mu) * a).mean(0)

    return _per_leaf(per_leaf, lam, anchor, thetas, scores)


def _per_leaf(fn, lam, anchor, thetas, scores) -> DiagGaussianParams:
    pairs = tree_map(fn, lam.mu, lam.rho, anchor.mu, anchor.rho, thetas, scores)
    if isinstance(pairs, tuple):
        return DiagGaussianParams(mu=pairs[0], rho=pairs[1])
    return DiagGaussianParams(mu={k: v[0] for k, v in pairs.items()},
                              rho={k: v[1] for k, v in pairs.items()})


def build(
    problem: Problem,
    lr: float | Schedule = 3e-3,
    optimizer: str = "adam",
    num_samples: int = 1,
    inner_steps: int = 1,
    alpha_max: float = 0.5,
    warmup: int = 1000,
    init_std: float = 1e-3,
    loss: str = "rb",
    solver: str = "gradient",
    omega: float | None = None,
    a_min: float = 1e-8,
    kld: float = 1.0,
    precondition: bool = True,
) -> ScoreVI:
    """SSM-prox with a diagonal Gaussian (see the module docstring for every option).

    Defaults (lr 3e-3 with Adam, init_std 1e-3, K = 1, one draw) come from the study in
    ``benchmarks/results/score-vi-study`` (``bdlkit bench score-vi-study``): K = 5 anchors
    were worse on both problems, and α acts only with K > 1.
    """
    if loss not in ("rb", "mc"):
        raise ValueError(f"loss must be 'rb' (Rao-Blackwellised) or 'mc', got {loss!r}")
    if solver not in ("gradient", "closed_form"):
        raise ValueError(f"solver must be 'gradient' or 'closed_form', got {solver!r}")
    if solver == "closed_form" and (omega is None or not 0 < omega <= 1):
        raise ValueError("solver='closed_form' needs an explicit damping 0 < omega <= 1 "
                         "(no value is safe in general: algorithms.md B.4.4)")
    if loss == "mc" and num_samples < 2 and solver == "closed_form":
        raise ValueError("the Monte Carlo closed form is singular for num_samples=1: use "
                         "loss='rb'")
    for name, value, low in (("num_samples", num_samples, 1), ("inner_steps", inner_steps, 1),
                             ("warmup", warmup, 0)):
        if int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if not 0 <= alpha_max <= 1:
        raise ValueError(f"alpha_max must be in [0, 1], got {alpha_max}")
    if not init_std > 0 or not 0 < kld <= 1 or not a_min > 0:
        raise ValueError("init_std and a_min must be > 0 and kld in (0, 1]")
    if kld != 1.0 and isinstance(problem, Target):
        raise ValueError("kld (likelihood inflation) needs a BayesianModel with a prior")
    if not callable(lr) and not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    return ScoreVI(problem, lr=lr, optimizer=optimizer, num_samples=num_samples,
                   inner_steps=inner_steps, alpha_max=alpha_max, warmup=warmup,
                   init_std=init_std, loss=loss, solver=solver, omega=omega, a_min=a_min,
                   kld=kld, precondition=precondition)


__all__ = [
    "ScoreVI", "ScoreVIState", "anchored_rb_gradients", "build", "mc_gradients",
    "minibatch_scores", "rb_gradients",
]
