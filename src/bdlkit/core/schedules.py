"""Step-size schedules: callables ``step -> value`` accepted wherever a rate is.

Schedules are frozen dataclasses, so their ``repr`` names their parameters; run
fingerprints (checkpoints refuse to resume a run with other hyperparameters) and
reports rely on that. Any plain callable works too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

Schedule = Callable[[int], float]


@dataclass(frozen=True)
class Constant:
    """``value`` at every step."""

    value: float

    def __call__(self, step: int) -> float:
        return self.value


@dataclass(frozen=True)
class Polynomial:
    """``a (b + t)^(-γ)``, the decreasing SGLD schedule of Welling & Teh (2011)."""

    a: float
    b: float = 1.0
    gamma: float = 0.55

    def __post_init__(self) -> None:
        if not 0.5 < self.gamma <= 1:
            raise ValueError(
                f"gamma must be in (0.5, 1] for a convergent SGLD schedule, got {self.gamma}"
            )

    def __call__(self, step: int) -> float:
        return self.a * (self.b + step) ** (-self.gamma)


@dataclass(frozen=True)
class Exponential:
    """``start · (end/start)^(t/steps)``: geometric annealing from ``start`` to ``end`` over
    ``steps`` (and on below ``end`` after), e.g. to let Adam's noise floor shrink."""

    start: float
    end: float
    steps: int

    def __post_init__(self) -> None:
        if not (self.start > 0 and self.end > 0 and self.steps >= 1):
            raise ValueError("start and end must be > 0 and steps >= 1")

    def __call__(self, step: int) -> float:
        return self.start * (self.end / self.start) ** (step / self.steps)


@dataclass(frozen=True)
class CyclicalCosine:
    """``(peak/2)·(cos(π·mod(k, P)/P) + 1)``: the cosine cycles of Zhang et al. (2020),
    restarting at ``peak`` every ``cycle_steps`` = P steps (k counted from 0;
    ``docs/sgmcmc.md``, the bdlkit form)."""

    peak: float
    cycle_steps: int

    def __post_init__(self) -> None:
        if not (self.peak > 0 and int(self.cycle_steps) == self.cycle_steps >= 1):
            raise ValueError("peak must be > 0 and cycle_steps an integer >= 1")

    def position(self, step: int) -> float:
        """Where ``step`` lies in its cycle, in [0, 1)."""
        return (step % self.cycle_steps) / self.cycle_steps

    def __call__(self, step: int) -> float:
        return 0.5 * self.peak * (math.cos(math.pi * self.position(step)) + 1.0)


def constant(value: float) -> Schedule:
    return Constant(value)


def polynomial(a: float, b: float = 1.0, gamma: float = 0.55) -> Schedule:
    """``a (b + t)^(-γ)``, the decreasing SGLD schedule of Welling & Teh (2011)."""
    return Polynomial(a, b, gamma)


def exponential(start: float, end: float, steps: int) -> Schedule:
    """Geometric annealing ``start → end`` over ``steps`` (:class:`Exponential`)."""
    return Exponential(start, end, steps)


def cyclical_cosine(peak: float, cycle_steps: int) -> Schedule:
    """Cosine cycles restarting at ``peak`` every ``cycle_steps`` steps (:class:`CyclicalCosine`)."""
    return CyclicalCosine(peak, cycle_steps)


def resolve(value: float | Schedule, step: int) -> float:
    """The value of a constant or a schedule at ``step``."""
    return float(value(step)) if callable(value) else float(value)
