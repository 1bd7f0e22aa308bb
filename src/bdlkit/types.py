"""The protocols every inference problem and algorithm follows.

An *inference problem* (:class:`Problem`) is anything with a minibatch score oracle
``value_and_score(params, batch) -> (value, score)``: a :class:`bdlkit.Target` or a
:class:`bdlkit.BayesianModel`. ``value`` is an unbiased estimate of the log density
of the (tempered) posterior up to a constant, and ``score`` its gradient, with the
same pytree structure as ``params`` (see ``docs/conventions.md``).

An *algorithm* is built from a problem and hyperparameters by a module-level
``build(problem, **hyper)`` and exposes ``init`` and ``step``: a pure function of an
immutable state and a batch. VI algorithms also expose ``approximation(state)``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from .tree import TensorTree

Batch = Any  # a tuple (x, y) of tensors for models, None for targets
Info = dict[str, Any]


@runtime_checkable
class ScoreOracle(Protocol):
    """``value, score = oracle(params, batch)``."""

    def __call__(self, params: TensorTree, batch: Batch) -> tuple[Tensor, TensorTree]: ...


@runtime_checkable
class Problem(Protocol):
    """What is inferred: a log density with a minibatch score oracle."""

    num_data: int
    temperature: float

    def value_and_score(self, params: TensorTree, batch: Batch) -> tuple[Tensor, TensorTree]: ...

    def init_params(self, generator: torch.Generator) -> TensorTree: ...

    def validate_data(self, data: Any) -> None: ...


@runtime_checkable
class State(Protocol):
    """An immutable algorithm state (a frozen dataclass registered with optree)."""

    step: int


@runtime_checkable
class Algorithm(Protocol):
    """``state = init(params, generator=g)``; ``state, info = step(state, batch)``."""

    name: str
    kind: str  # "optimizer" | "sampler" | "vi" | "ensemble"
    problem: Problem

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator) -> State: ...

    def step(self, state: State, batch: Batch) -> tuple[State, Info]: ...

    def params(self, state: State) -> TensorTree:
        """The current point: the position of a chain, the optimum, the VI mean."""
        ...


@runtime_checkable
class Approximation(Protocol):
    """A variational approximation q: sampling and log density."""

    def sample(self, n: int, generator: torch.Generator) -> TensorTree: ...

    def log_prob(self, theta: TensorTree) -> Tensor: ...


@runtime_checkable
class VIAlgorithm(Algorithm, Protocol):
    def approximation(self, state: State) -> Approximation: ...
