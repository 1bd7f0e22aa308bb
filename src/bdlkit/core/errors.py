"""Exceptions and warning categories shared across bdlkit (kept free of imports so any
module can raise them). The warning categories let a user filter one kind of warning,
e.g. ``warnings.simplefilter("ignore", bdlkit.core.errors.NotConvergedWarning)``."""

from __future__ import annotations


class NonFiniteError(FloatingPointError):
    """The log density or the parameters became NaN or infinite during inference."""


class VIWarning(UserWarning):
    """A VI run finished but its approximation should not be trusted as it is."""


class PointEstimateWarning(VIWarning):
    """A VI run's σ barely moved from ``init_std``: q is still close to a point estimate."""


class NotConvergedWarning(VIWarning):
    """A VI run's approximation was still moving over its last quarter of steps."""
