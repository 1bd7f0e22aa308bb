"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin, ICML 2014).

The "SGD with momentum" form of Chen et al. (their eq. 15), in bdlkit's SG-MCMC
convention (:mod:`~bdlkit.algorithms.sgmcmc.common`, ``docs/conventions.md``,
``docs/sgmcmc.md``): with g the
minibatch gradient of the per-datum untempered loss, friction α ∈ (0, 1], the problem's
temperature T and N = ``num_data``::

    v_{t+1} = (1 − α) · v_t − lr_t · g(θ_t) + sqrt(2 · lr_t · α · T / N − lr_t² · V̂_t) · ξ_t
    θ_{t+1} = θ_t + v_{t+1}

(the momentum-SGD parameterisation of the cSGMCMC code). α = 1 is SGLD; T = 0 is SGD with
momentum 1 − α (torch's ``SGD(momentum=1-α)`` at the same lr). V̂_t is an optional
estimate of the per-coordinate variance of g, Chen et al.'s β̂ = lr·N·V̂/(2T) correction
for the noise the minibatch gradient already carries: with ``noise_estimate=True`` it is
the running variance ``EMA(g²) − EMA(g)²`` with decay ``noise_decay`` (a heuristic in the
spirit of Springenberg et al. 2016: it also counts the drift of g along the trajectory);
the injected variance is clipped at 0 (``info["noise_clipped"]``: the fraction of
coordinates where the estimate used up the whole noise budget, which makes the step SGD
there; a large value means lr is too large for the gradient noise).
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
    tree_leaves,
    tree_map,
    zeros_like,
)

KIND = "sampler"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@pytree_dataclass
class SGHMCState:
    params: TensorTree
    momentum: TensorTree | None  # v; None when α = 1 (SGLD keeps no momentum)
    rng_state: torch.Tensor
    step: int
    grad_mean: TensorTree | None = None  # EMA(g), only with noise_estimate
    grad_sq: TensorTree | None = None  # EMA(g²), only with noise_estimate


def momentum_step(
    params: TensorTree,
    momentum: TensorTree | None,
    grad: TensorTree,
    *,
    lr: float,
    alpha: float,
    noise_var: float | TensorTree,
    generator: torch.Generator,
) -> tuple[TensorTree, TensorTree | None]:
    """``v ← (1−α)·v − lr·g + sqrt(noise_var)·ξ``; ``θ ← θ + v``. Returns (θ, v); with
    ``momentum=None`` (α = 1) v starts at 0 and None is returned for it."""
    return scaled_momentum_step(params, momentum, grad, scale=-lr, alpha=alpha,
                                noise_var=noise_var, generator=generator)


def scaled_momentum_step(
    params: TensorTree,
    momentum: TensorTree | None,
    direction: TensorTree,
    *,
    scale: float,
    alpha: float,
    noise_var: float | TensorTree,
    generator: torch.Generator,
) -> tuple[TensorTree, TensorTree | None]:
    """:func:`momentum_step` with ``−lr·g`` given as ``scale · direction`` (the sampler
    passes the score ŝ and ``scale = lr·T/N``, saving a pass over g); each new tensor is
    allocated once and finished in place."""
    if momentum is None:
        v = tree_map(lambda d: d * scale, direction)
    else:
        v = tree_map(lambda m, d: torch.mul(m, 1.0 - alpha).add_(d, alpha=scale), momentum,
                     direction)
    v = add_noise(v, noise_var, generator)
    params = tree_map(torch.add, params, v)
    return params, (None if momentum is None else v)


