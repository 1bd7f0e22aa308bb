"""The forecast plot of a run: look-back, truth, predictive median and 50/90 % bands.

Panels are a few test windows (evenly spread over the test period) by a few channels (the
target, last, and the first); the bands are central intervals of the BMA mixture
(:class:`~bdlkit.metrics.forecasting.GaussianMixture`), computed for the plotted windows
only. Drawn pyplot-free like the other run figures (:mod:`bdlkit.runs.figures`).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from bdlkit.core.plotting import new_figure, save_png
from bdlkit.metrics.forecasting import GaussianMixture


def plotted_windows(n: int, count: int = 3) -> list[int]:
    """``count`` window indices spread evenly over ``n`` test windows."""
    if n <= count:
        return list(range(n))
    return [round(i * (n - 1) / (count - 1)) for i in range(count)] if count > 1 else [0]


def forecast_plot(x: Tensor, y: Tensor, mixture: GaussianMixture, path: str | os.PathLike,
                  *, columns: list[str] | None = None, windows: int = 3,
                  title: str = "") -> Path | None:
    """Write the forecast PNG; ``None`` without matplotlib.

    Args:
        x: test look-back windows ``(n, L, C)``.
        y: test targets ``(n, H, C)``.
        mixture: the predictive over the same windows.
        path: the PNG to write.
        columns: channel names (``meta["columns"]``).
        windows: how many windows to plot.
        title: the figure's title.
    """
    idx = plotted_windows(len(x), windows)
    chans = sorted({x.shape[-1] - 1, 0})
    fig = new_figure((4.0 * len(chans), 2.4 * len(idx) + 0.6))
    if fig is None:
        return None
    loc, scale = mixture.loc, mixture.scale  # scale's dims after S align from the right
    scale = scale.reshape(scale.shape[0], *[1] * (loc.ndim - scale.ndim), *scale.shape[1:])
    sub = GaussianMixture(loc[:, idx], scale.expand_as(loc)[:, idx])
    median = sub.quantile(0.5)
    bands = {level: sub.interval(level) for level in (0.9, 0.5)}
    lookback, horizon = x.shape[1], y.shape[1]
    past, future = torch.arange(-lookback, 0), torch.arange(horizon)
    axes = fig.subplots(len(idx), len(chans), squeeze=False)
    for row, w in enumerate(idx):
        for col, c in enumerate(chans):
            ax = axes[row][col]
            ax.plot(past, x[w, :, c].cpu(), color="0.4", lw=1, label="look-back")
            ax.plot(future, y[w, :, c].cpu(), color="black", lw=1, label="truth")
            for level, alpha in ((0.9, 0.2), (0.5, 0.4)):
                lo, hi = bands[level]
                ax.fill_between(future, lo[row, :, c], hi[row, :, c], color="tab:blue",
                                alpha=alpha, lw=0, label=f"{round(100 * level)} % interval")
            ax.plot(future, median[row, :, c], color="tab:blue", lw=1.2, label="median")
            name = columns[c] if columns and c < len(columns) else f"channel {c}"
            ax.set_title(f"test window {w}, {name}", fontsize=9)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)
