"""Cyclical SGLD (Zhang et al., ICLR 2020): cSGHMC with friction α = 1.

With α = 1 the momentum step of :mod:`bdlkit.algorithms.csghmc` is the SGLD step
``θ ← θ − lr_k·g + sqrt(2·lr_k·T/N)·ξ`` (no momentum is kept), with the same cosine
cycles, exploration phase without noise and draws kept at the end of each cycle.
"""

from __future__ import annotations

from ..types import Problem
from .csghmc import CyclicalSGHMC, _build

KIND = "sampler"  # what the algorithm returns: see bdlkit.types.Algorithm


def build(
    problem: Problem,
    lr: float = 0.05,
    cycles: int = 4,
    cycle_steps: int | None = None,
    explore_frac: float = 0.8,
    samples_per_cycle: int = 3,
    sample_spacing: int | None = None,
) -> CyclicalSGHMC:
    """cSGLD: peak per-datum step ``lr`` and the cycles of :func:`csghmc.build`."""
    return _build(problem, lr, 1.0, cycles, cycle_steps, explore_frac, samples_per_cycle,
                  sample_spacing, "csgld")
