"""Regression metrics on a Gaussian BMA predictive ``N(mean, var)``.

Hand-written because they are two lines each and torchmetrics has no Gaussian NLL metric
with the unit conversion needed here (targets are usually standardised for training and the
metrics are reported in the original units). All metrics average over every element, so
``(n,)`` and ``(n, d)`` targets are both accepted. ``mean``/``var``/``y`` must have the same
number of elements per example; ``(n,)`` against ``(n, 1)`` is reshaped, never broadcast.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bdlkit.problems.likelihoods import GaussianPredictive

__all__ = [
    "coverage", "coverage_from_cdf", "gaussian_nll", "mae", "regression_metrics", "rmse",
]

COVERAGE_LEVELS = (0.5, 0.9, 0.95)


def _match(ref: Tensor, other: Tensor, name: str) -> Tensor:
    """``other`` reshaped to ``ref``'s shape; raise if the shapes are incompatible."""
    if not isinstance(ref, Tensor) or not isinstance(other, Tensor):
        raise ValueError("regression metrics need torch tensors")
    if ref.ndim == 0 or ref.numel() == 0:
        raise ValueError(f"need a non-empty (n, ...) prediction, got shape {tuple(ref.shape)}")
    if other.shape == ref.shape:
        return other
    if other.ndim >= 1 and other.shape[0] == ref.shape[0] and other.numel() == ref.numel():
        return other.reshape(ref.shape)
    raise ValueError(
        f"{name} of shape {tuple(other.shape)} does not match the predictive mean "
        f"{tuple(ref.shape)}"
    )


def _check_finite(x: Tensor, name: str) -> None:
    if not x.dtype.is_floating_point:
        raise ValueError(f"{name} must be floating point, got dtype {x.dtype}")
    if torch.isnan(x).any():
        raise ValueError(f"{name} contains {int(torch.isnan(x).sum())} NaN values")


def rmse(mean: Tensor, y: Tensor) -> float:
    """``sqrt( mean over all elements of (mean − y)² )``."""
    y = _match(mean, y, "y")
    _check_finite(mean, "mean")
    _check_finite(y, "y")
    return math.sqrt(float(((mean.double() - y.double()) ** 2).mean()))


def mae(mean: Tensor, y: Tensor) -> float:
    """``mean over all elements of |mean − y|``."""
    y = _match(mean, y, "y")
    _check_finite(mean, "mean")
    _check_finite(y, "y")
    return float((mean.double() - y.double()).abs().mean())


def coverage(mean: Tensor, var: Tensor, y: Tensor, level: float) -> float:
    """Fraction of elements inside the central ``level`` interval of N(mean, var):
    ``|y − mean| ≤ Φ⁻¹((1 + level)/2) · sqrt(var)`` (for a mixture, see
    :func:`coverage_from_cdf`)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    y, var = _match(mean, y, "y"), _match(mean, var, "var")
    z = float(torch.special.ndtri(torch.tensor((1 + level) / 2, dtype=torch.float64)))
    inside = (y.double() - mean.double()).abs() <= z * var.double().sqrt()
    return float(inside.double().mean())


def coverage_from_cdf(cdf: Tensor, level: float) -> float:
    """Fraction of elements whose predictive CDF value lies in ``[(1−l)/2, (1+l)/2]``: the
    coverage of the central ``level`` interval of any continuous predictive (e.g. the BMA
    mixture, :attr:`bdlkit.evaluation.predictive.RegressionBMA.cdf`)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    lo, hi = (1 - level) / 2, (1 + level) / 2
    return float(((cdf >= lo) & (cdf <= hi)).double().mean())


def gaussian_nll(mean: Tensor, var: Tensor, y: Tensor) -> float:
    """``mean over elements of ½ log(2π var) + (y − mean)² / (2 var)`` (−log N(y; mean, var))."""
    y = _match(mean, y, "y")
    var = _match(mean, var, "var")
    for x, name in ((mean, "mean"), (var, "var"), (y, "y")):
        _check_finite(x, name)
    if (var <= 0).any():
        raise ValueError(f"var must be > 0; found {int((var <= 0).sum())} non-positive values")
    m, v, t = mean.double(), var.double(), y.double()
    return float((0.5 * torch.log(2 * math.pi * v) + 0.5 * (t - m) ** 2 / v).mean())


def regression_metrics(
    pred: GaussianPredictive,
    y: Tensor,
    y_scale: float = 1.0,
    log_density: Tensor | None = None,
    cdf: Tensor | None = None,
) -> dict[str, float]:
    """Metrics in original units for targets standardised as ``(y − μ)/y_scale``.

    ``rmse`` and ``mae`` scale by ``y_scale``; the density of ``y_orig = μ + y_scale · y``
    is the standardised density divided by ``y_scale``, so NLLs gain ``+ log(y_scale)``.
    ``nll`` is the moment-matched Gaussian's; with ``log_density`` (the BMA mixture's
    log density at each example, :class:`bdlkit.evaluation.predictive.RegressionBMA`) ``nll_mixture``
    is the mixture's own, per target element. ``coverage_50/90/95``: of the mixture's central
    intervals when its ``cdf`` at ``y`` is given (:func:`coverage_from_cdf`), else of the
    moment-matched Gaussian's (:func:`coverage`).
    """
    if not y_scale > 0 or not math.isfinite(y_scale):
        raise ValueError(f"y_scale must be a positive finite number, got {y_scale}")
    mean, var = pred
    out = {
        "rmse": rmse(mean, y) * y_scale,
        "mae": mae(mean, y) * y_scale,
        "nll": gaussian_nll(mean, var, y) + math.log(y_scale),
    }
    if log_density is not None:
        per_example = mean[0].numel()
        nll = -float(log_density.double().mean()) / per_example
        out["nll_mixture"] = nll + math.log(y_scale)
    for level in COVERAGE_LEVELS:
        out[f"coverage_{round(100 * level)}"] = (
            coverage(mean, var, y, level) if cdf is None else coverage_from_cdf(cdf, level)
        )
    return out
