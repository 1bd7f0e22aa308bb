"""Cyclical SGLD (Zhang et al., ICLR 2020): cSGHMC with friction α = 1.

With α = 1 the momentum step of :mod:`bdlkit.algorithms.sgmcmc.csghmc` is the SGLD step
``θ ← θ − lr_k·g + sqrt(2·lr_k·T/N)·ξ`` (no momentum is kept), with the same cosine
cycles, exploration phase without noise and draws kept at the end of each cycle. Its
defaults by kind of problem are cSGHMC's (module docstring there), with lr_0 = 0.1 on a
Target (sgld's step there; at 0.05 the mean on a correlated 2-D Gaussian was 0.13 stds off
against 0.10).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from bdlkit.algorithms.options import builder
from bdlkit.algorithms.sgmcmc.common import REGRESSION_LR
from bdlkit.algorithms.sgmcmc.csghmc import CyclicalSGHMC

KIND = "sampler"  # what the algorithm returns: see bdlkit.core.protocol.Algorithm


@dataclass(frozen=True)
class CyclicalSGLD(CyclicalSGHMC):
    """cSGLD: cSGHMC with the friction fixed at α = 1 (module docstring); the other
    options are :class:`~bdlkit.algorithms.sgmcmc.csghmc.CyclicalSGHMC`'s.

    Args:
        lr: peak per-datum step size lr_0 > 0 of each cosine cycle.
    """

    problem_defaults: ClassVar[dict[str, dict[str, Any]]] = {
        "target": {"lr": 0.1, "explore_frac": 0.25, "samples_per_cycle": 125},
        "regression": {"lr": REGRESSION_LR},
    }
    lr: float = 0.05
    alpha: float = field(default=1.0, init=False)  # fixed, not an option (still in repr)
    name: str = "csgld"


build = builder(CyclicalSGLD)
ALGORITHM = CyclicalSGLD
