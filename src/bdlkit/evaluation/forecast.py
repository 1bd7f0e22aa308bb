"""The posterior predictive of a forecaster: the equal-weight mixture over draws θ_1..θ_S.

Each draw gives a Gaussian per window, step and channel, ``N(f_θs(x), σ_s²)``; the BMA
predictive is their mixture (:class:`~bdlkit.metrics.forecasting.GaussianMixture`), kept
whole because its CRPS and quantiles (intervals, the forecast plot's bands) need every
component, not only its moments. Memory: two float32 tensors of S × n × H × C (32 draws of
ETTh2's 2 833 test windows, H = 48, C = 7: 0.24 GB).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.protocol import Problem
from bdlkit.core.tree import tree_map
from bdlkit.metrics.forecasting import GaussianMixture, forecast_metrics
from bdlkit.problems.likelihoods import GaussianPredictive


@torch.no_grad()
def forecast_mixture(problem: Problem, draws: Iterable[Any], x: Tensor,
                     chunk_size: int = 1024) -> GaussianMixture:
    """The mixture of the per-draw Gaussian forecasts of ``problem`` at windows ``x``.

    Args:
        problem: a :class:`~bdlkit.problems.BayesianModel` with a Gaussian likelihood.
        draws: single parameter draws (a sampler's kept draws, VI draws, a point).
        x: look-back windows ``(n, L, C)``.
        chunk_size: windows per forward pass.
    """
    locs, scales = [], []
    for theta in draws:
        theta = tree_map(lambda t: t.to(x.device), theta)
        parts = [problem.predictive(theta, x[i : i + chunk_size])
                 for i in range(0, len(x), chunk_size)]
        if not isinstance(parts[0], GaussianPredictive):
            raise TypeError("a forecast needs a Gaussian likelihood (a GaussianPredictive per "
                            f"draw), got {type(parts[0]).__name__}")
        locs.append(torch.cat([p.mean for p in parts]).float().cpu())
        scales.append(torch.cat([p.var for p in parts]).sqrt().float().cpu())
    if not locs:
        raise ValueError("no draws to average over (no samples kept?)")
    return GaussianMixture(torch.stack(locs), torch.stack(scales))


def channel_scale(ds: Any) -> Tensor | None:
    """The per-channel std the series were divided by (``meta["std"]``), if recorded."""
    std = (getattr(ds, "meta", None) or {}).get("std")
    return None if std is None else torch.as_tensor(std, dtype=torch.float64)


def forecast_values(mixture: GaussianMixture, y: Tensor, ds: Any) -> dict[str, float]:
    """MSE, MAE, NLL, CRPS, coverage and width (scaled units, as in the literature) and
    the error metrics in the data's original units."""
    return forecast_metrics(mixture, y.cpu(), scale_units=channel_scale(ds))
