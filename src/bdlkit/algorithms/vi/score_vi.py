"""Proximal stochastic-gradient score-based VI (SSM-prox), diagonal Gaussian family.

M. Kim, "Large-scale Score-based Variational Posterior Inference for Bayesian Deep
Neural Networks", arXiv 2602.05873 (2026); derivations in ``docs/score_vi.md``. Per
iteration, with the anchor q_t frozen and S draws θ_k ~ q_t (no reparameterisation)::

    q_{t+1} = argmin_λ (1/S) Σ_k [ α_t ‖∇log q_λ(θ_k) − ∇log q_t(θ_k)‖² + ‖∇log q_λ(θ_k) − ŝ_k‖² ]
    α_t = α_max · min(1, t / warmup)

with ŝ_k the unbiased minibatch score at θ_k (one ordinary forward/backward per draw; no
graph through the network). Two solvers:

* ``solver="gradient"`` (**the default**): ``inner_steps`` K optimiser steps on the
  Rao-Blackwellised (or Monte Carlo) loss per anchor. With ``precondition="sigma2"`` the
  gradients are σ²∂μ/(2N) and σ²∂ρ/(4N). **At K = 1 (the default) these are exactly
  ADVI's negative-ELBO gradients** (−mean ŝ/N and −(1 + mean (θ−μ)ŝ)/N), so the iterates
  are ``advi``'s, to float rounding (tested). ``loss="mc"`` at K = 1 is ADVI with
  sticking-the-landing gradients. α cannot act at K = 1: the proximal term has zero
  gradient at the anchor. For K > 1, ``precondition="natural"`` divides by the loss's
  own diagonal curvature (2(1+α)a² for μ, 8(1+α)a²σ_t² for ρ). With ``optimizer="sgd"``
  and lr ω ≤ 1, one inner step is then the damped closed-form step to first order, and
  more inner steps solve the per-anchor problem instead of fighting its restoring term.
  This is the route for families without a closed form.
* ``solver="closed_form"`` (**the proximal method**): the argmin itself, exact in natural
  parameters, with the likelihood's Stein (Hutchinson) curvature from one antithetic pair
  averaged over steps from an initial curvature ``hess_init``, the prior applied exactly,
  momentum on the mean score and the cosine schedule on the damping ω
  (:mod:`.score_vi_closed_form`). It is a member of the variational-online-Newton family:
  at α = 0 with one draw it takes IVON's steps exactly (``docs/ivon.md``, tested). On a
  Target its curvature average is fast (exact scores) and it is scale-free: from
  σ₀ = 1e-6 it reaches a 20-D Gaussian's mean-field optimum in a few hundred steps, where
  ADVI is far away. Its defaults on networks come from ``bdlkit bench score-vi-study``.

The KL discount (``BayesianModel(kld=...)``, ``--kld``) is the problem's, in ŝ.
Memory: λ, the anchor and the solver state (Adam moments, or the curvature and momentum
averages).

On flat storage both solvers are a fixed list of element-wise passes over one vector per
field (the gradient solver's are ADVI's, :mod:`bdlkit.algorithms.vi.common`; the closed
form's in :func:`~.score_vi_closed_form.step`). The gradient solver's loss gradients are
in :mod:`.score_vi_gradients`;
denormals are not flushed (:mod:`bdlkit.core.denormals` says why). ``VERSION`` 2: the noise of a network of more than 65 536
values is drawn in fixed chunks (:mod:`bdlkit.core.noise`), Adam is torch's fused kernel
and the closed form's passes round differently, so a checkpoint of version 1 is not
resumed.
"""

from __future__ import annotations

