"""Long-horizon forecasting data (ETTh2, Exchange rate, ILI) with the Koopa/Autoformer protocol.

Data, relative to the data root (``--data-root`` or ``$BDLKIT_DATA``; see :mod:`.roots`):

* ``ETDataset/ETT-small/ETTh2.csv``: hourly, 17,420 rows, ``date`` + 6 loads + ``OT``;
* ``autoformer_datasets/dataset/exchange_rate/exchange_rate.csv``: daily, 7,588 rows,
  ``date`` + 8 rates (``0``-``6``, ``OT``);
* ``autoformer_datasets/dataset/illness/national_illness.csv``: weekly, 966 rows,
  ``date`` + 7 columns (``OT`` last).

Protocol (``docs/protocols.md``, Time-series data: the THUML ``data_loader.py`` convention), with
look-back ``L`` (default ``2 * horizon``, as in Koopa) and horizon ``H``:

* ETT: train rows ``[0, 8640)``, val ``[8640 - L, 11520)``, test ``[11520 - L, 14400)``
  (12/4/4 months of 30 days; later rows are unused).
* Custom sets: columns reordered to the others then the target ``OT`` last;
  ``n_tr = int(0.7 N)``, ``n_te = int(0.2 N)``, ``n_va = N - n_tr - n_te``; train
  ``[0, n_tr)``, val ``[n_tr - L, n_tr + n_va)``, test ``[N - n_te - L, N)``.
* A ``StandardScaler`` (population std) is fitted on the training rows of the selected
  columns and applied to the whole series; everything stays in scaled units
  (``meta["mean"]``/``meta["std"]`` undo it).
* Stride-1 windows: window ``i`` has input rows ``[i, i + L)`` and target rows
  ``[i + L, i + L + H)``, so a split of ``r`` rows gives ``r - L - H + 1`` windows.
  x is ``(n, L, C)`` and y ``(n, H, C)``; ``features="S"`` keeps only the target column
  (C = 1), ``"M"`` all columns.

CSV files are read with the :mod:`csv` module (no pandas dependency).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from bdlkit.data.dataset import Dataset, as_float
from bdlkit.data.roots import find
from bdlkit.data.uci import standardisation_stats

Features = Literal["S", "M"]

FORECASTING: dict[str, dict[str, str]] = {
    "ett/ETTh2": {"file": "ETDataset/ETT-small/ETTh2.csv", "kind": "ett_hour"},
    "exchange_rate": {
        "file": "autoformer_datasets/dataset/exchange_rate/exchange_rate.csv",
        "kind": "custom",
    },
    "ili": {"file": "autoformer_datasets/dataset/illness/national_illness.csv", "kind": "custom"},
}
_ALIASES = {
    "ett/etth2": "ett/ETTh2",
    "etth2": "ett/ETTh2",
    "exchange_rate": "exchange_rate",
    "exchange": "exchange_rate",
    "ili": "ili",
    "illness": "ili",
    "national_illness": "ili",
}
_ETT_HOUR_BORDERS = (12 * 30 * 24, 16 * 30 * 24, 20 * 30 * 24)  # 8640, 11520, 14400


def forecasting_name(name: str) -> str:
    """Canonical forecasting data-set name for ``name`` (case-insensitive aliases)."""
    key = name.strip().lower()
    if key not in _ALIASES:
        raise ValueError(
            f"unknown forecasting data set {name!r}; valid names: {', '.join(FORECASTING)} "
            f"(aliases: {', '.join(sorted(_ALIASES))})"
        )
    return _ALIASES[key]


def numeric_columns(
    path: Path, header: list[str], rows: list[list[str]], columns: list[int]
) -> np.ndarray:
    """The given columns of CSV rows as a float64 array (empty cells become NaN)."""
    values = np.empty((len(rows), len(columns)), dtype=np.float64)
    for i, row in enumerate(rows):
        for k, j in enumerate(columns):
            cell = row[j].strip()
            try:
                values[i, k] = float(cell) if cell else np.nan
            except ValueError:
                raise ValueError(
                    f"{path}: non-numeric value {cell!r} in column {header[j]!r}, data row {i + 1}"
                ) from None
    return values


def read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and data rows of a comma-separated file (blank lines skipped)."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise ValueError(f"{path}: empty CSV file") from None
        rows = [row for row in reader if row and any(cell.strip() for cell in row)]
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(
                f"{path}: data row {i + 1} has {len(row)} fields, the header has {len(header)}"
            )
    return header, rows


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parse_series(
    path: Path, target: str | None, date_column: str | None = "date"
) -> tuple[list[str], np.ndarray, list[str] | None]:
    """Numeric columns (others first, target last), values ``(T, C)`` float64, and dates."""
    header, rows = read_table(path)
    if not rows:
        raise ValueError(f"{path}: no data rows")
    lower = [h.lower() for h in header]
    date_idx: int | None = None
    if date_column is not None and date_column.lower() in lower:
        date_idx = lower.index(date_column.lower())
    elif not _is_number(rows[0][0]):
        date_idx = 0  # a non-numeric first column is taken as the time stamp
    numeric = [j for j in range(len(header)) if j != date_idx]
    if not numeric:
        raise ValueError(f"{path}: no numeric columns")
    if target is None:
        tgt = numeric[-1]
    elif target in header:
        tgt = header.index(target)
    else:
        raise ValueError(f"{path}: target column {target!r} not in header {header}")
    if tgt == date_idx:
        raise ValueError(f"{path}: the target column {target!r} is the date column")
    order = [j for j in numeric if j != tgt] + [tgt]
    values = numeric_columns(path, header, rows, order)
    bad = ~np.isfinite(values).all(axis=1)
    if bad.any():
        raise ValueError(f"{path}: {int(bad.sum())} rows contain NaN/inf or empty values")
    dates = [row[date_idx] for row in rows] if date_idx is not None else None
    return [header[j] for j in order], values, dates


def _windows(series: torch.Tensor, start: int, end: int, L: int, H: int) -> tuple[Any, Any]:
    """Stride-1 windows of rows ``[start, end)``: x ``(n, L, C)``, y ``(n, H, C)``."""
    x = series[start : end - H].unfold(0, L, 1).transpose(1, 2).contiguous()
    y = series[start + L : end].unfold(0, H, 1).transpose(1, 2).contiguous()
    return x, y


def _build(
    name: str,
    columns: list[str],
    values: np.ndarray,
    borders: tuple[tuple[int, int], tuple[int, int], tuple[int, int]],
    lookback: int,
    horizon: int,
    features: str,
    meta: dict[str, Any],
) -> Dataset:
    """Select features, scale with training statistics, cut windows, wrap in a Dataset."""
    if features not in ("S", "M"):
        raise ValueError(
            f"{name}: features must be 'S' (target only) or 'M' (all), got {features!r}"
        )
    if features == "S":
        columns, values = columns[-1:], values[:, -1:]
    for part, (start, end) in zip(("train", "val", "test"), borders):
        if start < 0 or end - start - lookback - horizon + 1 < 1:
            raise ValueError(
                f"{name}: the {part} rows [{start}, {end}) are too few for look-back {lookback} "
                f"+ horizon {horizon} (need at least {lookback + horizon} rows)"
            )
    train_rows = values[borders[0][0] : borders[0][1]]
    mean, std = standardisation_stats(train_rows)  # population std, as StandardScaler
    series = as_float((values - mean) / std)
    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = (
        _windows(series, s, e, lookback, horizon) for s, e in borders
    )
    meta = dict(meta)
    meta.update(
        columns=columns,
        target=columns[-1],
        features=features,
        lookback=lookback,
        horizon=horizon,
        borders={p: list(b) for p, b in zip(("train", "val", "test"), borders)},
        n_rows=len(values),
        mean=mean.tolist(),
        std=std.tolist(),
        scaling="StandardScaler (population std) fitted on the training rows",
    )
    return Dataset(name, "forecasting", x_tr, y_tr, x_te, y_te, x_val=x_va, y_val=y_va, meta=meta)


def _check_lengths(name: str, horizon: int, lookback: int | None) -> int:
    """Validate horizon/lookback; return the look-back (default ``2 * horizon``)."""
    if not isinstance(horizon, int) or horizon < 1:
        raise ValueError(f"{name}: horizon must be a positive integer, got {horizon}")
    lookback = 2 * horizon if lookback is None else lookback
    if not isinstance(lookback, int) or lookback < 1:
        raise ValueError(f"{name}: lookback must be a positive integer, got {lookback}")
    return lookback


def _custom_borders(n: int, lookback: int) -> tuple[tuple[int, int], ...]:
    """The Autoformer 70/10/20 split with val/test reaching ``lookback`` rows back."""
    n_tr, n_te = int(n * 0.7), int(n * 0.2)
    n_va = n - n_tr - n_te
    return ((0, n_tr), (n_tr - lookback, n_tr + n_va), (n - n_te - lookback, n))


def load_forecasting(
    name: str,
    root: str | os.PathLike | None = None,
    horizon: int | None = None,
    lookback: int | None = None,
    features: Features = "S",
) -> Dataset:
    """Load ETTh2, Exchange rate or ILI as Koopa does (splits, scaling, windows above).

    Args:
        name: ``"ett/ETTh2"`` (or ``"etth2"``), ``"exchange_rate"`` or ``"ili"``.
        root: data root (see :mod:`bdlkit.data.roots`).
        horizon: forecast length H (default: the shortest Koopa horizon, 24 for ILI and
            48 otherwise).
        lookback: input length L (default ``2 * horizon``).
        features: ``"S"`` only the ``OT`` column, ``"M"`` all columns.
    """
    canonical = forecasting_name(name)
    if horizon is None:
        horizon = 24 if canonical == "ili" else 48
    spec = FORECASTING[canonical]
    lookback = _check_lengths(canonical, horizon, lookback)
    path = find(spec["file"], root, what=f"the {canonical} CSV")
    columns, values, dates = _parse_series(path, target="OT")
    n = len(values)
    if spec["kind"] == "ett_hour":
        b1, b2, b3 = _ETT_HOUR_BORDERS
        if n < b3:
            raise ValueError(f"{path}: ETT protocol needs at least {b3} rows, found {n}")
        borders = ((0, b1), (b1 - lookback, b2), (b2 - lookback, b3))
        split = "ETT hourly: 12/4/4 months of 30 days"
    else:
        borders = _custom_borders(n, lookback)
        split = "custom: 70/10/20 in time order"
    meta = {
        "source": spec["file"],
        "file": str(path),
        "split": split,
        "first_date": dates[0] if dates else None,
        "last_date": dates[-1] if dates else None,
    }
    return _build(canonical, columns, values, borders, lookback, horizon, features, meta)


def load_csv_series(
    path: str | os.PathLike,
    horizon: int = 96,
    lookback: int | None = None,
    features: Features = "S",
    target: str | None = None,
    date_column: str | None = "date",
    name: str | None = None,
) -> Dataset:
    """Load a user CSV time series with the custom 70/10/20 protocol.

    The file needs a header row. A column named ``date_column`` (or a non-numeric first
    column) is taken as the time stamp and dropped; all other columns must be numeric.
    The target is the column ``target`` or else the last numeric column.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"time-series CSV not found: {path}")
    label = name or path.stem
    lookback = _check_lengths(label, horizon, lookback)
    columns, values, dates = _parse_series(path, target=target, date_column=date_column)
    borders = _custom_borders(len(values), lookback)
    meta = {
        "source": "user CSV",
        "file": str(path),
        "split": "custom: 70/10/20 in time order",
        "first_date": dates[0] if dates else None,
        "last_date": dates[-1] if dates else None,
    }
    return _build(label, columns, values, borders, lookback, horizon, features, meta)


def expected_windows(n_rows: int, lookback: int, horizon: int) -> int:
    """Number of stride-1 windows in ``n_rows`` rows (``max(0, rows - L - H + 1)``)."""
    return max(0, n_rows - lookback - horizon + 1)


__all__ = [
    "FORECASTING",
    "expected_windows",
    "forecasting_name",
    "load_csv_series",
    "load_forecasting",
]
