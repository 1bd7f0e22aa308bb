"""score_vi and advi with a normalizing-flow family (``family="flow"``), on Targets.

Both take S draws θ_k and their minibatch scores ŝ_k = ∇log π̂(θ_k) per step and move the
flow parameters λ (:mod:`bdlkit.families.flow`) with the method's optimiser:

- **score_vi** (proximal score matching, ``docs/score_vi.md``): θ_k ~ q_t, the anchor, a
  frozen copy without a graph; g_λ = ∇_θ log q_λ by autograd through the flow only
  (``create_graph=True``, never through the problem), and::

      L_t(λ) = (1/S) Σ_k [ α_t ‖g_λ(θ_k) − g_t(θ_k)‖² + ‖g_λ(θ_k) − ŝ_k‖² ] / d

  with K = ``inner_steps`` optimiser steps per anchor and α_t the proximal weight. No
  reparameterisation: the draws carry no gradient.
- **advi** (reparameterised ELBO): θ_k = T_λ(ε_k) with the graph, and the surrogate
  −(1/S) Σ_k [ ŝ_k · θ_k − log q(θ_k) ] / d, whose gradient is −∇_λ ELBO / d; with
  ``stl=True`` log q is taken at λ̄, λ without a graph (sticking the landing: the score
  term, zero in expectation, is dropped), else at λ (the full estimator).

The 1/d keeps one learning rate usable across dimensions. The problem is called on the
draws only (:func:`~bdlkit.algorithms.vi.common.minibatch_scores`), once per step.

Status, measured (``tests/algorithms/vi/test_flow_vi.py``; S = 16 draws per step):

- advi with a flow recovers a correlated 2-D Gaussian from N(0, I) in 600 steps (largest
  mean error 0.09, covariance error 8 % of its largest entry, with STL; 0.14 and 3 %
  with the full estimator);
- on two modes 8 sd apart, from N((0.5, 0), I) between them (1500 steps, S = 32):
  score_vi keeps both (0.72 / 0.28 of its mass), advi with STL collapses onto one
  (0.000 / 1.000), advi with the full estimator keeps both (0.45 / 0.55);
- on a correlated 5-D Gaussian from the default (diagonal Laplace) start, whose
  covariance error is 38 %, score_vi with a flow reaches 4.3 % in 300 steps at lr 3e-3
  (and 7.3 % at 600: with a constant lr it jitters), advi 4.1 % in 600;
- score_vi with a flow is experimental far from the posterior: on N((3, −2),
  diag(0.25, 4)) from N(0, I) at lr 1e-2 its Fisher loss goes 74 → 289 → 2.6 over 600
  steps, ending at mean (2.9, 0.8); at lr 3e-3 it ends at (3.14, −1.8), sd (0.47, 1.74);
  with K = 5 at lr 1e-2 it diverges; from a start 1–4 σ off on the 5-D Gaussian it is
  still off by 1 σ after 3000 steps. Hence its default lr of 3e-3 and its warning.

At K = 1 the proximal term has no gradient at the anchor (g_λ = g_t there), as for the
Gaussian, so α only acts with K > 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from bdlkit.algorithms.vi.common import minibatch_scores
from bdlkit.core import rng
from bdlkit.core.protocol import Batch, Info, Problem
from bdlkit.core.tree import pytree_dataclass, tree_map
from bdlkit.families.flow import FlowApproximation, FlowFamily, FlowParams
from bdlkit.problems import Target

FAMILIES = ("diag", "flow")
SCORE_LR = 3e-3  # score_vi's default lr with a flow: 1e-2 is unstable (module docstring)


@dataclass(frozen=True)
class FlowOptions:
    """The variational family's options, shared by score_vi and advi (keyword-only).

    Args:
        family: "diag" (the diagonal Gaussian) or "flow" (a neural spline flow on a
            Target's θ, started at the diagonal Gaussian q₀; its loss is scaled by 1/d,
            the Gaussian's by 1/N, so the two families' lr differ in meaning).
        flow_transforms: spline coupling layers of the flow (>= 1).
        flow_bins: spline bins per coordinate (>= 2).
        flow_hidden: width of the two hidden layers of each coupling's network (>= 1).
    """

    family: Literal["diag", "flow"] = field(default="diag", kw_only=True)
    flow_transforms: int = field(default=3, kw_only=True)
    flow_bins: int = field(default=8, kw_only=True)
    flow_hidden: int = field(default=32, kw_only=True)
    _flow: FlowFamily | None = field(default=None, init=False, repr=False, compare=False)

    def setup_family(self, problem: Problem) -> None:
        """Check the family options and build the flow (``__post_init__`` calls this)."""
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        if self.family == "flow":
            flow = family_for(problem, self.flow_transforms, self.flow_bins, self.flow_hidden)
            object.__setattr__(self, "_flow", flow)

    def record(self) -> dict[str, Any]:
        """The checkpoint record; a diagonal-Gaussian run's leaves the flow options out,
        so it is the record of the methods before flows existed."""
        record = super().record()  # type: ignore[misc]
        if self.family == "diag":
            for name in ("family", "flow_transforms", "flow_bins", "flow_hidden"):
                record.pop(name)
        return record

    def flow_init(self, params: Tensor | None, generator: torch.Generator) -> FlowVIState:
        return init(self._flow, self._opt, params, self.problem,  # type: ignore[attr-defined]
                    self.init_std, generator)  # type: ignore[attr-defined]

    def params(self, state: Any) -> Any:
        """The variational mean (for a flow, by Monte Carlo)."""
        if self._flow is not None:
            return approximation(self._flow, state).mean
        return super().params(state)  # type: ignore[misc]

    def approximation(self, state: Any) -> Any:
        if self._flow is not None:
            return approximation(self._flow, state)
        return super().approximation(state)  # type: ignore[misc]


@pytree_dataclass
class FlowVIState:
    """λ of the flow, the anchor λ_t (score_vi's K inner steps), the optimiser state,
    the noise generator state and the step."""

    FLOW_FIELDS: ClassVar[tuple[str, ...]] = ("lam", "anchor")  # mapped by a Laplace start

    lam: FlowParams
    anchor: FlowParams
    opt_state: Any
    rng_state: Tensor
    step: int


def family_for(problem: Problem, transforms: int, bins: int, hidden: int) -> FlowFamily:
    """The flow family on ``problem``'s parameters; refuses what it cannot do yet."""
    if not isinstance(problem, Target):
        raise ValueError("family='flow' works on Targets so far; for a network use "
                         "family='diag' (flows on a network's last layer are not built yet)")
    return FlowFamily(problem.dim, transforms=transforms, bins=bins, hidden=hidden,
                      dtype=problem.dtype)


def init(family: FlowFamily, opt: Any, params: Tensor | None, problem: Problem,
         init_std: float, generator: torch.Generator) -> FlowVIState:
    """q₀ = N(``params``, init_std² I) (f the identity; default ``problem.init_params``)."""
    if params is None:
        params = problem.init_params(generator)
    if isinstance(params, Tensor) and params.ndim == 2:
        raise ValueError("family='flow' fits one approximation: pass one point, not chains")
    lam = family.init(params, init_std, generator)
    noise = rng.split(generator, device=lam["loc"].device)
    return FlowVIState(lam=lam, anchor=lam, opt_state=opt.init(lam),
                       rng_state=rng.state_of(noise), step=0)


def _apply(opt: Any, lr: float, state: FlowVIState, loss: Tensor, lam: FlowParams,
           anchor: FlowParams, gen: torch.Generator) -> FlowVIState:
    grads = dict(zip(lam, torch.autograd.grad(loss, list(lam.values())), strict=True))
    updates, opt_state = opt.update(grads, state.opt_state, state.lam, lr)
    new = tree_map(lambda p, u: (p + u).detach(), state.lam, updates)
    return FlowVIState(lam=new, anchor=anchor, opt_state=opt_state,
                       rng_state=rng.state_of(gen), step=state.step + 1)


def score_step(family: FlowFamily, opt: Any, lr: float, problem: Problem,
               state: FlowVIState, batch: Batch, *, num_samples: int, alpha: float,
               inner_steps: int, kld: float) -> tuple[FlowVIState, Info]:
    """One proximal score-matching step (module docstring)."""
    anchor = state.lam if state.step % inner_steps == 0 else state.anchor
    gen = rng.from_state(state.rng_state, device=anchor["loc"].device)
    thetas = family.sample(anchor, num_samples, gen).detach()
    value, scores = minibatch_scores(problem, thetas, batch, kld)
    g_anchor = family.score(anchor, thetas)
    lam = {k: v.detach().requires_grad_(True) for k, v in state.lam.items()}
    with torch.enable_grad():
        g = family.score(lam, thetas, create_graph=True)
        fit = ((g - scores) ** 2).sum(-1).mean()
        prox = ((g - g_anchor) ** 2).sum(-1).mean()
        loss = (alpha * prox + fit) / family.features
    new = _apply(opt, lr, state, loss, lam, anchor, gen)
    return new, {"log_prob": value, "alpha": alpha, "fisher": float(fit.detach()),
                 "loss": float(loss.detach())}


def elbo_step(family: FlowFamily, opt: Any, lr: float, problem: Problem,
              state: FlowVIState, batch: Batch, *, num_samples: int, stl: bool
              ) -> tuple[FlowVIState, Info]:
    """One reparameterised ELBO step; ``stl``: the sticking-the-landing entropy term
    (log q at λ̄, no graph through the parameters), else the full estimator."""
    gen = rng.from_state(state.rng_state, device=state.lam["loc"].device)
    lam = {k: v.detach().requires_grad_(True) for k, v in state.lam.items()}
    frozen = {k: v.detach() for k, v in state.lam.items()}
    with torch.enable_grad():
        thetas = family.sample(lam, num_samples, gen)
        value, scores = minibatch_scores(problem, thetas.detach(), batch)
        log_q = family.log_prob(frozen if stl else lam, thetas)
        surrogate = -((scores.detach() * thetas).sum(-1) - log_q).mean() / family.features
    new = _apply(opt, lr, state, surrogate, lam, state.anchor, gen)
    return new, {"log_prob": value,
                 "elbo": float((value - log_q.detach().mean()).detach())}


def approximation(family: FlowFamily, state: FlowVIState) -> FlowApproximation:
    return FlowApproximation(family, state.lam)
