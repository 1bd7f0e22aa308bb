"""MAP estimation: maximise the (tempered) log posterior with SGD or Adam.

Per-datum convention (``docs/conventions.md``): the optimiser minimises

    ℓ(θ) = -value(θ, B) / N  =  -(1/T)[ mean_{i∈B} log p(y_i | x_i, θ) + log p(θ) / N ]

so ``lr`` means the same as in ordinary network training, whatever N is.
The MAP point is a delta "posterior": ``Result.sample(n)`` repeats it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.storage import FlatStorage
from bdlkit.core.optim import AdamState, SGDState, make_optimizer
from bdlkit.core.protocol import Batch, Info, Optimizer, Problem
from bdlkit.core.schedules import Schedule, resolve
from bdlkit.core.tree import TensorTree, detach_clone, pytree_dataclass, tree_map

KIND = "optimizer"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@pytree_dataclass
class MAPState:
    params: TensorTree
    opt_state: AdamState | SGDState
    step: int


@dataclass(frozen=True)
class MAP(FlatStorage, Optimizer):
    """``θ ← θ + optimizer_update(∇ℓ(θ))`` with ``ℓ = -value/N``.

    Args:
        lr: per-datum learning rate, a float or a schedule of the step (default 1e-3).
        optimizer: "adam" or "sgd".
        momentum: SGD's momentum (unused by Adam).
    """

    problem: Problem
    lr: float | Schedule = 1e-3
    optimizer: Literal["adam", "sgd"] = "adam"
    momentum: float = 0.9
    name: str = "map"
    _opt: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kwargs: dict[str, Any] = {"momentum": self.momentum} if self.optimizer == "sgd" else {}
        object.__setattr__(self, "_opt", make_optimizer(self.optimizer, **kwargs))

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator) -> MAPState:
        if params is None:
            params = self.problem.init_params(generator)
        params = detach_clone(params)
        return MAPState(params=params, opt_state=self._opt.init(params), step=0)

    def update(self, state: MAPState, batch: Batch) -> tuple[MAPState, Info]:
        value, score = self.problem.value_and_score(state.params, batch)
        n = self.problem.effective_num_data
        grads = tree_map(lambda s: s * (-1.0 / n), score)
        params, opt_state = self._opt.apply(
            grads, state.opt_state, state.params, resolve(self.lr, state.step)
        )
        return MAPState(params=params, opt_state=opt_state, step=state.step + 1), {
            "log_prob": value
        }

    def params(self, state: MAPState) -> TensorTree:
        return state.params


build = builder(MAP)

__all__ = ["MAP", "MAPState", "build"]


ALGORITHM = MAP
