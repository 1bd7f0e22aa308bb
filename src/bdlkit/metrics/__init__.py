"""Metrics of a BMA predictive (``algorithms.md`` Part C).

Classification functions take probabilities ``(n, K)`` and integer labels ``(n,)``;
regression functions take a :class:`~bdlkit.problems.likelihoods.GaussianPredictive` (or its
mean and variance) and targets. Every function returns Python floats.
"""

from __future__ import annotations

from .classification import (
    accuracy,
    brier,
    classification_metrics,
    ece,
    ece_all_class,
    nll,
    reliability_bins,
)
from .ood import ood_auroc, predictive_entropy
from .regression import gaussian_nll, regression_metrics, rmse

__all__ = [
    "accuracy",
    "brier",
    "classification_metrics",
    "ece",
    "ece_all_class",
    "gaussian_nll",
    "nll",
    "ood_auroc",
    "predictive_entropy",
    "regression_metrics",
    "reliability_bins",
    "rmse",
]
