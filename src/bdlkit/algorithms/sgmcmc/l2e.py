"""Learning to Explore (L2E): SG-MCMC with a meta-learned kinetic energy.

Kim, Jung, Kim & Lee, "Learning to Explore for Stochastic Gradient MCMC", ICML 2024
(``docs/l2e.md``). With g the minibatch gradient of the per-datum loss
(``common.loss_gradient``: mean NLL − log p(θ)/N), rolling means m_b of g and the
meta-learned (α_φ, β_φ) of :mod:`bdlkit.l2e.kinetic`::

    r_{t+1} = r_t − ε·(grad_scale·g_t + α_φ(θ_t, r_t) + C·β_φ(θ_t, r_t)) + sqrt(v)·ξ_t
    θ_{t+1} = θ_t + ε·β_φ(θ_t, r_{t+1})

v = 2·C·noise_mult (``noise_mode="code"``, the released code) or 2·C·ε (``"paper"``,
eq. 18), times the problem's temperature. There is no other temperature: in the SGHMC
limit "paper" noise with grad_scale = N targets the posterior and "code" noise a cold one
(T ≈ noise_mult/ε, docs/sgmcmc.md). The constants default to the ones the meta-parameters were
trained with (stored in their file); override them only knowingly: α_φ and β_φ were
learned for those values. ``meta_params`` is ``"pretrained"`` (bdlkit's shipped set,
:func:`bdlkit.l2e.load_pretrained`), a path to a ``bdlkit meta-train l2e`` file, or a
:class:`~bdlkit.l2e.Pretrained`; ``kinetic="identity"`` swaps the MLP for ½·rᵀr (SGHMC).

Cost per step: one gradient plus two MLP passes over the (d, 9) features, evaluated
:data:`~bdlkit.l2e.features.CHUNK` coordinates at a time (one matrix product per layer and
chunk, no loop over elements): the transient memory is chunk × (9 + 2·32) floats, not d × 32.
On a network the state is flat storage (:mod:`bdlkit.algorithms.storage`) and the gradient
the module oracle on the flat vector (:class:`~bdlkit.problems.oracles.FlatModuleOracle`),
whose peak memory is SGD's. State: θ, r and 6 moments.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import ClassVar, Literal

import torch
from torch.func import vmap

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.sgmcmc.common import LearnedVersion, chain_start, loss_gradient
from bdlkit.algorithms.storage import FlatStorage
from bdlkit.core import rng
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
    tree_map,
    tree_unflatten,
    zeros_like,
)
from bdlkit.l2e.kinetic import (
    DECAYS,
    Constants,
    IdentityKinetic,
    Kinetic,
    flat_update,
    l2e_update,
    learned_kinetic,
)
from bdlkit.l2e.pretrained import Pretrained, load_meta_params, load_pretrained
from bdlkit.problems import Target

KIND = "sampler"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm
#: The options that override the Constants of the same name (None — the stored one).
CONSTANTS = tuple(f.name for f in fields(Constants))


@pytree_dataclass
class L2EState:
    params: TensorTree
    momentum: TensorTree  # r
    moments: TensorTree  # rolling means of g, each leaf (6, *shape)
    rng_state: torch.Tensor
    step: int


@dataclass(frozen=True)
class L2E(LearnedVersion, FlatStorage, Sampler):
    """L2E (module docstring). The constants left at None are the ones stored with the
    meta-parameters (``Constants`` defaults for ``kinetic="identity"``); the fields then
    hold the constants used. On a network the state is stored flat
    (:class:`~bdlkit.algorithms.storage.FlatStorage`: one vector per field, the rolling
    means one (6, d) buffer) and the MLP runs by chunks of the flat vector.

    Args:
        meta_params: "pretrained" (bdlkit's shipped set), a path to a ``bdlkit meta-train
            l2e`` file, or a :class:`~bdlkit.l2e.Pretrained`.
        kinetic: "learned" (the meta-learned MLP) or "identity" (α = 0, β = r: SGHMC).
        eps: the step ε of the update.
        grad_scale: the factor of g in the momentum update (the training code's N;
            ``"num_data"``: the problem's N).
        friction: the friction C >= 0.
        noise_mode: "code" (noise variance 2·C·noise_mult, the released code) or "paper"
            (2·C·ε, eq. 18), times the temperature.
        noise_mult: the noise multiplier of ``noise_mode="code"``.
        exp_mult: the multiplier of the MLP's α output.
        precond_mult: the multiplier of the MLP's β output.
        kinetic_form: "free" (β is the MLP's output) or "momentum" (β = s·r, s > 0 learned,
            α = 0: ``bdlkit.l2e.kinetic``); a property of the meta-parameters, stored with
            them: override it only to study it.
    """

    problem: Problem
    meta_params: str | Pretrained = field(default="pretrained", repr=False, compare=False)
    kinetic: Literal["learned", "identity"] = "learned"
    eps: float | None = None
    grad_scale: float | Literal["num_data"] | None = None
    friction: float | None = None
    noise_mode: Literal["code", "paper"] | None = None
    noise_mult: float | None = None
    kinetic_form: Literal["free", "momentum"] | None = None
    exp_mult: float | None = None
    precond_mult: float | None = None
    name: str = "l2e"
    step_size_param: ClassVar[str] = "eps"
    constants: Constants = field(init=False, repr=False, compare=False)  # the resolved ones
    kinetic_fn: Kinetic = field(init=False, repr=False, compare=False)  # (α_φ, β_φ)
    #: sha256 prefix of the meta-parameters and constants ("identity" without them)
    meta_digest: str = field(init=False, repr=False, default="identity")

    def __post_init__(self) -> None:
        if self.kinetic not in ("learned", "identity"):
            raise ValueError(f"kinetic must be 'learned' or 'identity', got {self.kinetic!r}")
        pre = (resolve_meta(self.meta_params, load_pretrained, load_meta_params)
               if self.kinetic == "learned" else None)
        if pre is not None and not isinstance(pre.constants, Constants):
            raise TypeError(f"l2e needs L2E meta-parameters; got constants of type "
                            f"{type(pre.constants).__name__} (another learner's file?)")
        base = pre.constants if pre is not None else Constants()
        given = {k: getattr(self, k) for k in CONSTANTS}
        constants = replace(base, **{k: v for k, v in given.items() if v is not None})
        for k in CONSTANTS:
            object.__setattr__(self, k, getattr(constants, k))
        object.__setattr__(self, "constants", constants.for_data(self.problem.effective_num_data))
        if pre is None:
            object.__setattr__(self, "kinetic_fn", IdentityKinetic())
            return
        object.__setattr__(self, "kinetic_fn", learned_kinetic(pre.meta, constants))
        object.__setattr__(self, "meta_digest", digest_of(pre.meta, constants))

    def init(self, params: TensorTree | None = None, *,
             generator: torch.Generator) -> L2EState:
        params, noise_gen = chain_start(self.problem, params, generator)
        moments = tree_map(lambda p: p.new_zeros((len(DECAYS), *p.shape)), params)
        return L2EState(params=params, momentum=zeros_like(params), moments=moments,
                        rng_state=rng.state_of(noise_gen), step=0)

    def update(self, state: L2EState, batch: Batch) -> tuple[L2EState, Info]:
        value, score = self.problem.value_and_score(state.params, batch)
        grad = loss_gradient(self.problem, score)
        gen = rng.from_state(state.rng_state, device=device_of(state.params))
        noise = randn_like(state.params, gen)
        temperature = float(self.problem.temperature)
        with torch.no_grad():
            if isinstance(self.problem, FlatProblem):  # flat storage: one vector per field
                theta, r, m = flat_update(self.kinetic_fn, self.constants, state.params,
                                          state.momentum, state.moments, grad, noise,
                                          self.problem.layout.sizes, temperature)
            else:
                theta, r, m = self._on_leaves(state, grad, noise, temperature)
        new = L2EState(params=theta, momentum=r, moments=m, rng_state=rng.state_of(gen),
                       step=state.step + 1)
        return new, {"log_prob": value, "eps": self.constants.eps}

    def _on_leaves(self, state: L2EState, grad: TensorTree, noise: TensorTree,
                   temperature: float) -> tuple[TensorTree, TensorTree, TensorTree]:
        """The update on the state's trees (tree storage, a Target): on its leaves
        concatenated, per chain for a Target's chain stack."""
        _, leaves, spec = tree_flatten_with_path(state.params)
        others = [tree_leaves(t) for t in (state.momentum, state.moments, grad, noise)]
        update = partial(l2e_update, self.kinetic_fn, self.constants, temperature=temperature)
        if _chain_stack(self.problem, state.params):  # a Target's (chains, d): per chain
            update = vmap(update, in_dims=(0, 0, 1, 0, 0), out_dims=(0, 0, 1))
        theta, r, m = update(leaves, *others)
        return tree_unflatten(spec, theta), tree_unflatten(spec, r), tree_unflatten(spec, m)

    def params(self, state: L2EState) -> TensorTree:
        return state.params


def _chain_stack(problem: Problem, params: TensorTree) -> bool:
    """A Target's stack of independent chains (c, d): the features are normalised per chain."""
    return isinstance(problem, Target) and isinstance(params, torch.Tensor) and params.dim() == 2


build = builder(L2E)
ALGORITHM = L2E
