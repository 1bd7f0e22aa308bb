"""Step-size schedules: callables ``step -> value`` accepted wherever a rate is."""

from __future__ import annotations

from collections.abc import Callable

Schedule = Callable[[int], float]


def constant(value: float) -> Schedule:
    return lambda step: value


def polynomial(a: float, b: float = 1.0, gamma: float = 0.55) -> Schedule:
    """``a (b + t)^(-γ)``, the decreasing SGLD schedule of Welling & Teh (2011)."""
    if not 0.5 < gamma <= 1:
        raise ValueError(f"gamma must be in (0.5, 1] for a convergent SGLD schedule, got {gamma}")
    return lambda step: a * (b + step) ** (-gamma)


def resolve(value: float | Schedule, step: int) -> float:
    """The value of a constant or a schedule at ``step``."""
    return float(value(step)) if callable(value) else float(value)
