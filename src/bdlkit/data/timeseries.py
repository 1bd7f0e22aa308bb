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
  x is ``(n, L, C)`` and y ``(n, H, C)``; ``features="M"`` (the default) keeps every
  column, ``"S"`` only the target (C = 1).

Bad input is refused with a :class:`~bdlkit.core.errors.DataError` (a bad option: an
:class:`~bdlkit.core.errors.InputError`; both are ``ValueError``) naming the file, column or
row and the fix: empty, repeated, backward or skipped ISO time stamps; non-numeric, empty or
NaN cells; an unknown target; a split shorter than ``L + H``; ``horizon < 1``,
``lookback < horizon`` or non-integer lengths. Channels constant over the training rows get
std 1, ``meta["constant_channels"]`` and a :class:`~bdlkit.core.errors.DataWarning`.

CSV files are read with the :mod:`csv` module (no pandas dependency).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from bdlkit.core.errors import DataError, DataWarning, InputError, caller_stacklevel
from bdlkit.data.csv_series import parse_series
from bdlkit.data.dataset import Dataset, as_float
from bdlkit.data.roots import find
from bdlkit.data.uci import standardisation_stats

Features = Literal["S", "M", "s", "m"]

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


def _windows(series: torch.Tensor, start: int, end: int, L: int, H: int) -> tuple[Any, Any]:
    """Stride-1 windows of rows ``[start, end)``: x ``(n, L, C)``, y ``(n, H, C)``."""
    x = series[start : end - H].unfold(0, L, 1).transpose(1, 2).contiguous()
    y = series[start + L : end].unfold(0, H, 1).transpose(1, 2).contiguous()
    return x, y


def _features(name: str, features: Any) -> str:
    """``"S"`` or ``"M"`` (case-insensitive)."""
    if not isinstance(features, str) or features.strip().upper() not in ("S", "M"):
        raise InputError(f"{name}: features must be 'S' (target) or 'M' (all), got {features!r}")
    return features.strip().upper()


def _split_rows_error(
    path: Path, part: str, start: int, end: int, lookback: int, horizon: int
) -> DataError:
    """A split with fewer than ``lookback + horizon`` rows, and which option to change."""
    rows, new = end - max(start, 0), end - max(start, 0) - lookback
    if part == "train":
        fix = f"lower horizon= or lookback= (default 2 * horizon) to a sum <= {rows}"
    elif new >= 1:
        fix = f"lower horizon= to at most {new} (this split starts lookback rows early)"
    else:
        fix = "lower lookback= and horizon="
    return DataError(
        f"{path}: the {part} split (rows [{start}, {end})) has {rows} rows, too "
        f"few for look-back {lookback} + horizon {horizon}: each split needs at least "
        f"{lookback + horizon} rows. Fix: {fix}, or use a longer series"
    )


def _build(
    name: str,
    path: Path,
    columns: list[str],
    values: np.ndarray,
    borders: tuple[tuple[int, int], tuple[int, int], tuple[int, int]],
    lookback: int,
    horizon: int,
    features: str,
    meta: dict[str, Any],
) -> Dataset:
    """Select features, scale with training statistics, cut windows, wrap in a Dataset."""
    features = _features(name, features)
    if features == "S":
        columns, values = columns[-1:], values[:, -1:]
    for part, (start, end) in zip(("train", "val", "test"), borders):
        if start < 0 or end - start - lookback - horizon + 1 < 1:
            raise _split_rows_error(path, part, start, end, lookback, horizon)
    train_rows = values[borders[0][0] : borders[0][1]]
    mean, std = standardisation_stats(train_rows)  # population std, as StandardScaler
    raw_std = train_rows.std(axis=0)  # the same test as standardisation_stats
    constant = [c for c, s, m in zip(columns, raw_std, mean) if s == 0 or s <= 1e-10 * abs(m)]
    if constant:
        warnings.warn(
            f"{name} ({path}): channel(s) {', '.join(map(repr, constant))} are constant over "
            f"the {len(train_rows)} training rows; their std is set to 1, so they are only "
            f"centred (see meta['constant_channels'])",
            DataWarning,
            stacklevel=caller_stacklevel(),
        )
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
        constant_channels=constant,
        scaling="StandardScaler (population std) fitted on the training rows",
    )
    return Dataset(name, "forecasting", x_tr, y_tr, x_te, y_te, x_val=x_va, y_val=y_va, meta=meta)


def _positive_int(name: str, what: str, value: Any) -> int:
    """``value`` as a positive int; bools, floats and strings are refused."""
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not is_int or value < 1:
        raise InputError(
            f"{name}: {what} must be a positive integer, got {value!r} "
            f"({type(value).__name__}). Fix: pass {what}= an int >= 1"
        )
    return int(value)


