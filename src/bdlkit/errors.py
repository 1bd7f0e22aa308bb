"""Exceptions shared across bdlkit (kept free of imports so any module can raise them)."""

from __future__ import annotations


class NonFiniteError(FloatingPointError):
    """The log density or the parameters became NaN or infinite during inference."""
