"""Variational families shared by the VI methods (one module per family)."""

from __future__ import annotations

from bdlkit.families import diag_gaussian, full_gaussian
from bdlkit.families.diag_gaussian import DiagGaussian, DiagGaussianParams
from bdlkit.families.full_gaussian import FullGaussian, FullGaussianParams

__all__ = [
    "DiagGaussian", "DiagGaussianParams", "FullGaussian", "FullGaussianParams", "diag_gaussian",
    "full_gaussian",
]
