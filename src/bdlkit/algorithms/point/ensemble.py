"""Deep ensembles (Lakshminarayanan, Pritzel & Blundell, NeurIPS 2017; ``docs/sgmcmc.md``).

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
during training); ``member_stack(state)`` is the stack. Info: ``log_prob`` is the mean over
members, on the scale of one model's as every other method logs it (one non-finite member
stops the run); for networks also ``log_prob_min/max``.

Initialisation: a stack with M rows is used as is. A single point (what the Runner passes
by default) becomes member 0, and members 1..M-1 are fresh draws: for a network
:meth:`~bdlkit.BayesianModel.random_init` (the layers' own initialisers, seeded from the
generator), for a Target ``init_params``. Without ``params`` a Target draws all M.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from bdlkit.algorithms.options import builder
from bdlkit.core import rng
from bdlkit.core.optim import AdamState, SGDState, make_optimizer
from bdlkit.core.protocol import Batch, EnsembleBase, Info, Problem
from bdlkit.core.schedules import Schedule, resolve
from bdlkit.core.tree import (
    TensorTree,
    detach_clone,
    index,
    pytree_dataclass,
    stack,
    tree_leaves,
    tree_map,
)
from bdlkit.problems import Target

KIND = "ensemble"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@pytree_dataclass
class EnsembleState:
    params: TensorTree  # the members, stacked along dim 0
    opt_state: AdamState | SGDState
    step: int


@dataclass(frozen=True)
class Ensemble(EnsembleBase):
    """M MAP runs in lockstep (module docstring).

    Args:
        members: the number M >= 1 of members (``member_stack(state)`` is their stack).
        lr: per-datum learning rate of every member, a float or a schedule of the step.
        optimizer: "adam" or "sgd".
        momentum: SGD's momentum in [0, 1) (unused by Adam).
    """

    problem: Problem
    members: int = 5
    lr: float | Schedule = 1e-3
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = 0.9
    name: str = "ensemble"
    _opt: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        m = self.members
        if isinstance(m, bool) or int(m) != m or m < 1:
            raise ValueError(f"members must be an integer >= 1, got {m!r}")
        if not callable(self.lr) and not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"unknown optimizer {self.optimizer!r}; valid: ['adam', 'sgd']")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        object.__setattr__(self, "members", int(m))
        kwargs: dict[str, Any] = {"momentum": self.momentum} if self.optimizer == "sgd" else {}
        object.__setattr__(self, "_opt", make_optimizer(self.optimizer, **kwargs))

    @property
    def num_members(self) -> int:
        """M (the option ``members``)."""
        return self.members

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

    def member_stack(self, state: EnsembleState) -> TensorTree:
        """All members, stacked along dim 0."""
        return state.params

    def step(self, state: EnsembleState, batch: Batch) -> tuple[EnsembleState, Info]:
        problem = self.problem
        if isinstance(problem, Target):  # rows are independent chains: one call
            value, score = problem.value_and_score(state.params, batch)  # summed over rows
            info: Info = {"log_prob": value / self.num_members}
        else:
            outs = [problem.value_and_score(index(state.params, i), batch)
                    for i in range(self.num_members)]
            values = torch.stack([v.detach() for v, _ in outs])
            score = stack([s for _, s in outs])
            info = {"log_prob": values.mean(), "log_prob_min": values.min(),
                    "log_prob_max": values.max()}
        n = problem.effective_num_data
        grads = tree_map(lambda s: s * (-1.0 / n), score)  # MAP's arithmetic, member by member
        params, opt_state = self._opt.apply(
            grads, state.opt_state, state.params, resolve(self.lr, state.step)
        )
        return EnsembleState(params=params, opt_state=opt_state, step=state.step + 1), info

    def params(self, state: EnsembleState) -> TensorTree:
        """Member 0 (what the Runner checks and evaluates while training)."""
        return index(state.params, 0)


build = builder(Ensemble)

__all__ = ["Ensemble", "EnsembleState", "build"]


ALGORITHM = Ensemble