import contextvars
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.storage import FlatStorage
from bdlkit.algorithms.vi import flow_vi
from bdlkit.algorithms.vi import score_vi_closed_form as closed_form
from bdlkit.algorithms.vi.common import (
    DiagGaussianVI,
    draw_eps,
    entropy,
    gaussian_draws,
    initial_lam,
    make_opt,
    minibatch_scores,
)
from bdlkit.algorithms.vi.flow_vi import FlowOptions
from bdlkit.algorithms.vi.prior_split import prior_terms
from bdlkit.algorithms.vi.schedule import Annealing, RunningMean
from bdlkit.algorithms.vi.score_vi_gradients import (  # re-exported (__all__)
    anchored_rb_gradients,
    cross_term,
    mc_gradients,
    natural_precondition,
    rb_gradients,
)
from bdlkit.algorithms.vi.score_vi_options import (  # precision_floor, ...: re-exported
    PRECONDITIONERS,  # noqa: F401 (kept importable from here)
    SOLVER_DEFAULTS,
    TARGET_CLOSED_FORM,
    check,
    precision_floor,
    warn_inert,
)
from bdlkit.core import rng
from bdlkit.core.protocol import Batch, Info, Problem
from bdlkit.core.schedules import Schedule
from bdlkit.core.tree import (
    TensorTree,
    all_finite,
    device_of,
    pytree_dataclass,
    tree_map,
)
from bdlkit.families.diag_gaussian import DiagGaussianParams
from bdlkit.problems import Target

KIND = "vi"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm

WARMUP_FRACTION = 0.1  # warmup=None: α rises over the first 10 % of the run
#: True while :meth:`ScoreVI.for_run` re-creates the algorithm: no build warning again.
_REBINDING = contextvars.ContextVar("score_vi_rebinding", default=False)


@pytree_dataclass
class ScoreVIState:
    lam: DiagGaussianParams  # the current q_λ
    anchor: DiagGaussianParams  # the frozen q_t
    opt_state: Any  # optimiser state (gradient solver) or ClosedFormState
    rng_state: Tensor
    step: int
    average: RunningMean | None  # λ averaged over the run's last part (schedule.py)


