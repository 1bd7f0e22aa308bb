"""Stochastic gradient Langevin dynamics (Welling & Teh, ICML 2011).

In bdlkit's SG-MCMC convention (:mod:`~bdlkit.algorithms.sgmcmc.common`,
``docs/conventions.md``, ``docs/sgmcmc.md``),
with g the minibatch gradient of the per-datum untempered loss, T the problem's
temperature and N = ``num_data``::

    θ_{t+1} = θ_t − lr_t · g(θ_t) + sqrt(2 · lr_t · T / N) · ξ_t,   ξ_t ~ N(0, I)

i.e. Euler–Maruyama with step η = lr·T/N on the potential U_T = −log π_T. ``lr`` is a
constant or a schedule (``bdlkit.core.schedules.polynomial`` for the decreasing schedule of
the paper). For a :class:`~bdlkit.Target` N = T = 1 and ``lr`` is η itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.sgmcmc.common import (
    REGRESSION_LR,
    add_noise,
    chain_start,
    check_rate,
    descend,
    noise_variance,
)
from bdlkit.algorithms.storage import FlatStorage
from bdlkit.core import rng
from bdlkit.core.protocol import Batch, Info, Problem, Sampler
from bdlkit.core.schedules import Schedule, resolve
from bdlkit.core.tree import TensorTree, device_of, pytree_dataclass

KIND = "sampler"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@pytree_dataclass
class SGLDState:
    params: TensorTree
    rng_state: torch.Tensor
    step: int


@dataclass(frozen=True)
class SGLD(FlatStorage, Sampler):
    """SGLD (module docstring).

    Args:
        lr: per-datum step size, a float or a schedule of the step: the step is
            η = lr·T/N on the tempered potential.
    """

    #: Version 2 — the per-datum untempered drift (T scales only the noise); version 1
    #: scaled the drift by 1/T.
    #: Checkpoints of another version are not resumed (bdlkit.Runner.fingerprint).
    VERSION: ClassVar[int] = 3  # 3: a network's noise drawn in chunks (bdlkit.core.noise)
    problem_defaults: ClassVar[dict[str, dict[str, Any]]] = {
        "regression": {"lr": REGRESSION_LR}}
    problem: Problem
    lr: float | Schedule = 0.1
    name: str = "sgld"

    def __post_init__(self) -> None:
        check_rate("lr", self.lr)

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator) -> SGLDState:
        params, noise_gen = chain_start(self.problem, params, generator)
        return SGLDState(params=params, rng_state=rng.state_of(noise_gen), step=0)

    def update(self, state: SGLDState, batch: Batch) -> tuple[SGLDState, Info]:
        value, score = self.problem.value_and_score(state.params, batch)
        lr = resolve(self.lr, state.step)
        gen = rng.from_state(state.rng_state, device=device_of(state.params))
        drift = descend(state.params, score, lr, self.problem)
        var = noise_variance(lr, 1.0, self.problem.temperature,
                             self.problem.effective_num_data)
        params = add_noise(drift, var, gen)
        new = SGLDState(params=params, rng_state=rng.state_of(gen), step=state.step + 1)
        return new, {"log_prob": value, "lr": lr}

    def params(self, state: SGLDState) -> TensorTree:
        return state.params


build = builder(SGLD)
ALGORITHM = SGLD
