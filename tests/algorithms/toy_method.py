"""A new method is one file like this one plus one ``register`` line (docs/architecture.md).

Gradient ascent on the log density: the smallest complete bdlkit method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from bdlkit.algorithms.options import builder, check_choices
from bdlkit.core.protocol import Batch, Info, Optimizer, Problem
from bdlkit.core.tree import TensorTree, detach_clone, pytree_dataclass, tree_map

KIND = "optimizer"


@pytree_dataclass
class ToyState:
    params: TensorTree
    step: int


@dataclass(frozen=True)
class GradientAscent(Optimizer):
    """θ ← θ + lr · ŝ(θ) / N, with ŝ the minibatch score.

    Args:
        lr: step size per datum.
        direction: "ascent" climbs the log density; "descent" is there to show choices.
    """

    problem: Problem
    lr: float = 0.1
    direction: Literal["ascent", "descent"] = "ascent"
    name: str = "toy"

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        check_choices(self)

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator) -> ToyState:
        start = self.problem.init_params(generator) if params is None else params
        return ToyState(params=detach_clone(start), step=0)

    def step(self, state: ToyState, batch: Batch) -> tuple[ToyState, Info]:
        value, score = self.problem.value_and_score(state.params, batch)
        sign = 1.0 if self.direction == "ascent" else -1.0
        rate = sign * self.lr / self.problem.num_data
        params = tree_map(lambda p, s: p + rate * s, state.params, score)
        return ToyState(params=params, step=state.step + 1), {"log_prob": value}

    def params(self, state: ToyState) -> TensorTree:
        return state.params


build = builder(GradientAscent)
ALGORITHM = GradientAscent
