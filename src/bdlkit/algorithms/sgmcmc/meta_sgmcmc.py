"""Meta-SGMCMC (NNSGHMC): SGHMC with meta-learned diagonal curl and diffusion matrices.

Gong, Li & Hernández-Lobato, "Meta-Learning for Stochastic Gradient MCMC", ICLR 2019
(``docs/meta_sgmcmc.md``). With u = U/N the mean energy (the prior's normalising constant
left out, as in meta-training), g = ∂U/N the minibatch gradient of
the per-datum loss (``common.loss_gradient``), ∇Ũ = N·g, the networks Q_f(u, p) and
D_f(u, p, g) of :mod:`bdlkit.meta_sgmcmc.dynamics` and ε = sqrt(step_mult/N)::

    p_{t+1} = p_t − ε·Q_f·∇Ũ − ε·D_f·p_t + ε·T·Γ_p + sqrt(2ε·T·D_f)·ξ_t
    θ_{t+1} = θ_t + ε·Q_f(u, p_{t+1})·p_{t+1} + ε·T·Γ_θ

T is the problem's temperature. Γ_p = ∂Q_f/∂θ + ∂D_f/∂p and Γ_θ = −∂Q_f/∂p are the
correction terms that keep π_T invariant; ``gamma="finite_difference"`` (the default, the
authors' sampling rule) takes them from values of consecutive steps (step 0 by autograd),
``gamma="autograd"`` computes them exactly with one backward pass of the small networks per
step. With Q_f ≡ 1 and D_f ≡ D this is SGHMC with lr = ε²·N and friction α = ε·D
(``docs/meta_sgmcmc.md``, SGHMC limit). On a regression model ``step_mult`` defaults to
sghmc's regression lr, 0.002 (``problem_defaults``,
:data:`~bdlkit.algorithms.sgmcmc.common.REGRESSION_LR`): the shipped constant 0.007 was
meta-trained on classification and diverged on a 300-point heteroscedastic regression
(``bdlkit bench defaults``).

``meta_params`` is ``"pretrained"`` (bdlkit's shipped set,
:func:`bdlkit.meta_sgmcmc.load_pretrained`), a path to a ``bdlkit meta-train meta-sgmcmc``
file, or a :class:`~bdlkit.meta_sgmcmc.Pretrained`. A non-finite D_f or Γ stops the run with
a :class:`~bdlkit.core.errors.NonFiniteError` naming the step.

Cost per step: one gradient, two passes of f_Q and two of f_D over (d, 2–3) inputs (finite
differences), or three forward and three backward passes (autograd); on a Target's chain
stack one more ``log_prob`` for each chain's u. The networks run
:data:`~bdlkit.meta_sgmcmc.dynamics.CHUNK` coordinates at a time, so their transient
memory (hidden activations, the element-wise terms, autograd's graph) is a chunk's, not
d × hidden; on a network the state is flat storage (:mod:`bdlkit.algorithms.storage`) and the gradient
the module oracle on the flat vector (:class:`~bdlkit.problems.oracles.FlatModuleOracle`),
whose peak memory is SGD's. State: θ, p and the previous step's u, p and two Q_f values
(finite differences).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

import torch

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.sgmcmc.common import (
    REGRESSION_LR,
    LearnedVersion,
    chain_start,
    loss_gradient,
)
from bdlkit.algorithms.storage import FlatStorage
from bdlkit.core import rng
from bdlkit.core.errors import NonFiniteError
from bdlkit.core.flat import FlatProblem
from bdlkit.core.meta_files import meta_digest as digest_of
from bdlkit.core.meta_files import resolve as resolve_meta
from bdlkit.core.protocol import Batch, Info, Problem, Sampler
from bdlkit.core.tree import (
    TensorTree,
    device_of,
    pytree_dataclass,
    randn_like,
    tree_flatten_with_path,
    tree_leaves,
    tree_unflatten,
    zeros_like,
)
from bdlkit.meta_sgmcmc import dynamics as dyn
from bdlkit.meta_sgmcmc.pretrained import Pretrained, load_meta_params, load_pretrained
from bdlkit.problems import Target

KIND = "sampler"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm
GAMMA_MODES = ("finite_difference", "autograd")


@pytree_dataclass
class MetaSGMCMCState:
    params: TensorTree
    momentum: TensorTree  # p
    rng_state: torch.Tensor
    step: int
    # finite differences only (None with gamma="autograd"; zeros before the first step):
    prev_energy: torch.Tensor | None = None  # u_{t-1}
    prev_momentum: TensorTree | None = None  # p_{t-1}
    prev_q: TensorTree | None = None  # Q_f(u_{t-1}, p_{t-1})
    prev_q_next: TensorTree | None = None  # Q_f(u_{t-1}, p_t)


@dataclass(frozen=True)
class MetaSGMCMC(LearnedVersion, FlatStorage, Sampler):
    """Meta-SGMCMC (module docstring). The constants left at None are the ones stored with
    the meta-parameters; the fields then hold the constants used. On a network the state
    is stored flat (:class:`~bdlkit.algorithms.storage.FlatStorage`) and the networks run
    by chunks of the flat vector.

    Args:
        meta_params: "pretrained" (bdlkit's shipped set), a path to a ``bdlkit meta-train
            meta-sgmcmc`` file, or a :class:`~bdlkit.meta_sgmcmc.Pretrained`.
        gamma: how Γ is computed: "finite_difference" (in time, the authors' sampling rule)
            or "autograd" (exact, one backward pass of the networks per step).
        step_mult: ε = sqrt(step_mult / N).
        eps: the step ε itself (overrides ``step_mult``).
        q_clamp: the bound of the absolute value of Q_f.
        d_scale: the factor of the absolute value of f_D in D_f.
        grad_mult: the factor of g in f_D's input.
        d_max: the upper clamp of D_f (bdlkit clamps at min(d_max, 1/ε): ``docs/meta_sgmcmc.md``).
        d_q_mult: c_D = d_q_mult / ε, the factor of Q_f² in D_f.
    """

    problem: Problem
    meta_params: str | Pretrained = field(default="pretrained", repr=False, compare=False)
    gamma: Literal["finite_difference", "autograd"] = "finite_difference"
    step_mult: float | None = None
    eps: float | None = None
    q_clamp: float | None = None
    d_scale: float | None = None
    grad_mult: float | None = None
    d_max: float | None = None
    d_q_mult: float | None = None
    name: str = "meta_sgmcmc"
    step_size_param: ClassVar[str] = "eps"
    problem_defaults: ClassVar[dict[str, dict[str, Any]]] = {
        "regression": {"step_mult": REGRESSION_LR / 10}}  # sghmc's lr there (lr = ε²·N)
    constants: dyn.Constants = field(init=False, repr=False, compare=False)
    scales: dyn.Scales = field(init=False, repr=False, compare=False)
    meta: dyn.MetaParams = field(init=False, repr=False, compare=False)
    meta_digest: str = field(init=False, repr=False, default="")

    def __post_init__(self) -> None:
        if self.gamma not in GAMMA_MODES:
            raise ValueError(f"gamma must be one of {GAMMA_MODES}, got {self.gamma!r}")
        pre = resolve_meta(self.meta_params, load_pretrained, load_meta_params)
        dyn.check_meta_params(pre.meta)  # a Pretrained built by hand is checked too
        if not isinstance(pre.constants, dyn.Constants):
            raise TypeError(f"meta_sgmcmc needs Meta-SGMCMC meta-parameters; got constants of "
                            f"type {type(pre.constants).__name__} (another learner's file?)")
        names = [f for f in dyn.Constants.__dataclass_fields__]
        given = {k: getattr(self, k) for k in names if getattr(self, k) is not None}
        constants = replace(pre.constants, **given)
        for k in names:
            object.__setattr__(self, k, getattr(constants, k))
        scales = constants.scales(self.problem.effective_num_data, self.eps)
        object.__setattr__(self, "eps", scales.eps)
        object.__setattr__(self, "scales", scales)
        object.__setattr__(self, "constants", constants)
        object.__setattr__(self, "meta", pre.meta)
        object.__setattr__(self, "meta_digest", digest_of(pre.meta, constants))

    def init(self, params: TensorTree | None = None, *,
             generator: torch.Generator) -> MetaSGMCMCState:
        params, noise_gen = chain_start(self.problem, params, generator)
        state = MetaSGMCMCState(params=params, momentum=zeros_like(params),
                                rng_state=rng.state_of(noise_gen), step=0)
        if self.gamma == "autograd":
            return state
        first = tree_leaves(params)[0]
        u = self._mean_energy(params, torch.zeros((), dtype=first.dtype, device=first.device))
        return replace(state, prev_energy=torch.zeros_like(u), prev_momentum=zeros_like(params),
                       prev_q=zeros_like(params), prev_q_next=zeros_like(params))

    def update(self, state: MetaSGMCMCState, batch: Batch) -> tuple[MetaSGMCMCState, Info]:
        value, score = self.problem.value_and_score(state.params, batch)
        grad = loss_gradient(self.problem, score)
        u = self._mean_energy(state.params, value)
        gen = rng.from_state(state.rng_state, device=device_of(state.params))
        noise = randn_like(state.params, gen)
        fd = self.gamma == "finite_difference"
        _, thetas, spec = tree_flatten_with_path(state.params)
        trees = [state.momentum, grad, noise]
        if fd:
            trees += [state.prev_momentum, state.prev_q, state.prev_q_next]
        leaves = [tree_leaves(t) for t in trees]
        c, n, t = self.constants, self.problem.effective_num_data, float(self.problem.temperature)
        out: list[dyn.Step] = []
        with torch.no_grad():
            for theta, p, g, z, *prev in zip(thetas, *leaves):
                memory = dyn.Memory(state.prev_energy, *prev) if fd and state.step else None
                out.append(dyn.step(self.meta, c, self.scales, u, theta, p, g, z, n, t, memory))
        if not bool(torch.stack([o.finite for o in out]).all()):
            raise NonFiniteError(
                f"meta_sgmcmc: D_f or the correction Γ became non-finite at step {state.step} "
                "(a finite-difference quotient or the meta-parameters); try gamma='autograd', "
                "a smaller step eps, or other meta-parameters")
        theta_new, p_new, q, q_next = ([tree_unflatten(spec, [o[i] for o in out])]
                                       for i in range(4))
        new = MetaSGMCMCState(params=theta_new[0], momentum=p_new[0],
                              rng_state=rng.state_of(gen), step=state.step + 1)
        if fd:
            new = replace(new, prev_energy=u, prev_momentum=state.momentum, prev_q=q[0],
                          prev_q_next=q_next[0])
        return new, {"log_prob": value, "eps": self.eps}

    def _mean_energy(self, params: TensorTree, value: torch.Tensor) -> torch.Tensor:
        """u = U/N, untempered, with the prior's normalising constant left out: u = mean NLL
        + (−log p(θ) + log p(m))/N for a prior with mean m, the energy meta-training feeds
        the networks (mean CE + ½‖θ‖²/N). The constant, d·log(2πσ²)/(2N), is arbitrary for
        sampling but not for networks that read u: it is 16.5 on an MLP of 90 000 weights
        and N = 5 000, far outside what they were trained on. Per chain (c, 1) for a
        Target's (c, d) stack."""
        t, n = float(self.problem.temperature), self.problem.effective_num_data
        if isinstance(self.problem, Target) and isinstance(params, torch.Tensor) \
                and params.dim() == 2:
            with torch.no_grad():
                value = self.problem.log_prob(params).unsqueeze(-1)
        return (-t / n) * value.detach() + self._prior_constant(params) / n

    def _prior_constant(self, params: TensorTree) -> float:
        """log p(m), the prior's log density at its mean (0 without a prior): computed
        once per run and kept, as the parameters' shapes do not change."""
        problem = self.problem
        if isinstance(problem, FlatProblem):  # flat storage: the named views of θ
            params, problem = problem.layout.views(params), problem.problem
        prior = getattr(problem, "prior", None)
        means = getattr(prior, "means", None)
        if not isinstance(params, dict) or means is None:
            return 0.0
        cached = self.__dict__.get("_log_prior_at_mean")
        if cached is None:
            with torch.no_grad():
                at_mean = {k: means[k] if k in means else torch.zeros_like(v)
                           for k, v in params.items()}
                cached = float(problem.log_prior(at_mean))
            object.__setattr__(self, "_log_prior_at_mean", cached)
        return cached

    def params(self, state: MetaSGMCMCState) -> TensorTree:
        return state.params


build = builder(MetaSGMCMC)
ALGORITHM = MetaSGMCMC
