"""score_vi and advi with a normalizing-flow family (``family="flow"`` or ``"spline"``;
derivations and measurements: ``docs/flows.md``).

``family="spline"`` (:mod:`bdlkit.families.spline`) is a monotone spline per tensor on
top of the diagonal Gaussian, on every random parameter: O(d), for whole networks.
``family="flow"``: on a Target the flow is on all of θ. On a network (a BayesianModel)
it is on the tensors ``flow_on`` selects (default the last layer), with a diagonal
Gaussian on the other random parameters: they are laid out as one vector, the selected
tensors first (:class:`bdlkit.families.layout.Layout`), and the family is the flow on
that leading block times the Gaussian on the rest (``FlowFamily(flowed=m)``; above 64
values a block-diagonal flow whose cost and memory grow linearly with m, refused before
anything is allocated when a step would not fit in the free memory:
:mod:`bdlkit.families.flow_modules`). score_vi's loss is then the flow block's (over m),
and the Gaussian block takes score_vi's own Rao-Blackwellised diagonal gradients
(:func:`score_step`); advi's Gaussian block takes advi's closed-form gradients and its
flowed block's log q comes from the sampling pass (:func:`elbo_step`), so autograd runs
over the m flowed values only. The network is only ever called on draws, one forward
and backward per draw, as for the diagonal family; the flow's graph never reaches it.

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

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from bdlkit.algorithms.vi.common import minibatch_scores
from bdlkit.core import rng
from bdlkit.core.protocol import LOG_PROB, NONFINITE, Batch, Info, Problem
from bdlkit.core.tree import all_finite, pytree_dataclass
from bdlkit.families.diag_gaussian import DiagGaussianParams
from bdlkit.families.flow import FlowApproximation, FlowFamily, FlowParams
from bdlkit.families.flow_modules import BLOCK, check_memory
from bdlkit.families.layout import Layout
from bdlkit.families.spline import SplineFamily
from bdlkit.problems import BayesianModel, Target
from bdlkit.problems.select import parameter_selection, select_parameters

#: (block λ, block anchor, block draws, block scores, α) -> the block's λ-gradients
GaussianGradients = Callable[[DiagGaussianParams, DiagGaussianParams, Tensor, Tensor, float],
                             DiagGaussianParams]
FAMILIES = ("diag", "flow", "spline")
FLOW_OPTIONS = ("flow_transforms", "flow_bins", "flow_hidden", "flow_on")
INERT = {"diag": FLOW_OPTIONS, "flow": (), "spline": ("flow_transforms", "flow_hidden", "flow_on")}
SCORE_LR = 3e-3  # score_vi's default lr with a flow: 1e-2 is unstable (module docstring)


@dataclass(frozen=True)
class FlowOptions:
    """The variational family's options, shared by score_vi and advi (keyword-only).

    Args:
        family: "diag" (the diagonal Gaussian), "flow" (a neural spline flow on a Target's
            θ or a network's flow_on tensors, a diagonal Gaussian on the rest) or "spline"
            (a monotone spline per tensor on top of the diagonal Gaussian: O(d), for
            whole networks). Both start at the diagonal Gaussian q₀; their loss is
            scaled by 1/d, the Gaussian's by 1/N, so the lr differ in meaning.
        flow_transforms: spline coupling layers of the flow (>= 1).
        flow_bins: spline bins per coordinate (>= 2; the spline family's too).
        flow_hidden: width of the two hidden layers of each coupling's network (>= 1).
        flow_on: on a network, the tensors the flow acts on: "last_layer", "all" (every
            random tensor) or names and fnmatch patterns, comma-separated
            ("fc2.*,out.bias"); the other random tensors get a diagonal Gaussian. A
            Target's flow is on all of θ.
    """

    family: Literal["diag", "flow", "spline"] = field(default="diag", kw_only=True)
    flow_transforms: int = field(default=3, kw_only=True)
    flow_bins: int = field(default=8, kw_only=True)
    flow_hidden: int = field(default=32, kw_only=True)
    flow_on: str | tuple[str, ...] = field(default="last_layer", kw_only=True)
    _flow: FlowFamily | SplineFamily | None = field(default=None, init=False, repr=False,
                                                    compare=False)
    _layout: Layout | None = field(default=None, init=False, repr=False, compare=False)

    def setup_family(self, problem: Problem) -> None:
        """Check the family options and build the flow (``__post_init__`` calls this)."""
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        object.__setattr__(self, "flow_on", parameter_selection(self.flow_on, "flow_on"))
        if self.flow_on != "last_layer":  # given: it must be able to act
            if self.family != "flow":
                raise ValueError(f"flow_on is an option of family='flow'; family="
                                 f"{self.family!r} covers every Bayesian tensor: drop "
                                 "flow_on (or restrict the model's bayesian=)")
            if isinstance(problem, Target):
                raise ValueError("flow_on selects a network's tensors; on a Target the flow "
                                 "is on all of θ: drop flow_on")
        if self.family == "flow":
            flow, layout = family_for(problem, self.flow_transforms, self.flow_bins,
                                      self.flow_hidden, self.flow_on,
                                      int(self.num_samples))  # type: ignore[attr-defined]
        elif self.family == "spline":
            flow, layout = spline_for(problem, self.flow_bins)
        else:
            return
        object.__setattr__(self, "_flow", flow)
        object.__setattr__(self, "_layout", layout)

    @property
    def label(self) -> str:
        """The method and, with a flow, its family (named in the runner's NaN message)."""
        name = self.name  # type: ignore[attr-defined]
        return name if self.family == "diag" else f"{name} (family={self.family!r})"

    def record(self) -> dict[str, Any]:
        """The checkpoint record without the options that cannot act: a diagonal-Gaussian
        run's has no flow options (it is the record of the methods before flows
        existed), a Target's no ``flow_on`` (it selects network tensors). A flow cut into
        blocks records the block size, so that a checkpoint of the one flow on all the
        values that bdlkit wrote before blocks is refused, not continued."""
        record = super().record()  # type: ignore[misc]
        inert = INERT[self.family] + (("flow_on",) if self._layout is None else ())
        for name in set(inert) | ({"family"} if self.family == "diag" else set()):
            record.pop(name, None)
        if isinstance(self._flow, FlowFamily) and self._flow.blocks > 1:
            record["flow_block"] = self._flow.block  # a block-diagonal flow (not before)
        return record

    def flow_init(self, params: Any, generator: torch.Generator) -> FlowVIState:
        return init(self._flow, self._layout, self._opt, params,  # type: ignore[attr-defined]
                    self.problem, self.init_std, generator)  # type: ignore[attr-defined]

    def is_finite(self, state: Any) -> bool:
        """λ is finite (a flow's mean would take thousands of draws to check)."""
        if self._flow is not None:
            return all_finite(state.lam)
        return super().is_finite(state)  # type: ignore[misc]

    def params(self, state: Any) -> Any:
        """The variational mean (for a flow, by Monte Carlo)."""
        if self._flow is not None:
            return self.approximation(state).mean
        return super().params(state)  # type: ignore[misc]

    def approximation(self, state: Any) -> Any:
        if self._flow is not None:
            return FlowApproximation(self._flow, state.lam, self._layout)
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


def family_for(problem: Problem, transforms: int, bins: int, hidden: int,
               flow_on: str | tuple[str, ...], draws: int = 1
               ) -> tuple[FlowFamily, Layout | None]:
    """The flow family on ``problem``'s parameters and, for a network, their layout; a
    flow whose step with ``draws`` draws would not fit in the free memory is refused
    before anything is allocated (:func:`~bdlkit.families.flow_modules.check_memory`)."""
    if isinstance(problem, Target):
        check_memory(problem.dim, problem.dim, BLOCK, transforms, bins, hidden, draws,
                     problem.dtype, "cpu")
        return FlowFamily(problem.dim, transforms=transforms, bins=bins, hidden=hidden,
                          dtype=problem.dtype), None
    if not isinstance(problem, BayesianModel):
        raise ValueError(f"family='flow' needs a Target or a BayesianModel, got "
                         f"{type(problem).__name__}")
    point = problem.init_params()
    chosen = list(point) if flow_on == "all" else select_parameters(
        problem.module, list(flow_on) if isinstance(flow_on, tuple) else flow_on,
        option="flow_on")
    outside = [n for n in chosen if n not in point]
    if outside:
        raise ValueError(f"flow_on={flow_on!r} selects {outside[:3]}, which bayesian= leaves "
                         "deterministic: choose Bayesian tensors or widen bayesian=")
    layout = Layout.of(point, first=chosen)
    flowed = layout.size_of(chosen)
    if flowed == 0:
        raise ValueError(f"flow_on={flow_on!r} selects tensors with no values: a flow needs "
                         "at least one coordinate")
    first = point[chosen[0]]
    check_memory(layout.features, flowed, BLOCK, transforms, bins, hidden, draws, first.dtype,
                 first.device)
    return FlowFamily(layout.features, transforms=transforms, bins=bins, hidden=hidden,
                      dtype=first.dtype, device=first.device, flowed=flowed), layout


def spline_for(problem: Problem, bins: int) -> tuple[SplineFamily, Layout | None]:
    """The spline family on every random parameter of ``problem`` (one spline per tensor;
    a Target's θ is one tensor) and, for a network, their layout."""
    if isinstance(problem, Target):
        return SplineFamily((problem.dim,), bins=bins, dtype=problem.dtype), None
    if not isinstance(problem, BayesianModel):
        raise ValueError(f"family='spline' needs a Target or a BayesianModel, got "
                         f"{type(problem).__name__}")
    point = problem.init_params()
    layout = Layout.of(point)
    first = next(iter(point.values()))
    return SplineFamily(layout.sizes, bins=bins, dtype=first.dtype,
                        device=first.device), layout


def init(family: FlowFamily | SplineFamily, layout: Layout | None, opt: Any, params: Any,
         problem: Problem, init_std: float, generator: torch.Generator) -> FlowVIState:
    """q₀ = N(``params``, init_std² I) (f the identity; default ``problem.init_params``)."""
    if params is None:
        params = problem.init_params(generator)
    if isinstance(params, Tensor) and params.ndim == 2:
        raise ValueError("family='flow' fits one approximation: pass one point, not chains")
    if layout is not None:
        if not isinstance(params, dict) or set(params) != set(layout.names):
            raise ValueError("a flow on a network starts at a point of the network's "
                             "parameters: pass init= as the problem's init_params() dict")
        params = layout.flatten(params, batch=0)
    lam = family.init(params, init_std, generator)
    noise = rng.split(generator, device=lam["loc"].device)
    return FlowVIState(lam=lam, anchor=lam, opt_state=opt.init(lam),
                       rng_state=rng.state_of(noise), step=0)


def _grads(loss: Tensor, lam: FlowParams) -> FlowParams:
    """∇_λ loss (zero for a parameter the loss does not reach)."""
    values = torch.autograd.grad(loss, list(lam.values()), allow_unused=True)
    return {k: torch.zeros_like(v) if g is None else g
            for (k, v), g in zip(lam.items(), values, strict=True)}


def _step(opt: Any, lr: float, state: FlowVIState, grads: FlowParams, anchor: FlowParams,
          gen: torch.Generator) -> FlowVIState:
    new, opt_state = opt.apply(grads, state.opt_state, state.lam, lr, fused=True)
    return FlowVIState(lam=new, anchor=anchor, opt_state=opt_state,
                       rng_state=rng.state_of(gen), step=state.step + 1)


def problem_scores(problem: Problem, layout: Layout | None, thetas: Tensor,
                   batch: Batch) -> tuple[Tensor, Tensor]:
    """The minibatch value and scores of the draws ``thetas`` ``(S, d)``, as vectors."""
    if layout is None:
        return minibatch_scores(problem, thetas, batch)
    value, scores = minibatch_scores(problem, layout.unflatten(thetas), batch)
    return value, layout.flatten(scores)


def _info(value: Tensor, checks: list[tuple[Any, str]], **extra: float) -> Info:
    """The step's info. When the step's log density is finite but one of ``checks``
    (tensor or bool, what it is) is not, the log density is reported as NaN and
    ``NONFINITE`` names the first failed check, so the runner stops before taking the
    step, naming the family (:attr:`FlowOptions.label`), the step and what failed."""
    if bool(torch.isfinite(torch.as_tensor(value)).all()):
        for ok, what in checks:
            if not bool(torch.as_tensor(ok).all()):
                return {LOG_PROB: float("nan"), NONFINITE: what, **extra}
    return {LOG_PROB: value, **extra}


def score_step(family: FlowFamily | SplineFamily, layout: Layout | None, opt: Any, lr: float,
               problem: Problem, state: FlowVIState, batch: Batch, *, num_samples: int,
               alpha: float, inner_steps: int,
               gaussian: GaussianGradients | None = None) -> tuple[FlowVIState, Info]:
    """One proximal score-matching step (module docstring). With a flow on a leading block
    (``flowed = m < d``) and ``gaussian``, the loss is the flowed block's, over m, and the
    diagonal Gaussian block gets ``gaussian``'s gradients (score_vi's own diagonal update,
    Rao-Blackwellised): the objective is a sum over the two factors, and for the Gaussian
    factor the closed-form expectation removes the ε/σ noise of the Monte Carlo one."""
    anchor = state.lam if state.step % inner_steps == 0 else state.anchor
    gen = rng.from_state(state.rng_state, device=anchor["loc"].device)
    thetas = family.sample(anchor, num_samples, gen).detach()
    value, scores = problem_scores(problem, layout, thetas, batch)
    split = gaussian is not None and has_gaussian_block(family)
    m = family.flowed if split else family.features
    # the flowed block's score only (a flow block times a Gaussian: log q is their sum)
    score = family.head_score if split else family.score
    lam = {k: v[:m] if split and k in ("loc", "log_scale") else v  # the flowed block's
           for k, v in state.lam.items()}
    lam = {k: v.detach().requires_grad_(True) for k, v in lam.items()}
    with torch.enable_grad():
        g = score(lam, thetas[:, :m], create_graph=True)
        # at the anchor (every step at K = 1) g_t is g's value: one pass, not two
        g_anchor = g.detach() if anchor is state.lam else score(anchor, thetas[:, :m])
        fit = ((g - scores[:, :m]) ** 2).sum(-1).mean()
        prox = ((g - g_anchor) ** 2).sum(-1).mean()
        loss = (alpha * prox + fit) / m
    grads = _grads(loss, lam)
    if split:
        block = _gaussian_block(state.lam, m)
        block_anchor = block if anchor is state.lam else _gaussian_block(anchor, m)
        extra = gaussian(block, block_anchor, thetas[:, m:], scores[:, m:], alpha)
        for key, part in (("loc", extra.mu), ("log_scale", extra.rho)):
            grads[key] = torch.cat([grads[key], part])
    new = _step(opt, lr, state, grads, anchor, gen)
    checks = [(all_finite(scores), "the problem's scores at the flow's draws"),
              (torch.isfinite(loss), "the flow's score-matching loss (its scores ∇log q)")]
    if split:
        checks.append((all_finite(extra), "the Gaussian block's gradients"))
    return new, _info(value, checks, alpha=alpha, fisher=float(fit.detach()),
                      loss=float(loss.detach()))


def check_score_vi(alg: Any, quiet: bool) -> None:
    """score_vi's options against its family (its ``__post_init__``, after the family is
    built): refuse what would be wrong with a flow's Gaussian block, warn about what
    cannot act and that the flow is experimental (unless ``quiet``)."""
    if alg.family == "diag":
        return
    family, split = f"family={alg.family!r}", has_gaussian_block(alg._flow)
    if split and alg.antithetic:
        raise ValueError(f"antithetic=True with {family} on a network: the flow's draws "
                         "are independent, not antithetic pairs; drop antithetic")
    if split and alg.optimizer == "sgd":
        raise ValueError(f"optimizer='sgd' with {family} on a network: the flow block's loss "
                         "(over its coordinates) and the Gaussian block's per-datum "
                         "gradients are on different scales, which only Adam's "
                         "per-coordinate steps reconcile; use optimizer='adam'")
    if quiet:
        return
    gaussian_only = [("loss", alg.loss, "rb"), ("antithetic", alg.antithetic, False),
                     ("max_step", alg.max_step, float("inf")),
                     ("precondition", alg.precondition, "sigma2")]
    inert = [n for n, v, d in gaussian_only if v != d and (n == "max_step" or not split)]
    if inert:
        warnings.warn(f"score_vi: {', '.join(inert)} cannot act with {family} (they shape "
                      "the Gaussian solvers: on a network the diagonal Gaussian block, "
                      "and max_step only the closed form); drop them", stacklevel=5)
    warnings.warn(f"score_vi: {family} is experimental: far from the posterior it drifts "
                  "or diverges at a constant lr (`bdlkit bench flow-stability`); an "
                  "annealed lr, e.g. bdlkit.core.schedules.exponential(3e-3, 3e-5, steps), "
                  f"keeps it on course there; check it against advi with {family}",
                  stacklevel=5)


def has_gaussian_block(family: Any) -> bool:
    """Whether the family is a flow on a leading block times a diagonal Gaussian."""
    return isinstance(family, FlowFamily) and family.flowed < family.features


def _gaussian_block(lam: FlowParams, m: int) -> DiagGaussianParams:
    """The diagonal Gaussian factor of a flow on a leading block: coordinates m onwards."""
    return DiagGaussianParams(mu=lam["loc"][m:].detach(), rho=lam["log_scale"][m:].detach())


def elbo_step(family: FlowFamily, layout: Layout | None, opt: Any, lr: float,
              problem: Problem, state: FlowVIState, batch: Batch, *, num_samples: int,
              stl: bool) -> tuple[FlowVIState, Info]:
    """One reparameterised ELBO step; ``stl``: the sticking-the-landing entropy term
    (log q at λ̄, no graph through the parameters), else the full estimator. With a
    diagonal Gaussian block (a network's flow), only the flowed block goes through
    autograd and the Gaussian block takes advi's closed-form gradients
    (``_gaussian_elbo_grads``)."""
    if has_gaussian_block(family):
        return _split_elbo_step(family, layout, opt, lr, problem, state, batch,
                                num_samples=num_samples, stl=stl)
    gen = rng.from_state(state.rng_state, device=state.lam["loc"].device)
    lam = {k: v.detach().requires_grad_(True) for k, v in state.lam.items()}
    frozen = {k: v.detach() for k, v in state.lam.items()}
    with torch.enable_grad():
        thetas = family.sample(lam, num_samples, gen)
        value, scores = problem_scores(problem, layout, thetas.detach(), batch)
        log_q = family.log_prob(frozen if stl else lam, thetas)
        surrogate = -((scores.detach() * thetas).sum(-1) - log_q).mean() / family.features
    new = _step(opt, lr, state, _grads(surrogate, lam), state.anchor, gen)
    checks = [(all_finite(scores), "the problem's scores at the flow's draws"),
              (torch.isfinite(surrogate), "the flow's ELBO estimate (its log q)")]
    return new, _info(value, checks, elbo=float((value - log_q.detach().mean()).detach()))


def _split_elbo_step(family: FlowFamily, layout: Layout | None, opt: Any, lr: float,
                     problem: Problem, state: FlowVIState, batch: Batch, *,
                     num_samples: int, stl: bool) -> tuple[FlowVIState, Info]:
    """:func:`elbo_step` on a flow block times a diagonal Gaussian block: the same draws
    (base noise z of all d coordinates from the generator, as ``family.sample``), the
    same surrogate; autograd through the flowed block only (its log q from the sampling
    pass with the full estimator), the Gaussian block's gradients in closed form."""
    m, d = family.flowed, family.features
    loc, log_scale = state.lam["loc"], state.lam["log_scale"]
    gen = rng.from_state(state.rng_state, device=loc.device)
    z = torch.randn((num_samples, d), generator=gen, dtype=loc.dtype, device=loc.device)
    # the flowed block's λ as leaves of m values (autograd never sees the Gaussian block)
    lam = {k: v[:m] if k in ("loc", "log_scale") else v for k, v in state.lam.items()}
    lam = {k: v.detach().requires_grad_(True) for k, v in lam.items()}
    sigma = log_scale[m:].exp()
    eps = z[:, m:]
    with torch.enable_grad():
        head, log_q = family.head(lam, z, log_prob=not stl)
        if stl:
            log_q = family.head_log_prob({k: v.detach() for k, v in lam.items()}, head)
        thetas = torch.cat([head.detach(), torch.addcmul(loc[m:], sigma, eps)], -1)
        value, scores = problem_scores(problem, layout, thetas, batch)
        surrogate = -((scores[:, :m] * head).sum(-1) - log_q).mean() / d
    grads = _grads(surrogate, lam)
    mu_grad, rho_grad = _gaussian_elbo_grads(scores[:, m:], eps, sigma, d, stl)
    grads["loc"] = torch.cat([grads["loc"], mu_grad])
    grads["log_scale"] = torch.cat([grads["log_scale"], rho_grad])
    new = _step(opt, lr, state, grads, state.anchor, gen)
    checks = [(all_finite(scores), "the problem's scores at the flow's draws"),
              (torch.isfinite(surrogate), "the flow's ELBO estimate (its log q)")]
    gaussian_log_q = -0.5 * (eps**2).sum(-1) - log_scale[m:].sum() \
        - 0.5 * (d - m) * math.log(2 * math.pi)
    log_q = log_q.detach() + gaussian_log_q
    return new, _info(value, checks, elbo=float((value - log_q.mean()).detach()))


def _gaussian_elbo_grads(scores: Tensor, eps: Tensor, sigma: Tensor, d: int,
                         stl: bool) -> tuple[Tensor, Tensor]:
    """The surrogate's gradients in (μ, log σ) of the Gaussian block, θ = μ + σε, exactly
    what autograd would give: (−ŝ, −(ŝσε + 1)) with the full estimator, (−(ŝ + ε/σ),
    −(ŝ + ε/σ)σε) with sticking the landing, each averaged over the draws and / d."""
    if stl:
        scores = torch.div(eps, sigma).add_(scores)
    mu = scores.mean(0).mul_(-1 / d)
    rho = (scores * eps).mean(0).mul_(sigma)
    return mu, (rho if stl else rho.add_(1)).mul_(-1 / d)
