"""Full-batch Hamiltonian Monte Carlo with dual-averaging step-size adaptation.

Potential U(θ) = −value(θ, B), the problem's (tempered) log posterior; exact when B is the
full data set. One iteration, identity mass matrix (Neal 2011, "MCMC using Hamiltonian
dynamics", §5.2–5.3)::

    p ~ N(0, I);   p ← p + (ε/2)·∇value(θ)
    L times:       θ ← θ + ε·p;   p ← p + ε·∇value(θ)   (ε/2 on the last step)
    H(θ, p) = U(θ) + ½|p|²   (in float64)
    accept (θ', p') with probability α = min(1, exp(H(θ, p) − H(θ', p')))

``L = num_leapfrog``, or ``L = min(⌈trajectory_length/ε⌉, max_leapfrog)``: the fixed
trajectory length of the full-batch HMC of Izmailov et al. (2021, "What are Bayesian neural
network posteriors really like?"). During the first ``adapt_steps`` iterations, m = 1..M,
dual averaging on log ε (Hoffman & Gelman 2014, "The No-U-Turn Sampler", Alg. 5)::

    H̄_m = (1 − 1/(m+t0))·H̄_{m−1} + (δ − ᾱ_m)/(m+t0)
    log ε_m = μ − (√m/γ)·H̄_m;   log ε̄_m = m^−κ·log ε_m + (1 − m^−κ)·log ε̄_{m−1}

with ᾱ_m the mean acceptance probability over chains, δ = ``target_accept``,
μ = log(10·ε0), γ = 0.05, t0 = 10, κ = 0.75; afterwards ε = ε̄_M stays fixed.

- Chains: Target params ``(chains, d)`` are accepted or rejected independently (per-chain
  ``log_prob``), with one shared ε. A ``BayesianModel`` (dict params) is one chain.
- Divergence: a proposal whose energy error H(θ', p') − H(θ, p) exceeds 1000 (acceptance
  below e^−1000) counts as divergent; a NaN/inf proposal is rejected, so NaN never reaches
  the params.
- Tuning: a fixed L can resonate with a direction of the posterior: on a Gaussian with std
  σ, a trajectory turning by ≈ π maps θ ↦ −θ along it and never mixes its variance, while
  one turning by ≈ π/2 (``trajectory_length`` ≈ (π/2)·σ) decorrelates both θ and θ². Dual
  averaging needs a few hundred iterations in low dimension; shorter runs end with a small
  ε (acceptance above target).
- Cache: value and score at the current point live in the state, so an iteration costs L
  gradient evaluations, not L+1. This assumes every step sees the same full batch (the
  runner gives full-batch algorithms the data itself, in a fixed order). With changing
  batches (minibatches, or a one-batch DataLoader with random augmentation) the cache
  would be stale, and HMC is invalid there anyway.
- ε is a step on U itself (not per-datum like SGLD's ``lr``): for N data points it shrinks
  roughly like 1/√N. Dtype follows the params: a float64 Target or a ``.double()`` model
  runs in float64 throughout (the float64 option of the Izmailov recipe).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from bdlkit.algorithms.mcmc.adaptation import default_adaptation
from bdlkit.algorithms.options import builder
from bdlkit.core import rng
from bdlkit.core.protocol import Batch, Info, Problem, Sampler
from bdlkit.core.tree import (
    TensorTree,
    detach_clone,
    device_of,
    pytree_dataclass,
    randn_like,
    tree_leaves,
    tree_map,
    zeros_like,
)
from bdlkit.problems import Target

KIND = "sampler"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm
GAMMA, T0, KAPPA = 0.05, 10.0, 0.75  # dual averaging constants (Hoffman & Gelman 2014)
MAX_ENERGY_ERROR = 1000.0
ADAPT_STEPS = 100  # the cap on the default adaptation length (half the run)
F64 = torch.float64


@pytree_dataclass
class HMCState:
    params: TensorTree
    rng_state: Tensor
    step: int
    log_prob: Tensor  # float64 value at params: (chains,) on a (chains, d) Target, else ()
    score: TensorTree  # ∇value at params
    cached: bool  # log_prob/score are valid (False until the first step computes them)
    log_step_size: Tensor  # log ε_m, float64 scalar (CPU)
    log_step_size_avg: Tensor  # log ε̄_m
    error_avg: Tensor  # H̄_m


@dataclass(frozen=True)
class HMC(Sampler):
    """Full-batch HMC with dual averaging of ε (module docstring).

    Args:
        step_size: the initial leapfrog step ε > 0, on U itself (not per datum).
        num_leapfrog: leapfrog steps L per iteration (when ``trajectory_length`` is None).
        trajectory_length: a fixed trajectory length: L = min(⌈trajectory_length/ε⌉,
            max_leapfrog) (Izmailov et al. 2021); None: L = ``num_leapfrog``.
        adapt_steps: iterations of dual averaging of ε (0: ε fixed); None: half the run, at
            most 100 (:mod:`.adaptation`). The default burn-in covers them.
        target_accept: the mean acceptance probability δ in (0, 1) dual averaging aims at.
        max_leapfrog: the cap on L under ``trajectory_length``.
    """

    problem: Problem
    step_size: float = 0.1
    num_leapfrog: int = 10
    trajectory_length: float | None = None
    adapt_steps: int | None = None
    target_accept: float = 0.8
    max_leapfrog: int = 1000
    name: str = "hmc"
    VERSION: ClassVar[int] = 2  # 2: a network's noise drawn in chunks (bdlkit.core.noise)
    step_size_param: ClassVar[str] = "step_size"
    full_batch: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not (self.step_size > 0 and math.isfinite(self.step_size)):
            raise ValueError(f"step_size must be a finite number > 0, got {self.step_size}")
        for name, low in (("num_leapfrog", 1), ("adapt_steps", 0), ("max_leapfrog", 1)):
            value = getattr(self, name)
            if value is None and name == "adapt_steps":
                continue
            if isinstance(value, bool) or int(value) != value or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
            object.__setattr__(self, name, int(value))
        length = self.trajectory_length
        if length is not None and not (length > 0 and math.isfinite(length)):
            raise ValueError(f"trajectory_length must be a finite number > 0, got {length}")
        if not 0 < self.target_accept < 1:
            raise ValueError(f"target_accept must be in (0, 1), got {self.target_accept}")
        object.__setattr__(self, "step_size", float(self.step_size))
        object.__setattr__(self, "trajectory_length", None if length is None else float(length))
        object.__setattr__(self, "target_accept", float(self.target_accept))

    def init(self, params: TensorTree | None = None, *, generator: torch.Generator) -> HMCState:
        if params is None:
            params = self.problem.init_params(generator)
        params = detach_clone(params)
        device = device_of(params)
        noise_gen = rng.split(generator, device=device)
        chain_shape = params.shape[:-1] if isinstance(self.problem, Target) else ()
        log_eps = torch.tensor(math.log(self.step_size), dtype=F64)
        return HMCState(params=params, rng_state=rng.state_of(noise_gen), step=0,
                        log_prob=torch.zeros(chain_shape, dtype=F64, device=device),
                        score=zeros_like(params), cached=False, log_step_size=log_eps,
                        log_step_size_avg=log_eps.clone(), error_avg=torch.zeros((), dtype=F64))

    def for_run(self, total_steps: int) -> HMC:
        """This sampler with ``adapt_steps`` fixed for a run of ``total_steps`` iterations."""
        return dataclasses.replace(
            self, adapt_steps=default_adaptation(self.adapt_steps, ADAPT_STEPS, total_steps))

    @property
    def adapting_for(self) -> int:
        """Iterations of dual averaging (``adapt_steps``, or its default outside a run)."""
        return default_adaptation(self.adapt_steps, ADAPT_STEPS, None)

    def step(self, state: HMCState, batch: Batch) -> tuple[HMCState, Info]:
        adapting = state.step < self.adapting_for
        log_eps = state.log_step_size if adapting else state.log_step_size_avg
        eps = float(log_eps.exp())
        n_leap = self.leapfrog_steps(eps)
        theta, lp0, score = state.params, state.log_prob, state.score
        if not state.cached:
            lp0, score = self._value_and_score(theta, batch)
        gen = rng.from_state(state.rng_state, device=device_of(theta))
        p0 = randn_like(theta, gen)
        u = torch.rand(lp0.shape, generator=gen, dtype=F64, device=lp0.device)

        p = tree_map(lambda p_, s: p_ + 0.5 * eps * s, p0, score)
        th, lp, sc = theta, lp0, score
        for i in range(n_leap):
            th = tree_map(lambda t, p_: t + eps * p_, th, p)
            lp, sc = self._value_and_score(th, batch)
            h = (0.5 if i == n_leap - 1 else 1.0) * eps
            p = tree_map(lambda p_, s, h=h: p_ + h * s, p, sc)

        kinetic = self._kinetic(p)
        log_ratio = (lp - kinetic) - (lp0 - self._kinetic(p0))  # H0 − H1
        finite = torch.isfinite(lp) & torch.isfinite(kinetic)  # NaN/inf proposal: rejected
        divergent = ~finite | (log_ratio < -MAX_ENERGY_ERROR)
        log_ratio = torch.where(finite, log_ratio, torch.full_like(log_ratio, -math.inf))
        accept_prob = log_ratio.clamp(max=0.0).exp()
        accept = u.log() < log_ratio
        params = self._select(accept, th, theta)
        new_lp = torch.where(accept, lp, lp0)
        new_score = self._select(accept, sc, score)

        mean_accept = accept_prob.mean().to("cpu")
        log_eps_new, log_avg, err = state.log_step_size, state.log_step_size_avg, state.error_avg
        if adapting:
            m = state.step + 1
            w = 1.0 / (m + T0)
            err = (1 - w) * err + w * (self.target_accept - mean_accept)
            log_eps_new = math.log(10 * self.step_size) - math.sqrt(m) / GAMMA * err
            log_avg = m**-KAPPA * log_eps_new + (1 - m**-KAPPA) * log_avg
        new = HMCState(params=params, rng_state=rng.state_of(gen), step=state.step + 1,
                       log_prob=new_lp, score=new_score, cached=True, log_step_size=log_eps_new,
                       log_step_size_avg=log_avg, error_avg=err)
        return new, {"log_prob": new_lp.sum(), "accept_prob": mean_accept, "step_size": eps,
                     "num_leapfrog": n_leap, "divergent": divergent.to(F64).mean()}

    def params(self, state: HMCState) -> TensorTree:
        return state.params

    @property
    def warmup_steps(self) -> int:
        """Iterations spent adapting ε — the runner's default burn-in covers them."""
        return self.adapting_for

    def step_size_now(self, state: HMCState) -> float:
        """The ε the next iteration uses (ε̄ once adaptation is over)."""
        adapting = state.step < self.adapting_for
        return float((state.log_step_size if adapting else state.log_step_size_avg).exp())

    def leapfrog_steps(self, eps: float) -> int:
        """L: ``num_leapfrog``, or ``min(⌈trajectory_length/ε⌉, max_leapfrog)``."""
        if self.trajectory_length is None:
            return self.num_leapfrog
        return max(1, min(math.ceil(self.trajectory_length / eps), self.max_leapfrog))

    # ------------------------------------------------------------------ internals
    def _value_and_score(self, theta: TensorTree, batch: Batch) -> tuple[Tensor, TensorTree]:
        """Per-chain float64 log density and the score, in one gradient evaluation."""
        if isinstance(self.problem, Target):
            def f(t: Tensor) -> tuple[Tensor, Tensor]:
                lp = self.problem.log_prob(t)
                return lp.sum(), lp

            with torch.enable_grad():
                score, (_, lp) = torch.func.grad_and_value(f, has_aux=True)(theta)
            return lp.detach().to(F64), score.detach()
        value, score = self.problem.value_and_score(theta, batch)
        return value.detach().to(F64), score

    def _kinetic(self, p: TensorTree) -> Tensor:
        """½|p|² per chain, in float64."""
        if isinstance(self.problem, Target):
            return 0.5 * p.to(F64).square().sum(-1)
        return 0.5 * sum(t.to(F64).square().sum() for t in tree_leaves(p))

    def _select(self, accept: Tensor, new: TensorTree, old: TensorTree) -> TensorTree:
        """``new`` where accepted, else ``old``, chain by chain (leading axis on a Target)."""
        mask = accept.unsqueeze(-1) if accept.ndim else accept
        return tree_map(lambda a, b: torch.where(mask, a, b), new, old)


build = builder(HMC)

__all__ = ["HMC", "HMCState", "build"]


ALGORITHM = HMC
