"""Metrics of a BMA predictive (``docs/metrics.md``).

Classification functions take probabilities ``(n, K)`` and integer labels ``(n,)``;
regression functions take a :class:`~bdlkit.problems.likelihoods.GaussianPredictive` (or its
mean and variance) and targets. Every function returns Python floats.
"""

from __future__ import annotations

from bdlkit.metrics.classification import (
    accuracy,
    brier,
    classification_metrics,
    ece,
    ece_all_class,
    entropy_from_log_probs,
    nll,
    nll_from_log_probs,
    reliability_bins,
)
from bdlkit.metrics.ood import (
    auroc_aupr,
    max_prob_score,
    ood_auroc,
    ood_metrics,
    predictive_entropy,
)
from bdlkit.metrics.reference import (
    agreement,
    load_reference,
    total_variation,
    within_chain_diversity,
)
from bdlkit.metrics.regression import coverage, gaussian_nll, mae, regression_metrics, rmse

__all__ = [
    "agreement",
    "auroc_aupr",
    "coverage",
    "load_reference",
    "within_chain_diversity",
    "mae",
    "max_prob_score",
    "ood_metrics",
    "total_variation",
    "accuracy",
    "brier",
    "classification_metrics",
    "ece",
    "ece_all_class",
    "gaussian_nll",
    "nll",
    "nll_from_log_probs",
    "entropy_from_log_probs",
    "ood_auroc",
    "predictive_entropy",
    "regression_metrics",
    "reliability_bins",
    "rmse",
]
