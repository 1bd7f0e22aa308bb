"""Stochastic gradient Langevin dynamics (Welling & Teh, ICML 2011).

Per-datum parameterisation (``algorithms.md`` A.4.1, ``docs/conventions.md``), with
ŝ the unbiased minibatch score of the tempered posterior and N = ``num_data``::

    θ_{t+1} = θ_t + (lr_t / N) · ŝ(θ_t) + sqrt(2 · lr_t / N) · ξ_t,   ξ_t ~ N(0, I)

i.e. Euler–Maruyama with step η = lr/N on the potential U = -log π_T. ``lr`` is a
constant or a schedule (``bdlkit.schedules.polynomial`` for the decreasing schedule
of the paper). For a :class:`~bdlkit.Target` N = 1 and ``lr`` is η itself. The
temperature lives in the problem, so no extra noise scaling is applied here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import rng
from ..schedules import Schedule, resolve
from ..tree import TensorTree, detach_clone, device_of, pytree_dataclass, randn_like, tree_map
from ..types import Batch, Info, Problem

KIND = "sampler"  # what the algorithm returns: see bdlkit.types.Algorithm


@pytree_dataclass
class SGLDState:
    params: TensorTree
    rng_state: torch.Tensor
    step: int


@dataclass(frozen=True)
class SGLD:
    problem: Problem
    lr: float | Schedule = 0.1
    name: str = "sgld"
    kind: str = KIND

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator) -> SGLDState:
        if params is None:
            params = self.problem.init_params(generator)
        noise_gen = rng.split(generator, device=device_of(params))
        return SGLDState(params=detach_clone(params), rng_state=rng.state_of(noise_gen), step=0)

    def step(self, state: SGLDState, batch: Batch) -> tuple[SGLDState, Info]:
        value, score = self.problem.value_and_score(state.params, batch)
        eta = resolve(self.lr, state.step) / self.problem.num_data
        gen = rng.from_state(state.rng_state, device=device_of(state.params))
        noise = randn_like(state.params, gen)
        sd = math.sqrt(2.0 * eta)
        params = tree_map(lambda p, s, z: p + eta * s + sd * z, state.params, score, noise)
        new = SGLDState(params=params, rng_state=rng.state_of(gen), step=state.step + 1)
        return new, {"log_prob": value, "step_size": eta}

    def params(self, state: SGLDState) -> TensorTree:
        return state.params


def build(problem: Problem, lr: float | Schedule = 0.1) -> SGLD:
    """SGLD with per-datum step ``lr`` (η = lr/N on the potential)."""
    if not callable(lr) and not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    return SGLD(problem, lr=lr)
