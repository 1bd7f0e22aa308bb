"""The one range of bdlkit's float options, stated once.

Every float option — a method's (``lr``, ``step_size``, ``eps``, ...), the problem's
(``temperature``, the prior scale, ``kld``), the σ of ``gaussian:SIGMA`` and the run's
(``checkpoint_minutes``) — is 0 or a finite number whose magnitude is in
[:data:`LOW`, :data:`HIGH`] = [1e-15, 1e15]; ``inf`` only where the option's default is
``inf`` (``ivon``'s ``clip_radius``, ``score_vi``'s ``max_step``). An option that must
be > 0 (a scale, a temperature) is in [1e-15, 1e15] itself. A product or quotient of two
such values stays within float32's range (about 3.4e38), so no value that passes can
overflow a kernel's scalar (``torch.add(..., alpha=lr·T/N)``) or a Python float
(``1/scale²``); a step that still diverges ends in bdlkit's NaN stop
(:class:`~bdlkit.core.errors.NonFiniteError`). Each reader (the command line, the YAML
files, ``build``, ``BayesianModel``) checks with these functions and names the option
its own way.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

LOW = 1e-15  #: the smallest magnitude of a nonzero float option
HIGH = 1e15  #: the largest magnitude of a finite float option
SPAN = "[{}, {}]".format(*(f"{x:.0e}".replace("e+", "e") for x in (LOW, HIGH)))
WHY = "bdlkit's range for float values"
#: the options bounded above more tightly than HIGH, each with its bound and what it means
UPPER_BOUNDS = {"kld": (1.0, "the KL discount: the likelihood is weighted by 1/kld; 1 is "
                        "the posterior itself, 1e-3 BayesDLL's MNIST setting")}


def in_range(number: float, *, zero: bool = True, infinite: bool = False) -> bool:
    """Whether ``number`` is allowed: 0 (if ``zero``), ``±inf`` (if ``infinite``) or a
    magnitude in [LOW, HIGH]; never NaN."""
    if math.isnan(number):
        return False
    if math.isinf(number):
        return infinite
    return (zero and number == 0) or LOW <= abs(number) <= HIGH


def as_float(value: Any) -> float | None:
    """``value`` as a float if it is a real number (not a bool), else None; an integer
    beyond float's range is ``inf``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def number_problem(value: Any, *, infinite: bool = False) -> str | None:
    """``"must be ..., got X"`` when the real number ``value`` (a float option's, which may
    also be 0) is out of range, else None (and None for anything not a number).

    Args:
        value: the option's value.
        infinite: the option's default is ``inf``, so ``inf`` is allowed.
    """
    number = as_float(value)
    if number is None or in_range(number, infinite=infinite):
        return None
    allowed = "inf or a number" if infinite else "a finite number"
    return f"must be {allowed} with magnitude in {SPAN} or 0 ({WHY}), got {value!r}"


def positive_problem(value: Any, high: float | None = None, why: str | None = None
                     ) -> str | None:
    """``"must be ..., got X"`` unless ``value`` is a real number in [LOW, HIGH] (in
    [LOW, ``high``] when given, ``why`` saying what that bound means), else None.

    Args:
        value: the option's value (any type: a bool or text is refused).
        high: a tighter upper bound than HIGH (``kld``: 1).
        why: the bound's meaning, said in the message.
    """
    number = as_float(value)
    top = HIGH if high is None else high
    if number is not None and number > 0 and in_range(number, zero=False) and number <= top:
        return None
    if high is None:
        return f"must be a finite number > 0 in {SPAN} ({WHY}), got {value!r}"
    return f"must be a number in (0, {high:g}], at least {LOW:.0e} ({why}; {WHY}), got {value!r}"


def nonnegative_problem(value: Any) -> str | None:
    """``"must be ..., got X"`` unless ``value`` is 0 or a real number in [LOW, HIGH] (a
    friction, a noise multiplier), else None.

    Args:
        value: the option's value (any type: a bool or text is refused).
    """
    number = as_float(value)
    if number is not None and number >= 0 and in_range(number):
        return None
    return f"must be a finite number >= 0: 0 or in {SPAN} ({WHY}), got {value!r}"


__all__ = ["HIGH", "LOW", "SPAN", "UPPER_BOUNDS", "WHY", "as_float", "in_range", "nonnegative_problem",
           "number_problem", "positive_problem"]
