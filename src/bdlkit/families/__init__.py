"""Variational families shared by the VI methods (one module per family)."""

from __future__ import annotations

from . import diag_gaussian, full_gaussian
from .diag_gaussian import DiagGaussian, DiagGaussianParams
from .full_gaussian import FullGaussian, FullGaussianParams

__all__ = [
    "DiagGaussian", "DiagGaussianParams", "FullGaussian", "FullGaussianParams", "diag_gaussian",
    "full_gaussian",
]