@dataclass(frozen=True)
class ScoreVI(FlatStorage, FlowOptions, Annealing, DiagGaussianVI):
    """SSM-prox with a diagonal Gaussian (the module docstring explains every option).

    The options left at None take their solver's value in ``SOLVER_DEFAULTS`` (what the
    fields then hold); setting one that cannot act in the configuration warns.

    Args:
        lr: the gradient solver's step size (per datum, as ADVI's; default 1e-2, 3e-3
            with family="flow"); the closed form has none (ω is its step).
        optimizer: "adam" or "sgd" (gradient solver).
        momentum: in [0, 1): SGD's momentum (gradient solver, as in advi), or the closed
            form's β1, an exponential average of the mean likelihood score, debiased as
            IVON's (default 0.9 for both).
        num_samples: S draws per step (default: 2, one antithetic pair, for the closed
            form; 1 for the gradient solver).
        inner_steps: K optimiser steps per anchor (gradient solver; the closed form solves
            each anchor's problem exactly, K = 1).
        alpha_max: the proximal weight after the warm-up, in [0, 1] (default 0.5).
        warmup: steps over which α rises from 0 to α_max (default: 10 % of the run for
            the closed form; 0 for the gradient solver).
        init_std: σ of q₀ around the initial parameters (default 1e-2; the closed form
            with hess_init: 1/sqrt(λ0·h0 + P), its curvature average's start).
        loss: "rb" (Rao-Blackwellised) or "mc" (Monte Carlo).
        solver: "gradient" (default; at K = 1 it is ADVI, see the module docstring) or
            "closed_form" (the proximal argmin).
        omega: the closed form's damping in (0, 1] (default: 0.1 for the closed form).
        curvature_decay: β in [0, 1) of the average of the Stein curvature over steps
            (closed form; 0: this step's estimate only, as in the paper; default 0.999 on
            a network, 0.9 on a Target, whose exact scores make the estimate accurate).
        hess_init: the closed form's initial curvature per datum h0 > 0: its curvature
            average starts at λ0·h0 + P (λ0 = N_eff/T, P the prior's precision), as IVON's;
            "estimate": at the first estimate, bias-corrected (default 3.0).
        curvature_update: "riemannian" (IVON's positivity-preserving average; the default
            with a number hess_init) or "linear" (the default with "estimate").
        antithetic: draw S/2 pairs μ_t ± σ_t ε (default: on for the closed form).
        a_min: precision floor of the closed form (default
            :func:`~.score_vi_options.precision_floor`).
        max_step: the closed form's trust region: no coordinate of μ moves by more than
            this many σ in one step (counted in ``info["step_clipped"]``; default inf:
            none, as a capped divergence hides from the guard).
        precondition: "sigma2" (default; True), "natural" or "none" (False) for the
            gradient solver.
    """

    problem: Problem
    lr: float | Schedule | None = None
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float | None = None
    num_samples: int | None = None
    inner_steps: int = 1
    alpha_max: float | None = None
    warmup: int | None = None
    init_std: float | None = None
    loss: Literal["rb", "mc"] = "rb"
    solver: Literal["gradient", "closed_form"] = "gradient"
    omega: float | None = None
    curvature_decay: float | None = None
    hess_init: float | Literal["estimate"] | None = None
    curvature_update: Literal["riemannian", "linear"] | None = None
    antithetic: bool | None = None
    a_min: float | None = None
    max_step: float = float("inf")
    precondition: Literal["sigma2", "natural", "none"] | bool = "sigma2"
    name: str = "score_vi"
    VERSION: ClassVar[int] = 2  # the module docstring's last paragraph
    _opt: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check the options and resolve those left at None (idempotent: a resolved
        algorithm re-created by ``dataclasses.replace`` keeps its values)."""
        solver, inner_steps, set_attr = self.solver, self.inner_steps, object.__setattr__
        if solver not in SOLVER_DEFAULTS:
            raise ValueError(f"solver must be 'closed_form' or 'gradient', got {solver!r}")
        if solver == "closed_form" and inner_steps != 1:
            raise ValueError(f"inner_steps={inner_steps}: the closed form solves each anchor's "
                             "problem exactly (K = 1); use solver='gradient' for K > 1")
        defaults = SOLVER_DEFAULTS[solver]
        if self.family != "diag":
            defaults = {**defaults, "lr": flow_vi.SCORE_LR}
        if solver == "closed_form" and isinstance(self.problem, Target):
            defaults = {**defaults, **TARGET_CLOSED_FORM}
        given = {k: getattr(self, k) for k in defaults}
        quiet = _REBINDING.get()
        if not quiet:
            warn_inert(solver, inner_steps, given)
        opts = {k: (defaults[k] if v is None else v) for k, v in given.items()}
        if solver == "closed_form" and opts["curvature_update"] is None:
            opts["curvature_update"] = "linear" if opts["hess_init"] == "estimate" \
                else "riemannian"
        if isinstance(self.precondition, bool):
            set_attr(self, "precondition", "sigma2" if self.precondition else "none")
        check(self.problem, solver, self.loss, self.precondition, inner_steps, self.a_min,
              self.max_step, opts)
        if opts["init_std"] is None:  # the closed form's q₀ is its curvature average's start
            opts["init_std"] = 1e-2 if opts["hess_init"] in (None, "estimate") else \
                float(self.initial_precision(opts["hess_init"])) ** -0.5
        opts["num_samples"] = int(opts["num_samples"])
        for name, kind in (("momentum", float), ("init_std", float)):
            opts[name] = kind(opts[name])
        for name, kind in (("inner_steps", int), ("max_step", float)):
            opts[name] = kind(getattr(self, name))
        for name, value in opts.items():
            set_attr(self, name, value)
        set_attr(self, "_opt", make_opt(self.optimizer, self.momentum))
        self.check_annealing()
        if self.family != "diag" and solver != "gradient":
            raise ValueError(f"family={self.family!r} uses the gradient solver (the closed "
                             "form is the Gaussian argmin): drop solver='closed_form'")
        self.setup_family(self.problem)
        flow_vi.check_score_vi(self, quiet)

    def initial_precision(self, hess_init: float) -> float:
        """a₀ = λ0·h0 + P: the closed form's curvature average at the start (IVON's
        λ(h0 + δ); λ0 = N_eff/T, P the prior's precision 1/(σ0² T), 0 on a Target)."""
        size = self.problem.effective_num_data / self.problem.temperature
        return size * hess_init + precision_floor(self.problem, target=0.0)

    @property
    def guessed_init_std(self) -> bool:  # type: ignore[override]
        """False for the closed form with a number ``hess_init``: its σ₀ is the curvature
        average's start, which moves slowly by design (as IVON's)."""
        return self.solver != "closed_form" or self.hess_init == "estimate"

    @property
    def laplace_start(self) -> dict[str, Any]:  # type: ignore[override]
        """The options that make q₀ the Laplace approximation on a Target's standardised
        coordinates (σ₀ = 1, and for the closed form the curvature average's start 1)."""
        return {"init_std": 1.0, **({"hess_init": 1.0} if self.solver == "closed_form"
                                    else {})}

    @property
    def step_size_param(self) -> str:
        """The option that sets the step size (named in the runner's NaN message)."""
        return "omega" if self.solver == "closed_form" else "lr"

    def for_run(self, total_steps: int) -> ScoreVI:
        """Bind the schedule's length and ``warmup=None`` to 10 % of the run (the runner
        calls this)."""
        token = _REBINDING.set(True)  # the user was warned when building it
        try:
            bound = Annealing.for_run(self, total_steps)
            if bound.warmup is not None:
                return bound
            return dataclasses.replace(bound, warmup=max(1, int(WARMUP_FRACTION * total_steps)))
        finally:
            _REBINDING.reset(token)

    def init(self, params: TensorTree | DiagGaussianParams | None = None, *,
             generator: torch.Generator) -> ScoreVIState:
        if self._flow is not None:
            return self.flow_init(params, generator)
        lam = initial_lam(self.problem, params, self.init_std, generator)
        noise = rng.split(generator, device=device_of(lam.mu))
        if self.solver == "closed_form":
            a0 = None if self.hess_init == "estimate" else self.initial_precision(self.hess_init)
            opt = closed_form.init(lam, self.omega, a0)
        else:
            opt = self._opt.init(lam)
        return ScoreVIState(lam=lam, anchor=lam, opt_state=opt, rng_state=rng.state_of(noise),
                            step=0, average=self.initial_average(lam))

    def alpha(self, step: int) -> float:
        """α_t = α_max · min(1, t / warmup) (docs/score_vi.md); no warm-up when ``warmup`` is 0 or unbound."""
        return self.alpha_max * min(1.0, step / self.warmup) if self.warmup else self.alpha_max

    def anchor_draws(self, anchor: DiagGaussianParams, gen: torch.Generator) -> TensorTree:
        """S draws of q_t: independent, or S/2 antithetic pairs μ_t ± σ_t ε."""
        return self.anchor_noise(anchor, gen)[1]

    def anchor_noise(self, anchor: DiagGaussianParams, gen: torch.Generator
                     ) -> tuple[TensorTree, TensorTree]:
        """:meth:`anchor_draws` with their offsets from the anchor: ``(σ_t ε_k, θ_k)``."""
        sigma = tree_map(torch.exp, anchor.rho)
        if not self.antithetic:
            return gaussian_draws(anchor.mu, sigma, self.num_samples, gen)
        noise = tree_map(_antithetic, draw_eps(anchor, self.num_samples // 2, gen), sigma)
        return noise, tree_map(torch.add, noise, anchor.mu)

    @property
    def flat_storage(self) -> bool:
        """Flat on the diagonal Gaussian, both solvers (a flow family keeps its own
        layout)."""
        return self.storage == "flat" and self._flow is None

    def update(self, state: ScoreVIState, batch: Batch) -> tuple[ScoreVIState, Info]:
        if self._flow is not None:
            k = self.inner_steps
            return flow_vi.score_step(
                self._flow, self._layout, self._opt, self.rate(state.step), self.problem,
                state, batch,
                num_samples=self.num_samples, alpha=self.alpha(state.step // k * k),
                inner_steps=k, gaussian=self.gradients)
        t = state.step
        anchor = state.lam if t % self.inner_steps == 0 else state.anchor
        alpha = self.alpha(t // self.inner_steps * self.inner_steps)
        gen = rng.from_state(state.rng_state, device=device_of(anchor.mu))
        noise, thetas = self.anchor_noise(anchor, gen)  # (S, ...) from q_t, no grad
        value, scores = minibatch_scores(self.problem, thetas, batch)
        # the draws came from the anchor q_t: value + H(q_t) estimates its ELBO (plotted)
        info: dict[str, Any] = {"log_prob": value, "elbo": value + entropy(anchor),
                                "alpha": alpha}
        guarded = isinstance(self.problem, Target)  # the divergence guard: Targets only
        if self.solver == "closed_form" and guarded and not all_finite((value, scores)):
            # draws from an overshooting q: back off instead of passing NaN on (guard)
            lam, opt_state = closed_form.back_off(state.opt_state, t, "a score was not finite")
            info = {"log_prob": None, "alpha": alpha, "rejected": 1.0}  # none evaluated
        elif self.solver == "closed_form":
            lam, opt_state, extra = closed_form.step(
                state.lam, anchor, noise, scores, prior_terms(self.problem, anchor.mu),
                state.opt_state, self.settings(state, alpha, guarded),
                a_min=self.a_min if self.a_min is not None else precision_floor(self.problem),
                t=t)
            info.update(extra)
        else:
            grads = self.gradients(state.lam, anchor, thetas, scores, alpha, noise)
            lam, opt_state = self._opt.apply(grads, state.opt_state, state.lam,
                                             self.rate(t), fused=True)
        new = ScoreVIState(lam=lam, anchor=anchor, opt_state=opt_state,
                           rng_state=rng.state_of(gen), step=t + 1, average=state.average)
        return self.advance_average(new), info

    def settings(self, state: ScoreVIState, alpha: float,
                 guarded: bool) -> closed_form.Settings:
        """The closed form's settings at this step (ω scheduled, the estimator named)."""
        estimator = "pair" if self.antithetic else "centred" if self.num_samples > 1 \
            else "price"
        omega = float(state.opt_state.omega)
        return closed_form.Settings(
            alpha=alpha, omega=omega * self.factor(state.step),
            damping=1.0 if self.hess_init != "estimate" else omega,
            decay=self.curvature_decay, start=self.hess_init != "estimate",
            riemannian=self.curvature_update == "riemannian", momentum=self.momentum,
            estimator=estimator, loss=self.loss, max_step=self.max_step, guard=guarded)

    def gradients(self, lam: DiagGaussianParams, anchor: DiagGaussianParams,
                  thetas: TensorTree, scores: TensorTree, alpha: float,
                  noise: TensorTree | None = None) -> DiagGaussianParams:
        """The preconditioned λ-gradient of the per-anchor loss (module docstring);
        ``noise``: the draws' offsets θ_k − μ_t, when the caller has them."""
        n = float(self.problem.effective_num_data)
        if self.precondition == "sigma2" and self.loss == "rb" and anchor is lam:  # = ADVI
            if noise is None:
                noise = tree_map(torch.sub, thetas, lam.mu)
            return anchored_rb_gradients(noise, scores, n)
        centred = self.precondition == "natural" and self.loss == "rb"
        extra = {"centred": True, "antithetic": self.antithetic} if centred else {}
        grads = (rb_gradients if self.loss == "rb" else mc_gradients)(
            lam, anchor, thetas, scores, alpha, **extra)
        if self.precondition == "natural":
            return natural_precondition(grads, lam, anchor, alpha)
        if self.precondition == "none":
            return DiagGaussianParams(mu=tree_map(lambda g: g / (2 * n), grads.mu),
                                      rho=tree_map(lambda g: g / (4 * n), grads.rho))
        var = tree_map(lambda r: (2 * r).exp(), lam.rho)
        return DiagGaussianParams(mu=tree_map(lambda g, v: g * v / (2 * n), grads.mu, var),
                                  rho=tree_map(lambda g, v: g * v / (4 * n), grads.rho, var))


def _antithetic(eps: Tensor, sigma: Tensor) -> Tensor:
    """``(σε, −σε)`` stacked along the draws (two passes into one new tensor)."""
    half = eps.shape[0]
    out = eps.new_empty((2 * half, *eps.shape[1:]))
    torch.mul(eps, sigma, out=out[:half])
    torch.neg(out[:half], out=out[half:])
    return out


build = builder(ScoreVI)

__all__ = [
    "SOLVER_DEFAULTS", "ScoreVI", "ScoreVIState", "anchored_rb_gradients", "build",
    "cross_term", "mc_gradients", "minibatch_scores", "natural_precondition",
    "precision_floor", "rb_gradients",
]


ALGORITHM = ScoreVI
