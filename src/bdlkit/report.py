"""Reports: Markdown tables, reliability diagrams and training-history plots.

matplotlib is an optional dependency (``bdlkit[plots]``): it is imported inside the plotting
functions, which return ``None`` when it is missing. Figures are drawn with
``matplotlib.figure.Figure`` and ``FigureCanvasAgg`` directly (no pyplot), so a user's selected
backend and global figure state are untouched. PNGs are rendered to memory and written
atomically with :func:`bdlkit.serialization.atomic_write_bytes`.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

from torch import Tensor

from .metrics.classification import reliability_bins
from .serialization import atomic_write_bytes

__all__ = ["history_plot", "markdown_table", "reliability_diagram"]


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


def _new_figure(figsize: tuple[float, float]):
    """A pyplot-free Agg figure, or ``None`` without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    fig = Figure(figsize=figsize, dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save_png(fig, path: str | os.PathLike) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    path = Path(path)
    atomic_write_bytes(path, buf.getvalue())
    return path


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
    fig = _new_figure((5.0, 6.0))
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
    return _save_png(fig, path)


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
    fig = _new_figure((6.0, 2.2 * len(series) + 0.5))
    if fig is None:
        return None
    axes = fig.subplots(len(series), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (key, (xs, ys)) in zip(axes, series.items()):
        ax.plot(xs, ys, marker="." if len(xs) < 50 else None)
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    return _save_png(fig, path)
