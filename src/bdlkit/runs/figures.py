"""Reports: Markdown tables, reliability diagrams, training-history and MCMC diagnostic plots.

matplotlib is an optional dependency (``bdlkit[plots]``): it is imported inside the plotting
functions, which return ``None`` when it is missing. Figures are drawn with
``matplotlib.figure.Figure`` and ``FigureCanvasAgg`` directly (no pyplot), so a user's selected
backend and global figure state are untouched. PNGs are rendered to memory and written
atomically with :func:`bdlkit.core.serialization.atomic_write_bytes`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from bdlkit.core.plotting import new_figure, save_png
from bdlkit.diagnostics import RHAT_MAX
from bdlkit.metrics.classification import reliability_bins

__all__ = [
    "convergence_plot",
    "ess_bars",
    "history_plot",
    "markdown_table",
    "reliability_diagram",
    "rhat_layer_plot",
    "trace_plot",
]


def _cell(value: Any, floatfmt: str) -> str:
    if isinstance(value, float):
        text = format(value, floatfmt)
    elif isinstance(value, Tensor) and value.numel() == 1 and value.dtype.is_floating_point:
        text = format(float(value), floatfmt)
    else:
        text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(
    rows: list[dict], columns: list[str] | None = None, floatfmt: str = ".4f"
) -> str:
    """A GitHub Markdown table of ``rows``; floats use ``floatfmt``, other values ``str()``.

    ``columns`` defaults to the keys of all rows in first-seen order; a missing value is
    an empty cell.
    """
    if columns is None:
        columns = []
        for row in rows:
            columns.extend(k for k in row if k not in columns)
    if not columns:
        return ""
    lines = [
        "| " + " | ".join(_cell(c, floatfmt) for c in columns) + " |",
        "|" + "|".join(" --- " for _ in columns) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c), floatfmt) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def reliability_diagram(
    probs: Tensor,
    labels: Tensor,
    path: str | os.PathLike,
    num_bins: int = 15,
    title: str | None = None,
) -> Path | None:
    """Write a PNG reliability diagram (top-label bins, L2E convention); ``None`` w/o matplotlib.

    Top: accuracy per bin against the diagonal, the gap to each bin's mean confidence shaded.
    Bottom: histogram of the maximum probability.
    """
    stats = reliability_bins(probs, labels, num_bins)
    fig = new_figure((5.0, 6.0))
    if fig is None:
        return None
    edges = stats["edges"]
    width = 1.0 / num_bins
    lefts = edges[:-1]
    nonempty = [c > 0 for c in stats["counts"]]
    acc = [a if ne else 0.0 for a, ne in zip(stats["accuracy"], nonempty)]
    conf = [c if ne else 0.0 for c, ne in zip(stats["confidence"], nonempty)]

    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.bar(lefts, acc, width=width, align="edge", edgecolor="black", label="accuracy")
    gap_bottom = [min(a, c) for a, c in zip(acc, conf)]
    gap_height = [abs(a - c) if ne else 0.0 for a, c, ne in zip(acc, conf, nonempty)]
    top.bar(
        lefts,
        gap_height,
        bottom=gap_bottom,
        width=width,
        align="edge",
        color="red",
        alpha=0.3,
        hatch="//",
        edgecolor="red",
        label="gap",
    )
    top.plot([0, 1], [0, 1], "k--", linewidth=1, label="perfect calibration")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.set_ylabel("accuracy")
    top.legend(loc="upper left")
    top.set_title(title or f"Reliability (ECE = {stats['ece']:.4f})")
    total = max(sum(stats["counts"]), 1)
    bottom.bar(
        lefts,
        [c / total for c in stats["counts"]],
        width=width,
        align="edge",
        color="gray",
        edgecolor="black",
    )
    bottom.set_xlabel("confidence (max probability)")
    bottom.set_ylabel("fraction")
    fig.tight_layout()
    return save_png(fig, path)


def history_plot(history: list[dict], path: str | os.PathLike, keys: list[str]) -> Path | None:
    """Write a PNG with one panel per key of ``keys`` plotted against ``"step"``.

    Keys absent from every record are skipped; records missing ``"step"`` use their index.
    Returns ``None`` without matplotlib or when no key has data.
    """
    series: dict[str, tuple[list[float], list[float]]] = {}
    for key in keys:
        xs, ys = [], []
        for i, rec in enumerate(history):
            if key not in rec or rec[key] is None:
                continue
            value = float(rec[key])
            if not math.isfinite(value):
                continue
            xs.append(float(rec.get("step", i)))
            ys.append(value)
        if xs:
            series[key] = (xs, ys)
    if not series:
        return None
    fig = new_figure((6.0, 2.2 * len(series) + 0.5))
    if fig is None:
        return None
    axes = fig.subplots(len(series), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (key, (xs, ys)) in zip(axes, series.items()):
        ax.plot(xs, ys, marker="." if len(xs) < 50 else None)
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    return save_png(fig, path)


def rhat_layer_plot(
    summary: dict[str, dict],
    path: str | os.PathLike,
    threshold: float = RHAT_MAX,
    title: str | None = None,
) -> Path | None:
    """Write L2E's layer-wise R-hat plot: per layer a point at ``"mean"`` +- ``"std"``.

    ``summary`` maps layer names (plotted in order) to ``{"mean": ..., "std": ...}``; the
    ``"all"`` entry is left out of the points and quoted in the default title. A dashed line
    marks ``threshold``, by default the run-health check's
    (:data:`bdlkit.diagnostics.RHAT_MAX`, 1.01). Returns ``None`` without matplotlib or
    when there is no layer.
    """
    layers = [k for k in summary if k != "all"]
    if not layers:
        return None
    fig = new_figure((max(4.0, 0.45 * len(layers) + 2.0), 4.0))
    if fig is None:
        return None
    means = [float(summary[k]["mean"]) for k in layers]
    stds = [float(summary[k].get("std", 0.0)) for k in layers]
    ax = fig.subplots()
    xs = list(range(len(layers)))
    ax.errorbar(xs, means, yerr=stds, fmt="o", capsize=3, label="mean +- std over parameters")
    ax.axhline(
        threshold, color="red", linestyle="--", linewidth=1, label=f"threshold {threshold:g}"
    )
    ax.set_xticks(xs)
    ax.set_xticklabels(layers, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("R-hat")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    if title is None:
        title = "Layer-wise R-hat"
        if "all" in summary and "mean" in summary["all"]:
            title += f" (all: {float(summary['all']['mean']):.3f})"
    ax.set_title(title)
    fig.tight_layout()
    return save_png(fig, path)


def trace_plot(
    draws: Tensor | np.ndarray,
    path: str | os.PathLike,
    names: list[str] | None = None,
    max_series: int = 6,
) -> Path | None:
    """Write MCMC trace plots: one row per series (the first ``max_series``), a line per chain.

    ``draws`` is ``(chains, draws, k)`` or, for one chain, ``(draws, k)``; ``names`` (length
    ``k``) label the rows. Returns ``None`` without matplotlib or for empty draws.
    """
    if isinstance(draws, Tensor):
        draws = draws.detach().cpu().double().numpy()
    arr = np.asarray(draws, dtype=np.float64)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise ValueError(f"draws must be (chains, draws, k) or (draws, k), got {arr.shape}")
    if names is not None and len(names) != arr.shape[2]:
        raise ValueError(f"got {len(names)} names for {arr.shape[2]} series")
    rows = min(arr.shape[2], max_series)
    if rows < 1 or arr.shape[1] == 0:
        return None
    fig = new_figure((7.0, 1.6 * rows + 0.8))
    if fig is None:
        return None
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    steps = np.arange(arr.shape[1])
    for j, ax in enumerate(axes):
        for c in range(arr.shape[0]):
            ax.plot(steps, arr[c, :, j], linewidth=0.7, alpha=0.8, label=f"chain {c}")
        ax.set_ylabel(names[j] if names is not None else f"param {j}", fontsize=8)
        ax.grid(alpha=0.3)
    if 1 < arr.shape[0] <= 10:
        axes[0].legend(loc="upper right", fontsize=7, ncol=min(arr.shape[0], 5))
    axes[-1].set_xlabel("draw")
    fig.tight_layout()
    return save_png(fig, path)


def ess_bars(
    values: dict[str, float],
    path: str | os.PathLike,
    title: str | None = None,
    xlabel: str = "ESS",
) -> Path | None:
    """Write horizontal bars of ``values`` (e.g. ESS per method or per layer), first on top.

    Each bar is annotated with its value. Returns ``None`` without matplotlib or for no
    values.
    """
    if not values:
        return None
    fig = new_figure((6.0, 0.35 * len(values) + 1.2))
    if fig is None:
        return None
    labels = list(values)
    widths = [float(values[k]) for k in labels]
    ax = fig.subplots()
    bars = ax.barh(range(len(labels)), widths, color="tab:blue", edgecolor="black")
    ax.bar_label(bars, fmt="%.4g", padding=2, fontsize=8)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.margins(x=0.15)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return save_png(fig, path)


def convergence_plot(
    curves: dict[str, list[dict[str, float]]],
    path: str | os.PathLike,
    y: str,
    xs: tuple[str, ...] = ("score_evals", "seconds"),
    title: str = "",
    floor: float = 1e-8,
) -> Path | None:
    """Log-log curves of ``y`` against each key of ``xs`` (one panel each), one line per
    label of ``curves`` (a list of points with those keys); values below ``floor`` are
    drawn at ``floor``. ``None`` without matplotlib or without any finite point."""
    fig = new_figure((5.0 * len(xs), 3.6))
    if fig is None or not any(curves.values()):
        return None
    for i, x in enumerate(xs):
        ax = fig.add_subplot(1, len(xs), i + 1)
        for label, points in curves.items():
            pts = [(p[x], max(p[y], floor)) for p in points
                   if p.get(x, 0) > 0 and math.isfinite(p.get(y, math.nan))]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker=".", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(x.replace("_", " "))
        ax.set_ylabel(y.replace("_", " "))
        ax.grid(True, which="both", alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)
