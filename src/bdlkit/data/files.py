"""User data files: ``.npz`` arrays and numeric ``.csv`` tables.

* ``.npz`` (read with ``allow_pickle=False``; object arrays are refused, never unpickled):
  either ``x_train, y_train, x_test, y_test`` (optionally ``x_val, y_val``), or ``x, y``,
  which are split with a seeded permutation: ``perm = torch.randperm(n,
  generator=torch.Generator().manual_seed(seed))``, the first ``round(test_fraction * n)``
  rows are the test part.
* ``.csv``: a header row, then numeric rows; the target is the column named ``target``
  or else the last column; split like ``x, y`` above. A CSV is a regression task unless
  ``task`` says otherwise.

Task inference (when ``task`` is None): integer or boolean y -> classification with
``num_classes = max(y) + 1``; floating y -> regression. Inputs are float32; a 1-D x
becomes ``(n, 1)``. No standardisation is applied.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bdlkit.data.csv_series import numeric_columns, read_table
from bdlkit.data.dataset import Dataset, as_float, as_labels

SUPPORTED_EXTENSIONS = (".npz", ".csv")


def _check_array(name: str, arr: np.ndarray, path: Path) -> np.ndarray:
    """Refuse object/non-numeric arrays and NaN/inf values (counting the bad rows)."""
    if arr.dtype == object:
        raise ValueError(
            f"{path}: array {name!r} has dtype object; only numeric arrays are allowed"
        )
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise ValueError(f"{path}: array {name!r} has non-numeric dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"{path}: array {name!r} is a scalar, expected one row per example")
    if np.issubdtype(arr.dtype, np.inexact):
        finite = np.isfinite(arr.reshape(len(arr), -1)).all(axis=1)
        if not finite.all():
            raise ValueError(
                f"{path}: array {name!r} has {int((~finite).sum())} of {len(arr)} rows "
                f"with NaN or inf values"
            )
    return arr


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an npz, without unpickling anything."""
    try:
        npz = np.load(path, allow_pickle=False)
    except Exception as err:  # ValueError (pickle/.npy), OSError, zipfile.BadZipFile, ...
        raise ValueError(f"{path}: not a readable .npz archive ({err})") from err
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: not an .npz archive (holds a single .npy array)")
    arrays: dict[str, np.ndarray] = {}
    with npz:
        for key in npz.files:
            try:
                arrays[key] = npz[key]
            except ValueError as err:
                if "allow_pickle" in str(err):
                    raise ValueError(
                        f"{path}: array {key!r} is an object (pickled) array, which bdlkit "
                        f"refuses to load; save numeric arrays instead"
                    ) from None
                raise ValueError(f"{path}: array {key!r} is unreadable ({err})") from err
    return arrays


def _read_csv(path: Path, target: str | None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """x, y and the input column names of a numeric CSV with a header row."""
    header, rows = read_table(path)
    if len(header) < 2:
        raise ValueError(f"{path}: need at least one input column and one target column")
    if target is None:
        t = len(header) - 1
    elif target in header:
        t = header.index(target)
    else:
        raise ValueError(f"{path}: target column {target!r} not in header {header}")
    table = numeric_columns(path, header, rows, list(range(len(header))))
    cols = [j for j in range(len(header)) if j != t]
    return table[:, cols], table[:, t], [header[j] for j in cols]


def _infer_task(y: np.ndarray, task: str | None) -> str:
    """The given task, or classification for integer/bool y and regression otherwise."""
    if task is not None:
        if task not in ("classification", "regression"):
            raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
        return task
    is_int = np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_
    return "classification" if is_int else "regression"


def _labels(y: np.ndarray, name: str, path: Path) -> np.ndarray:
    """Validate classification labels: integral, non-negative, one per row."""
    if y.ndim != 1:
        raise ValueError(f"{path}: classification labels {name!r} must be 1-D, got {y.shape}")
    if np.issubdtype(y.dtype, np.inexact) and not np.all(y == np.round(y)):
        raise ValueError(f"{path}: classification labels {name!r} are not integer-valued")
    if y.size and y.min() < 0:
        raise ValueError(f"{path}: classification labels {name!r} must be >= 0")
    return y.astype(np.int64)


def _split(n: int, test_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded (train, test) index split."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    n_test = int(round(test_fraction * n))
    if n_test < 1 or n_test > n - 1:
        raise ValueError(
            f"cannot split {n} rows with test_fraction={test_fraction}: "
            f"both parts need at least one row"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[n_test:], perm[:n_test]


def load_file(
    path: str | os.PathLike,
    task: str | None = None,
    test_fraction: float = 0.2,
    seed: int = 0,
    target: str | None = None,
) -> Dataset:
    """Load a user ``.npz`` or ``.csv`` file as a :class:`Dataset` (see the module docstring).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: unsupported extension, missing keys, object arrays, NaN/inf values,
            mismatched lengths or invalid labels.
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise ValueError(
            f"{path}: unsupported file type {ext or '(none)'!r}; supported: "
            f"{', '.join(SUPPORTED_EXTENSIONS)}"
        )
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    meta: dict[str, Any] = {"file": str(path)}
    parts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if ext == ".npz":
        arrays = _read_npz(path)
        keys = set(arrays)
        if {"x_train", "y_train", "x_test", "y_test"} <= keys:
            names = ["train", "test"] + (["val"] if {"x_val", "y_val"} <= keys else [])
            for p in names:
                parts[p] = (arrays[f"x_{p}"], arrays[f"y_{p}"])
            meta["split"] = "given in the file"
        elif {"x", "y"} <= keys:
            parts["all"] = (arrays["x"], arrays["y"])
        else:
            raise ValueError(
                f"{path}: expected arrays x_train, y_train, x_test, y_test (optional x_val, "
                f"y_val) or x, y; found {sorted(keys)}"
            )
    else:
        x, y, columns = _read_csv(path, target)
        parts["all"] = (x, y)
        meta["columns"] = columns
        meta["target"] = target if target is not None else "(last column)"
        task = task or "regression"
    for p, (x, y) in parts.items():
        suffix = "" if p == "all" else f"_{p}"
        _check_array(f"x{suffix}", x, path)
        _check_array(f"y{suffix}", y, path)
        if len(x) != len(y):
            raise ValueError(f"{path}: x{suffix} has {len(x)} rows but y{suffix} has {len(y)}")
    if "all" in parts:
        x, y = parts.pop("all")
        tr, te = _split(len(x), test_fraction, seed)
        parts = {"train": (x[tr.numpy()], y[tr.numpy()]), "test": (x[te.numpy()], y[te.numpy()])}
        meta.update(split="seeded random permutation", split_seed=seed, test_fraction=test_fraction)
    task = _infer_task(parts["train"][1], task)
    tensors: dict[str, Any] = {}
    for p, (x, y) in parts.items():
        x = x.reshape(len(x), 1) if x.ndim == 1 else x
        tensors[f"x_{p}"] = as_float(x.astype(np.float32))
        if task == "classification":
            tensors[f"y_{p}"] = as_labels(_labels(y, f"y_{p}", path))
        else:
            tensors[f"y_{p}"] = as_float(y.astype(np.float32))
    num_classes = None
    if task == "classification":
        maxima = [int(tensors[f"y_{p}"].max()) for p in parts if len(parts[p][1])]
        if not maxima:
            raise ValueError(f"{path}: no labels found")
        num_classes = max(maxima) + 1
    return Dataset(path.stem, task, num_classes=num_classes, meta=meta, **tensors)
