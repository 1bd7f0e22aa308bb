"""Learning to Explore (L2E): SG-MCMC with a meta-learned kinetic energy.

Kim, Jung, Kim & Lee, "Learning to Explore for Stochastic Gradient MCMC", ICML 2024
(``algorithms.md`` A.2). With g the minibatch gradient of the per-datum loss
(``_sgmcmc.loss_gradient``: mean NLL − log p(θ)/N), rolling means m_b of g and the
meta-learned (α_φ, β_φ) of :mod:`bdlkit.l2e.kinetic`::

    r_{t+1} = r_t − ε·(grad_scale·g_t + α_φ(θ_t, r_t) + C·β_φ(θ_t, r_t)) + sqrt(v)·ξ_t
    θ_{t+1} = θ_t + ε·β_φ(θ_t, r_{t+1})

v = 2·C·noise_mult (``noise_mode="code"``, the released code) or 2·C·ε (``"paper"``,
eq. 18), times the problem's temperature. There is no other temperature: in the SGHMC
limit "paper" noise with grad_scale = N targets the posterior and "code" noise a cold one
(T ≈ noise_mult/ε, A.1). The constants default to the ones the meta-parameters were
trained with (stored in their file); override them only knowingly: α_φ and β_φ were
learned for those values. ``meta_params`` is ``"pretrained"`` (bdlkit's shipped set,
:func:`bdlkit.l2e.load_pretrained`), a path to a ``bdlkit meta-train l2e`` file, or a
:class:`~bdlkit.l2e.Pretrained`; ``kinetic="identity"`` swaps the MLP for ½·rᵀr (SGHMC).

Cost per step: one gradient plus two MLP passes over a (d, 9) feature matrix (one matrix
product per layer for all parameters, no loop over elements); state: θ, r and 6 moments.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
from torch.func import vmap

from .. import rng
from ..l2e.kinetic import (
    DECAYS,
    Constants,
    IdentityKinetic,
    Kinetic,
    LearnedKinetic,
    l2e_update,
)
from ..l2e.pretrained import Pretrained, load_meta_params, load_pretrained
from ..problems import Target
from ..tree import (
    TensorTree,
    detach_clone,
    device_of,
    pytree_dataclass,
    randn_like,
    tree_flatten_with_path,
    tree_leaves,
    tree_map,
    tree_unflatten,
    zeros_like,
)
from ..types import Batch, Info, Problem
from ._sgmcmc import loss_gradient

KIND = "sampler"  # what the algorithm returns: see bdlkit.types.Algorithm


@pytree_dataclass
class L2EState:
    params: TensorTree
    momentum: TensorTree  # r
    moments: TensorTree  # rolling means of g, each leaf (6, *shape)
    rng_state: torch.Tensor
    step: int


@dataclass(frozen=True)
class L2E:
    problem: Problem
    kinetic: Kinetic
    constants: Constants
    meta_digest: str = "identity"  # sha256 prefix of the meta-parameters and constants
    name: str = "l2e"
    kind: str = KIND

    @property
    def VERSION(self) -> str:  # noqa: N802 - the runner's name for the update rule's version
        """Version 1 of the update, with the meta-parameters' digest: a checkpoint written
        with other meta-parameters (a re-trained file, another path) is not resumed."""
        return f"1+{self.meta_digest}"

    def init(self, params: TensorTree | None = None, *,
             generator: torch.Generator) -> L2EState:
        if params is None:
            params = self.problem.init_params(generator)
        params = detach_clone(params)
        noise_gen = rng.split(generator, device=device_of(params))
        moments = tree_map(lambda p: p.new_zeros((len(DECAYS), *p.shape)), params)
        return L2EState(params=params, momentum=zeros_like(params), moments=moments,
                        rng_state=rng.state_of(noise_gen), step=0)

    def step(self, state: L2EState, batch: Batch) -> tuple[L2EState, Info]:
        value, score = self.problem.value_and_score(state.params, batch)
        grad = loss_gradient(self.problem, score)
        gen = rng.from_state(state.rng_state, device=device_of(state.params))
        noise = randn_like(state.params, gen)
        _, theta, spec = tree_flatten_with_path(state.params)
        leaves = [tree_leaves(t) for t in (state.momentum, state.moments, grad, noise)]
        update = partial(l2e_update, self.kinetic, self.constants,
                         temperature=float(self.problem.temperature))
        if _chain_stack(self.problem, state.params):  # a Target's (chains, d): per chain
            update = vmap(update, in_dims=(0, 0, 1, 0, 0), out_dims=(0, 0, 1))
        with torch.no_grad():
            theta, r, m = update(theta, *leaves)
        new = L2EState(params=tree_unflatten(spec, theta), momentum=tree_unflatten(spec, r),
                       moments=tree_unflatten(spec, m), rng_state=rng.state_of(gen),
                       step=state.step + 1)
        return new, {"log_prob": value, "eps": self.constants.eps}

    def params(self, state: L2EState) -> TensorTree:
        return state.params


def _chain_stack(problem: Problem, params: TensorTree) -> bool:
    """A Target's stack of independent chains (c, d): the features are normalised per chain."""
    return isinstance(problem, Target) and isinstance(params, torch.Tensor) and params.dim() == 2


def _resolve(meta_params: Any) -> Pretrained:
    if isinstance(meta_params, Pretrained):
        return meta_params
    if meta_params in (None, "pretrained"):
        return load_pretrained()
    if isinstance(meta_params, (str, os.PathLike)):
        return load_meta_params(meta_params)
    raise TypeError(f"meta_params must be 'pretrained', a path or a Pretrained, "
                    f"got {type(meta_params).__name__}")


def build(
    problem: Problem,
    meta_params: str | Pretrained = "pretrained",
    kinetic: str = "learned",
    eps: float | None = None,
    grad_scale: float | None = None,
    friction: float | None = None,
    noise_mode: str | None = None,
    noise_mult: float | None = None,
    exp_mult: float | None = None,
    precond_mult: float | None = None,
) -> L2E:
    """L2E with the meta-parameters ``meta_params``; the constants left at None (the
    default) are the ones stored with them (``Constants`` defaults for
    ``kinetic="identity"``).
    ``kinetic``: ``"learned"`` (the MLP) or ``"identity"`` (α = 0, β = r: SGHMC)."""
    if kinetic not in ("learned", "identity"):
        raise ValueError(f"kinetic must be 'learned' or 'identity', got {kinetic!r}")
    pre = _resolve(meta_params) if kinetic == "learned" else None
    given = {"eps": eps, "grad_scale": grad_scale, "friction": friction,
             "noise_mode": noise_mode, "noise_mult": noise_mult, "exp_mult": exp_mult,
             "precond_mult": precond_mult}
    base = pre.constants if pre is not None else Constants()
    constants = replace(base, **{k: v for k, v in given.items() if v is not None})
    if pre is None:
        return L2E(problem, IdentityKinetic(), constants)
    return L2E(problem, LearnedKinetic(pre.meta, constants.exp_mult, constants.precond_mult),
               constants, meta_digest=_digest(pre.meta, constants))


def _digest(meta: dict[str, torch.Tensor], constants: Constants) -> str:
    h = hashlib.sha256(json.dumps(constants.to_dict(), sort_keys=True).encode())
    for k in sorted(meta):
        h.update(k.encode() + meta[k].detach().cpu().double().numpy().tobytes())
    return h.hexdigest()[:16]