def _check_lengths(name: str, horizon: Any, lookback: Any) -> tuple[int, int]:
    """Validate horizon/lookback; return both (look-back default ``2 * horizon``)."""
    horizon = _positive_int(name, "horizon", horizon)
    lookback = 2 * horizon if lookback is None else _positive_int(name, "lookback", lookback)
    if lookback < horizon:
        raise InputError(
            f"{name}: lookback {lookback} is shorter than horizon {horizon}; Koopa-style models "
            f"need lookback >= horizon. Fix: pass lookback >= {horizon}, or leave it unset for "
            f"the default 2 * horizon = {2 * horizon}"
        )
    return horizon, lookback


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
    features: Features = "M",
) -> Dataset:
    """Load ETTh2, Exchange rate or ILI as Koopa does (splits, scaling, windows above).

    Args:
        name: ``"ett/ETTh2"`` (or ``"etth2"``), ``"exchange_rate"`` or ``"ili"``.
        root: data root (see :mod:`bdlkit.data.roots`).
        horizon: forecast length H (default: the shortest Koopa horizon, 24 for ILI and
            48 otherwise).
        lookback: input length L (default ``2 * horizon``; must be ``>= horizon``).
        features: ``"M"`` (default) all columns, as in the Koopa and score-VI tables;
            ``"S"`` only the ``OT`` column (either case).
    """
    canonical = forecasting_name(name)
    if horizon is None:
        horizon = 24 if canonical == "ili" else 48
    spec = FORECASTING[canonical]
    horizon, lookback = _check_lengths(canonical, horizon, lookback)
    features = _features(canonical, features)
    path = find(spec["file"], root, what=f"the {canonical} CSV")
    columns, values, parsed = parse_series(path, target="OT")
    n = len(values)
    if spec["kind"] == "ett_hour":
        b1, b2, b3 = _ETT_HOUR_BORDERS
        if n < b3:
            raise DataError(
                f"{path}: the ETT protocol needs at least {b3} rows (12/4/4 months), found {n}. "
                f"Fix: use the complete ETTh2.csv"
            )
        borders = ((0, b1), (b1 - lookback, b2), (b2 - lookback, b3))
        split = "ETT hourly: 12/4/4 months of 30 days"
    else:
        borders = _custom_borders(n, lookback)
        split = "custom: 70/10/20 in time order"
    meta = {"source": spec["file"], "file": str(path), "split": split, **parsed}
    return _build(canonical, path, columns, values, borders, lookback, horizon, features, meta)


def load_csv_series(
    path: str | os.PathLike,
    horizon: int = 96,
    lookback: int | None = None,
    features: Features = "M",
    target: str | None = None,
    date_column: str | None = "date",
    name: str | None = None,
    allow_gaps: bool = False,
) -> Dataset:
    """Load a user CSV time series with the custom 70/10/20 protocol.

    The file needs a header row. The column ``date_column`` (default ``"date"``; when that
    is absent, a non-numeric first column) is the time stamp and is dropped;
    ``date_column=None`` means the file has none. All other columns must be numeric. The
    target is the column ``target`` or else the last numeric column. ISO time stamps that
    skip steps of a regular grid are refused unless ``allow_gaps=True`` (e.g. business days).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"time-series CSV not found: {path}")
    label = name or path.stem
    horizon, lookback = _check_lengths(str(path), horizon, lookback)
    features = _features(str(path), features)
    columns, values, parsed = parse_series(
        path, target=target, date_column=date_column, allow_gaps=bool(allow_gaps)
    )
    borders = _custom_borders(len(values), lookback)
    split = "custom: 70/10/20 in time order"
    meta = {"source": "user CSV", "file": str(path), "split": split, **parsed}
    return _build(label, path, columns, values, borders, lookback, horizon, features, meta)


def persistence_noise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-channel RMS error ``(C,)`` of the naive forecast that repeats each window's last
    look-back value over the horizon: a data scale for the noise σ a forecaster starts from
    (computed on training windows only; floored at 1e-3)."""
    err = y.double() - x[:, -1:, :].double()
    return err.square().mean(dim=(0, 1)).sqrt().clamp_min(1e-3).to(x.dtype)


def expected_windows(n_rows: int, lookback: int, horizon: int) -> int:
    """Number of stride-1 windows in ``n_rows`` rows (``max(0, rows - L - H + 1)``)."""
    return max(0, n_rows - lookback - horizon + 1)


__all__ = [
    "FORECASTING",
    "expected_windows",
    "persistence_noise",
    "forecasting_name",
    "load_csv_series",
    "load_forecasting",
]
