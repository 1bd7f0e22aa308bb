"""Cyclical SG-MCMC (Zhang, Li, Zhang, Chen & Wilson, ICLR 2020): cSGHMC, and cSGLD (α = 1).

The SGHMC step of :mod:`bdlkit.algorithms.sgmcmc.sghmc` with a cosine step size that restarts
every P = ``cycle_steps`` steps (``docs/sgmcmc.md``, bdlkit form; k = global step
from 0)::

    lr_k = (lr_0 / 2) · (cos(π · mod(k, P) / P) + 1)

Each cycle has two phases, by the position u = mod(k, P)/P:

* exploration, u < ``explore_frac``: the step without noise (SGD with momentum), to move
  fast to a new mode while the step size is large;
* sampling, u ≥ ``explore_frac``: the full SG-MCMC step with noise.

Draws are kept only in the sampling phase: ``samples_per_cycle`` draws per cycle,
``sample_spacing`` steps apart (default: spread evenly over the sampling phase) and ending
at the cycle's last step (the runner asks :meth:`CyclicalSGHMC.keep`). Zhang et al.'s CIFAR
script keeps
3 per 50-epoch cycle, at the ends of epochs 48-50, with noise in the last 5 epochs: with
S steps per epoch that is ``cycle_steps=50*S, explore_frac=0.9, samples_per_cycle=3,
sample_spacing=S`` (bdlkit's default ``explore_frac=0.8`` samples a longer stretch). The
runner's ``thin`` and ``burnin`` still apply on top, by step number (``burnin`` skips whole
early cycles; leave ``thin`` at its default 1).
``cycle_steps=None`` splits the run into ``cycles`` equal cycles, P = ⌈K/cycles⌉ for K
total steps (the paper's form); the runner fixes it when the run length is known.
Defaults on a classification network: α = 0.9 as in the cSGMCMC code (docs/sgmcmc.md,
cyclical SG-MCMC), lr_0 = 0.1 (the code's 0.5 is for 50-epoch cycles on ResNets; in 30-epoch
runs it ends at the majority class on the CIFAR-10 subset with the small CNN and above the
mean predictor's RMSE on UCI yacht, where 0.1 beats MAP: ``bdlkit bench defaults``).
They differ by kind of problem (``problem_defaults``):

* regression: lr_0 = :data:`~bdlkit.algorithms.sgmcmc.common.REGRESSION_LR` (0.02). At 0.1
  the first step of a new cycle, taken from the sharp mode where the last one ended, threw
  the chain out (NaN on a 300-point heteroscedastic regression, a test RMSE of 2 581 on
  UCI yacht at 300 epochs; 0.03 still 23.2, above the mean predictor; 0.02: 4.0).
* Target: α = 0.1 (sghmc's friction), ``explore_frac = 0.25`` and
  ``samples_per_cycle = 125`` (lr_0 stays 0.1). With the network defaults each chain ran
  to the mode without noise for 80 % of a cycle, had too short a sampling phase to spread
  out again and kept 12 draws: on correlated 2-D Gaussians (2 000 steps, 4 chains) the
  covariance came out 0.74 off and the mean 0.15 stds, against sghmc's 0.14 and 0.10; with
  these 0.13 and 0.06 (``docs/methods/sgmcmc.md``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.sgmcmc.common import REGRESSION_LR
from bdlkit.algorithms.sgmcmc.sghmc import SGHMC, SGHMCState, check_friction
from bdlkit.algorithms.storage import FlatStorage
from bdlkit.core.protocol import Batch, Info, Problem, Sampler
from bdlkit.core.schedules import CyclicalCosine
from bdlkit.core.tree import TensorTree

KIND = "sampler"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@dataclass(frozen=True)
class CyclicalSGHMC(FlatStorage, Sampler):
    """cSGHMC: the SGHMC step on cosine cycles (module docstring).

    Args:
        lr: peak per-datum step size lr_0 > 0 of each cosine cycle.
        alpha: friction α in (0, 1] of the SGHMC step; the momentum is 1 − α.
        cycles: the number of cycles the run is split into (when ``cycle_steps`` is None).
        cycle_steps: steps P per cycle (an integer >= 2); None: ⌈run length / cycles⌉.
        explore_frac: the fraction in [0, 1) of each cycle spent exploring without noise;
            noise and kept draws come in the rest.
        samples_per_cycle: draws kept per cycle, ending at the cycle's last step.
        sample_spacing: steps between the kept draws of a cycle; None: spread evenly over
            the sampling phase.
    """

    chooses_draws: ClassVar[bool] = True  # keep(t): draws at the end of each cycle
    problem_defaults: ClassVar[dict[str, dict[str, Any]]] = {
        "target": {"alpha": 0.1, "explore_frac": 0.25, "samples_per_cycle": 125},
        "regression": {"lr": REGRESSION_LR},
    }
    problem: Problem
    lr: float = 0.1
    alpha: float = 0.9
    cycles: int = 4
    cycle_steps: int | None = None
    explore_frac: float = 0.8
    samples_per_cycle: int = 3
    sample_spacing: int | None = None
    name: str = "csghmc"
    VERSION: ClassVar[int] = 2  # 2: a network's noise drawn in chunks (bdlkit.core.noise)
    _inner: SGHMC = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"lr (the peak step size) must be a number > 0, got {self.lr!r}")
        check_friction(self.alpha)
        check_cycles(self.cycles, self.cycle_steps, self.explore_frac, self.samples_per_cycle,
                     self.sample_spacing)
        for name, kind in (("lr", float), ("alpha", float), ("cycles", int),
                           ("cycle_steps", int), ("explore_frac", float),
                           ("samples_per_cycle", int), ("sample_spacing", int)):
            value = getattr(self, name)
            object.__setattr__(self, name, None if value is None else kind(value))
        object.__setattr__(self, "_inner", SGHMC(self.problem, lr=self.lr, alpha=self.alpha,
                                                 name=self.name))

    # ------------------------------------------------------------------ schedule
    def for_run(self, total_steps: int) -> CyclicalSGHMC:
        """This sampler with ``cycle_steps`` fixed for a run of ``total_steps`` steps (at
        least 2, the smallest valid cycle: runs of at most ``cycles`` steps)."""
        if self.cycle_steps is not None:
            return self
        return dataclasses.replace(self, cycle_steps=max(2, math.ceil(total_steps / self.cycles)))

    @property
    def schedule(self) -> CyclicalCosine:
        if self.cycle_steps is None:
            raise ValueError(
                f"{self.name}: cycle_steps is not set; pass cycle_steps= or run through "
                "bdlkit.infer / bdlkit.Runner, which set it from the run length and `cycles`"
            )
        return CyclicalCosine(self.lr, self.cycle_steps)

    def sampling(self, k: int) -> bool:
        """Whether step ``k`` (0-based) is in a sampling phase (noise on)."""
        return self.schedule.position(k) >= self.explore_frac

    def keep(self, t: int) -> bool:
        """Whether the draw after ``t`` completed steps is kept (module docstring)."""
        k = t - 1
        period = self.schedule.cycle_steps
        first = math.ceil(self.explore_frac * period)  # first sampling position
        back = period - 1 - k % period  # steps until the cycle's end
        spacing = self.sample_spacing or max(1, (period - first) // self.samples_per_cycle)
        return (self.sampling(k) and back % spacing == 0
                and back // spacing < self.samples_per_cycle)

    # ------------------------------------------------------------------ protocol
    def init(self, params: TensorTree | None = None, *,
             generator: torch.Generator) -> SGHMCState:
        return self._inner.init(params, generator=generator)

    def update(self, state: SGHMCState, batch: Batch) -> tuple[SGHMCState, Info]:
        k = state.step
        return self._inner.advance(state, batch, self.schedule(k), noise=self.sampling(k))

    def params(self, state: SGHMCState) -> TensorTree:
        return state.params


def check_cycles(cycles: int, cycle_steps: int | None, explore_frac: float,
                 samples_per_cycle: int, sample_spacing: int | None = None) -> None:
    if int(cycles) != cycles or cycles < 1:
        raise ValueError(f"cycles must be an integer >= 1, got {cycles!r}")
    if cycle_steps is not None and (int(cycle_steps) != cycle_steps or cycle_steps < 2):
        raise ValueError(f"cycle_steps must be an integer >= 2 (or None), got {cycle_steps!r}")
    if not 0 <= explore_frac < 1:
        raise ValueError(f"explore_frac must be in [0, 1), got {explore_frac}")
    if int(samples_per_cycle) != samples_per_cycle or samples_per_cycle < 1:
        raise ValueError(f"samples_per_cycle must be an integer >= 1, got {samples_per_cycle!r}")
    if sample_spacing is not None and (int(sample_spacing) != sample_spacing
                                       or sample_spacing < 1):
        raise ValueError(f"sample_spacing must be an integer >= 1 (or None), got "
                         f"{sample_spacing!r}")


build = builder(CyclicalSGHMC)
ALGORITHM = CyclicalSGHMC
