"""Preconditioned SGLD with an RMSprop preconditioner (Li, Chen, Carlson & Carin, AAAI 2016).

In bdlkit's SG-MCMC convention (:mod:`~bdlkit.algorithms.sgmcmc.common`,
``docs/conventions.md``), with g the
minibatch gradient of the per-datum untempered loss, T the problem's temperature and
N = ``num_data``::

    V_t = β · V_{t−1} + (1 − β) · g_t ⊙ g_t,        V̂_t = V_t / (1 − β^t)
    G_t = 1 / (λ + sqrt(V̂_t))
    θ_{t+1} = θ_t − lr_t · G_t ⊙ g_t + sqrt(2 · lr_t · T / N · G_t) ⊙ ξ_t

Li et al.'s Algorithm 1 with ε_t/2 = lr_t·T/N on the potential. Two deliberate choices:
V̂ is bias-corrected as in Adam (with V_0 = 0 and no correction the first steps would use
G ≈ 1/λ, steps 10⁵ times too large), and the correction term Γ(θ) = Σ_j ∂G_ij/∂θ_j is
omitted, as in Li et al.'s experiments (it vanishes as β → 1; its bias is small when V
changes slowly). Defaults β = 0.99, λ = 1e-5 as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.sgmcmc.common import (
    add_noise,
    chain_start,
    check_rate,
    loss_gradient,
    noise_variance,
)
from bdlkit.algorithms.storage import FlatStorage
from bdlkit.core import rng
from bdlkit.core.protocol import Batch, Info, Problem, Sampler
from bdlkit.core.schedules import Schedule, resolve
from bdlkit.core.tree import (
    TensorTree,
    device_of,
    pytree_dataclass,
    tree_map,
    zeros_like,
)

KIND = "sampler"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@pytree_dataclass
class PSGLDState:
    params: TensorTree
    square_avg: TensorTree  # V, the running average of g ⊙ g
    rng_state: torch.Tensor
    step: int


@dataclass(frozen=True)
class PSGLD(FlatStorage, Sampler):
    """pSGLD with an RMSprop preconditioner (module docstring).

    Args:
        lr: per-datum step size, a float or a schedule of the step (default 1e-3).
        beta: decay β in (0, 1) of the RMSprop average V of g ⊙ g (default 0.99).
        eps: damping λ > 0 of the preconditioner G = 1 / (λ + sqrt(V̂)) (default 1e-5).
    """

    problem: Problem
    lr: float | Schedule = 1e-3
    beta: float = 0.99
    eps: float = 1e-5
    name: str = "psgld"
    VERSION: ClassVar[int] = 2  # 2: a network's noise drawn in chunks (bdlkit.core.noise)

    def __post_init__(self) -> None:
        check_rate("lr", self.lr)
        if not 0 < self.beta < 1:
            raise ValueError(f"beta must be in (0, 1), got {self.beta}")
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")
        object.__setattr__(self, "beta", float(self.beta))
        object.__setattr__(self, "eps", float(self.eps))

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator) -> PSGLDState:
        params, noise_gen = chain_start(self.problem, params, generator)
        return PSGLDState(params=params, square_avg=zeros_like(params),
                          rng_state=rng.state_of(noise_gen), step=0)

    def update(self, state: PSGLDState, batch: Batch) -> tuple[PSGLDState, Info]:
        value, score = self.problem.value_and_score(state.params, batch)
        lr = resolve(self.lr, state.step)
        grad = loss_gradient(self.problem, score)
        b = self.beta
        square_avg = tree_map(lambda v, g: torch.mul(v, b).addcmul_(g, g, value=1 - b),
                              state.square_avg, grad)
        correction = 1.0 - b ** (state.step + 1)
        precond = tree_map(lambda v: torch.div(v, correction).sqrt_().add_(self.eps)
                           .reciprocal_(), square_avg)
        drift = tree_map(lambda p, g, c: torch.addcmul(p, c, g, value=-lr), state.params, grad,
                         precond)
        unit = noise_variance(lr, 1.0, self.problem.temperature,
                              self.problem.effective_num_data)
        gen = rng.from_state(state.rng_state, device=device_of(state.params))
        params = add_noise(drift, tree_map(lambda c: unit * c, precond), gen)
        new = PSGLDState(params=params, square_avg=square_avg, rng_state=rng.state_of(gen),
                         step=state.step + 1)
        return new, {"log_prob": value, "lr": lr}

    def params(self, state: PSGLDState) -> TensorTree:
        return state.params


build = builder(PSGLD)
ALGORITHM = PSGLD
