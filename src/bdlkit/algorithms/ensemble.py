"""Deep ensembles (Lakshminarayanan, Pritzel & Blundell, NeurIPS 2017; ``algorithms.md`` A.4.4).

M members θ^(1), ..., θ^(M), each trained as MAP (:mod:`.map`): with the per-datum loss

    ℓ(θ) = -value(θ, B_t) / N,      θ^(m) ← θ^(m) + optimizer_update(∇ℓ(θ^(m)))

so the problem's prior acts as weight decay. Members differ only in their random
initialisation, the main source of an ensemble's diversity (Fort, Hu & Lakshminarayanan
2019, "Deep ensembles: a loss landscape perspective"); all see the same minibatch B_t at
step t, so one Runner drives them (the original paper also shuffles the data per member
and optionally adds adversarial training; neither is done here). Prediction is the uniform
mixture p(y | x, D) ≈ (1/M) Σ_m p(y | x, θ^(m)): a :class:`~bdlkit.Result` of kind
``"ensemble"`` treats the members as its draws.

State: the members stacked along a new leading axis (``(M, d)`` for a Target, whose oracle
treats rows as independent chains; a dict of ``(M, ...)`` tensors for a network, whose
members are evaluated one at a time, so ``oracle="module"`` works too) and one optimiser
state on the stack: Adam and SGD-momentum act element-wise, so it equals M independent
optimisers. ``params(state)`` is member 0 (what the Runner finite-checks and evaluates
during training); ``members(state)`` is the stack. Info: ``log_prob`` is the sum over
members (one non-finite member stops the run); for networks also ``log_prob_min/max``.

Initialisation: a stack with M rows is used as is. A single point (what the Runner passes
by default) becomes member 0, and members 1..M-1 are fresh draws: for a network
:meth:`~bdlkit.BayesianModel.random_init` (the layers' own initialisers, seeded from the
generator), for a Target ``init_params``. Without ``params`` a Target draws all M.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import rng
from ..optim import AdamState, SGDState, make_optimizer
from ..problems import Target
from ..schedules import Schedule, resolve
from ..tree import TensorTree, detach_clone, index, pytree_dataclass, stack, tree_leaves, tree_map
from ..types import Batch, Info, Problem

KIND = "ensemble"  # what the algorithm returns: see bdlkit.types.Algorithm


@pytree_dataclass
class EnsembleState:
    params: TensorTree  # the members, stacked along dim 0
    opt_state: AdamState | SGDState
    step: int


@dataclass(frozen=True)
class Ensemble:
    """M MAP runs in lockstep (module docstring); ``num_members`` is ``build``'s ``members``."""

    problem: Problem
    num_members: int = 5
    lr: float | Schedule = 1e-3
    optimizer: str = "adam"
    momentum: float = 0.9
    name: str = "ensemble"
    kind: str = KIND

    def __post_init__(self) -> None:
        kwargs: dict[str, Any] = {"momentum": self.momentum} if self.optimizer == "sgd" else {}
        object.__setattr__(self, "_opt", make_optimizer(self.optimizer, **kwargs))

    def init(self, params: TensorTree | None = None, *,
             generator: torch.Generator) -> EnsembleState:
        problem, m = self.problem, self.num_members
        if params is None:
            params = (problem.init_params(generator, m) if isinstance(problem, Target)
                      else problem.init_params(generator))
        one = [t.shape for t in tree_leaves(problem.init_params(rng.generator(0)))]
        got = [t.shape for t in tree_leaves(params)]
        if got == one:  # a single point: member 0, then fresh draws
            draw = getattr(problem, "random_init", None) or problem.init_params
            rest = [tree_map(lambda r, p: r.to(p), draw(generator), params) for _ in range(m - 1)]
            params = stack([params, *rest])
        elif got != [torch.Size((m, *s)) for s in one]:
            raise ValueError(
                f"ensemble init: expected one point with shapes {[tuple(s) for s in one]} or "
                f"members={m} of them stacked along dim 0, got shapes {[tuple(s) for s in got]}"
            )
        params = detach_clone(params)
        return EnsembleState(params=params, opt_state=self._opt.init(params), step=0)

    def step(self, state: EnsembleState, batch: Batch) -> tuple[EnsembleState, Info]:
        problem = self.problem
        if isinstance(problem, Target):  # rows are independent chains: one call
            value, score = problem.value_and_score(state.params, batch)
            info: Info = {"log_prob": value}
        else:
            outs = [problem.value_and_score(index(state.params, i), batch)
                    for i in range(self.num_members)]
            values = torch.stack([v.detach() for v, _ in outs])
            score = stack([s for _, s in outs])
            info = {"log_prob": values.sum(), "log_prob_min": values.min(),
                    "log_prob_max": values.max()}
        n = problem.num_data
        grads = tree_map(lambda s: -s / n, score)
        updates, opt_state = self._opt.update(
            grads, state.opt_state, state.params, resolve(self.lr, state.step)
        )
        params = tree_map(lambda p, u: p + u, state.params, updates)
        return EnsembleState(params=params, opt_state=opt_state, step=state.step + 1), info

    def params(self, state: EnsembleState) -> TensorTree:
        """Member 0 (what the Runner checks and evaluates while training)."""
        return index(state.params, 0)

    def members(self, state: EnsembleState) -> TensorTree:
        """All members, stacked along dim 0."""
        return state.params


def build(
    problem: Problem,
    members: int = 5,
    lr: float | Schedule = 1e-3,
    optimizer: str = "adam",
    momentum: float = 0.9,
) -> Ensemble:
    """A deep ensemble of ``members`` MAP runs with ``optimizer`` in {"adam", "sgd"}
    (``momentum`` is used by SGD only)."""
    if isinstance(members, bool) or int(members) != members or members < 1:
        raise ValueError(f"members must be an integer >= 1, got {members!r}")
    if not callable(lr) and not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: ['adam', 'sgd']")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    return Ensemble(problem, num_members=int(members), lr=lr, optimizer=optimizer,
                    momentum=momentum)


__all__ = ["Ensemble", "EnsembleState", "build"]
