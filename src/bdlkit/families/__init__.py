"""Variational families shared by the VI methods (one module per family)."""

from __future__ import annotations

from . import diag_gaussian
from .diag_gaussian import DiagGaussian, DiagGaussianParams

__all__ = ["DiagGaussian", "DiagGaussianParams", "diag_gaussian"]
