"""Figures without pyplot: an Agg figure and an atomic PNG write.

matplotlib is optional (``bdlkit[plots]``): :func:`new_figure` returns ``None`` when it is
missing, and callers skip the plot. Figures use ``matplotlib.figure.Figure`` with
``FigureCanvasAgg`` directly, so a user's backend and global figure state are untouched.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from bdlkit.core.serialization import atomic_write_bytes


def new_figure(figsize: tuple[float, float]) -> Any:
    """A pyplot-free Agg figure, or ``None`` without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    fig = Figure(figsize=figsize, dpi=100)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Any, path: str | os.PathLike) -> Path:
    """Render ``fig`` to memory and write it to ``path`` atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    path = Path(path)
    atomic_write_bytes(path, buf.getvalue())
    return path