@dataclass(frozen=True)
class SGHMC(FlatStorage, Sampler):
    """SGHMC in the momentum-SGD form (module docstring).

    Args:
        lr: per-datum step size, a float or a schedule of the step.
        alpha: friction α in (0, 1]; the momentum is 1 − α, and α = 1 is SGLD.
        noise_estimate: subtract Chen et al.'s estimate of the minibatch gradient's own
            noise from the injected noise.
        noise_decay: decay in [0, 1) of the running moments behind ``noise_estimate``.
    """

    problem_defaults: ClassVar[dict[str, dict[str, Any]]] = {
        "regression": {"lr": REGRESSION_LR / 10}}  # lr/α = REGRESSION_LR at α = 0.1
    problem: Problem
    lr: float | Schedule = 0.01
    alpha: float = 0.1
    noise_estimate: bool = False
    noise_decay: float = 0.99
    name: str = "sghmc"
    VERSION: ClassVar[int] = 2  # 2: a network's noise drawn in chunks (bdlkit.core.noise)

    def __post_init__(self) -> None:
        check_rate("lr", self.lr)
        check_friction(self.alpha, self.noise_decay)
        for name, kind in (("alpha", float), ("noise_estimate", bool), ("noise_decay", float)):
            object.__setattr__(self, name, kind(getattr(self, name)))

    def init(self, params: TensorTree | None = None, *,
             generator: torch.Generator) -> SGHMCState:
        params, noise_gen = chain_start(self.problem, params, generator)
        estimate = zeros_like(params) if self.noise_estimate else None
        return SGHMCState(
            params=params, momentum=None if self.alpha == 1 else zeros_like(params),
            rng_state=rng.state_of(noise_gen), step=0, grad_mean=estimate,
            grad_sq=zeros_like(params) if self.noise_estimate else None,
        )

    def update(self, state: SGHMCState, batch: Batch) -> tuple[SGHMCState, Info]:
        lr = resolve(self.lr, state.step)
        return self.advance(state, batch, lr, noise=True)

    def advance(self, state: SGHMCState, batch: Batch, lr: float,
                noise: bool) -> tuple[SGHMCState, Info]:
        """One step at learning rate ``lr``; ``noise=False`` is the noise-free (optimiser)
        step of a cyclical schedule's exploration phase."""
        value, score = self.problem.value_and_score(state.params, batch)
        var = noise_variance(lr, self.alpha, self.problem.temperature,
                             self.problem.effective_num_data)
        mean = sq = None
        info: Info = {}
        if self.noise_estimate:
            grad = loss_gradient(self.problem, score)
            b = self.noise_decay
            mean = tree_map(lambda m, g: b * m + (1 - b) * g, state.grad_mean, grad)
            sq = tree_map(lambda s, g: b * s + (1 - b) * g * g, state.grad_sq, grad)
            var = tree_map(lambda m, s: var - lr**2 * (s - m * m).clamp_min(0), mean, sq)
            leaves = tree_leaves(var)  # where V̂ exceeds the budget no noise is injected
            clipped = sum(int((v <= 0).sum()) for v in leaves)
            info["noise_clipped"] = clipped / max(1, sum(v.numel() for v in leaves))
        if not noise:
            var = 0.0
        gen = rng.from_state(state.rng_state, device=device_of(state.params))
        scale = lr * self.problem.temperature / self.problem.effective_num_data  # −lr·g = scale·ŝ
        params, momentum = scaled_momentum_step(state.params, state.momentum, score,
                                                scale=scale, alpha=self.alpha, noise_var=var,
                                                generator=gen)
        new = SGHMCState(params=params, momentum=momentum, rng_state=rng.state_of(gen),
                         step=state.step + 1, grad_mean=mean, grad_sq=sq)
        return new, {"log_prob": value, "lr": lr, "noise": float(noise), **info}

    def params(self, state: SGHMCState) -> TensorTree:
        return state.params


def check_friction(alpha: float, noise_decay: float = 0.99) -> None:
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha (friction) must be in (0, 1], got {alpha}; 1 is SGLD")
    if not 0 <= noise_decay < 1:
        raise ValueError(f"noise_decay must be in [0, 1), got {noise_decay}")


build = builder(SGHMC)
ALGORITHM = SGHMC
