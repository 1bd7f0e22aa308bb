"""User data files: ``.npz`` arrays and numeric ``.csv`` tables.

* ``.npz`` (read with ``allow_pickle=False``; object arrays are refused, never unpickled):
  either ``x_train, y_train, x_test, y_test`` (optionally ``x_val, y_val``), or ``x, y``,
  which are split with a seeded permutation: ``perm = torch.randperm(n,
  generator=torch.Generator().manual_seed(seed))``, the first ``round(test_fraction * n)``
  rows are the test part.
* ``.csv``: a header row, then numeric rows; the target is the column named ``target``
  or else the last column; split like ``x, y`` above. A CSV is a regression task unless
  ``task`` (or ``num_classes``) says otherwise, or its target column holds only a few
  small integers (see below).

Task inference (when ``task`` is None; :func:`~bdlkit.data.dataset.infer_task`):
``num_classes`` given, integer or boolean y, or floating y whose values are all integers
in ``[0, LABEL_LIMIT)`` (0/1 labels in a CSV; a DataWarning names ``task='regression'``)
-> classification; other floating y -> regression. Inputs are float32; a 1-D x becomes
``(n, 1)``. Input scaling (:mod:`bdlkit.data.scaling`): ``uint8`` inputs are divided by
255 (``scale_uint8=False`` keeps them); ``standardize=True`` standardises every input
feature with the training statistics. Targets are never scaled.

Contracts (each violation is a :class:`~bdlkit.core.errors.DataError` naming the file, the
array or column, the row and the fix): real numeric arrays (bool, integer or float; not
complex, text or object), one row per example, no empty split, no NaN/inf, no value beyond
float32's range, the same per-example shape in every split (checked by :class:`Dataset`).
Classification labels are integral, 1-D and in ``[0, num_classes)`` in every split, where
``num_classes`` is declared or inferred once as ``max label + 1`` and then capped at
:data:`MAX_CLASSES`. A :class:`~bdlkit.core.errors.DataWarning` flags values above
:data:`LARGE_VALUE` in magnitude, classes that never occur in the training labels and
training labels of a single class; an :class:`~bdlkit.core.errors.InputScaleWarning`
flags training inputs (after scaling) whose root mean square exceeds
:data:`~bdlkit.data.scaling.INPUT_SCALE` (the defaults assume inputs of order 1).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bdlkit.core.errors import (
    DataError,
    DataWarning,
    InputError,
    caller_stacklevel,
)
from bdlkit.data.csv_series import numeric_columns, read_table
from bdlkit.data.dataset import (
    MAX_CLASSES,
    SUPPORTED_EXTENSIONS,
    Dataset,
    as_float,
    as_labels,
    check_label_values,
    count_classes,
    infer_task,
    warn_unused_classes,
)
from bdlkit.data.scaling import INPUT_SCALE, check_options, scale_inputs, warn_input_scale

LARGE_VALUE = 1e6  #: a column whose largest absolute value exceeds this draws a DataWarning
_F32_MAX = float(torch.finfo(torch.float32).max)
_SHOWN = 5  # names or classes listed in a warning


@dataclass(frozen=True)
class _Source:
    """Where the arrays came from, to name a row or column in a message."""

    path: Path
    columns: list[str] | None = None  # a CSV's input column names
    target: str | None = None  # a CSV's target column name

    def where(self, name: str, i: int, j: int | None = None) -> str:
        """``array 'x', row 3, feature 2`` (npz) or ``column 'b', data row 4`` (CSV)."""
        if self.columns is None:
            return f"array {name!r}, row {i}" + ("" if j is None else f", feature {j}")
        column = self.target if name.startswith("y") else self.columns[j or 0]
        return f"column {column!r}, data row {i + 1}"


def _check_array(name: str, arr: np.ndarray, src: _Source) -> None:
    """Refuse non-real dtypes, scalars, rows without values and NaN/inf values."""
    path, kind = src.path, arr.dtype.kind
    if kind == "O":
        raise DataError(
            f"{path}: array {name!r} has dtype object; only numeric arrays are allowed"
        )
    if kind == "c":
        raise DataError(
            f"{path}: array {name!r} is complex ({arr.dtype}); bdlkit needs real numbers. Fix: "
            f"save the real and imaginary parts as separate features"
        )
    if kind not in "biuf":
        raise DataError(
            f"{path}: array {name!r} has non-numeric dtype {arr.dtype}. Fix: save it as a "
            f"bool, integer or float array"
        )
    if arr.ndim == 0:
        raise DataError(f"{path}: array {name!r} is a scalar, expected one row per example")
    if arr.ndim > 1 and 0 in arr.shape[1:]:
        raise DataError(
            f"{path}: array {name!r} has no values per row (shape {arr.shape}). Fix: give "
            f"every example at least one value"
        )
    if kind == "f" and len(arr):
        flat = arr.reshape(len(arr), -1)
        bad = ~np.isfinite(flat)
        if bad.any():
            i, j = (int(v) for v in np.argwhere(bad)[0])
            raise DataError(
                f"{path}: array {name!r} has {int(bad.any(axis=1).sum())} of {len(arr)} rows "
                f"with NaN or inf values; the first is {flat[i, j]} at "
                f"{src.where(name, i, j if arr.ndim > 1 else None)}. Fix: fill in or drop them"
            )


def _check_range(name: str, arr: np.ndarray, src: _Source) -> None:
    """Refuse values that float32 cannot hold (they would become inf on the cast)."""
    if arr.dtype.kind != "f" or not len(arr) or float(np.finfo(arr.dtype).max) <= _F32_MAX:
        return
    flat = arr.reshape(len(arr), -1)
    over = np.abs(flat) > _F32_MAX
    if over.any():
        i, j = (int(v) for v in np.argwhere(over)[0])
        where = src.where(name, i, j if arr.ndim > 1 else None)
        raise DataError(
            f"{src.path}: {where} holds {float(flat[i, j])!r}, beyond the range of float32 "
            f"(±{_F32_MAX:.3g}) that bdlkit computes in ({int(over.sum())} such value(s) in "
            f"{name!r}). Fix: rescale that column (divide by a power of ten, or standardise "
            f"it) before saving"
        )


def _check_rows(part: str, x: np.ndarray, y: np.ndarray, src: _Source) -> None:
    """x and y have the same, non-zero number of rows."""
    suffix = "" if part == "all" else f"_{part}"
    if len(x) != len(y):
        raise DataError(f"{src.path}: x{suffix} has {len(x)} rows but y{suffix} has {len(y)}")
    if not len(x) and part == "all":
        below = " below the header" if src.columns is not None else ""
        raise DataError(
            f"{src.path} has no data rows{below}. Fix: add examples, at least two (one to "
            f"train on, one to test on)"
        )
    if not len(x):
        raise DataError(
            f"{src.path}: x{suffix} has no rows (shape {x.shape}); every split needs at least "
            f"one example. Fix: add rows to that split, or save x, y and let bdlkit split them"
        )


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an npz, without unpickling anything."""
    try:
        npz = np.load(path, allow_pickle=False)
    except Exception as err:  # ValueError (pickle/.npy), OSError, zipfile.BadZipFile, ...
        raise DataError(f"{path}: not a readable .npz archive ({err})") from err
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise DataError(f"{path}: not an .npz archive (holds a single .npy array)")
    arrays: dict[str, np.ndarray] = {}
    with npz:
        for key in npz.files:
            try:
                arrays[key] = npz[key]
            except ValueError as err:
                if "allow_pickle" in str(err):
                    raise DataError(
                        f"{path}: array {key!r} is an object (pickled) array, which bdlkit "
                        f"refuses to load; save numeric arrays instead"
                    ) from None
                raise DataError(f"{path}: array {key!r} is unreadable ({err})") from err
            except Exception as err:  # a truncated or corrupt member
                raise DataError(f"{path}: array {key!r} is unreadable ({err})") from err
    return arrays


def _npz_parts(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The (x, y) parts of an npz: train/test(/val) as given, or ``all`` to be split."""
    arrays = _read_npz(path)
    keys = set(arrays)
    if {"x_train", "y_train", "x_test", "y_test"} <= keys:
        if len({"x_val", "y_val"} & keys) == 1:
            raise DataError(
                f"{path}: has {' '.join(sorted({'x_val', 'y_val'} & keys))} without its pair. "
                f"Fix: save both x_val and y_val, or neither"
            )
        names = ["train", "test"] + (["val"] if "x_val" in keys else [])
        return {p: (arrays[f"x_{p}"], arrays[f"y_{p}"]) for p in names}
    if {"x", "y"} <= keys:
        return {"all": (arrays["x"], arrays["y"])}
    raise DataError(
        f"{path}: expected arrays x_train, y_train, x_test, y_test (optional x_val, "
        f"y_val) or x, y; found {sorted(keys)}"
    )


def _read_csv(path: Path, target: str | None) -> tuple[np.ndarray, np.ndarray, _Source]:
    """x, y and the column names of a numeric CSV with a header row."""
    header, rows = read_table(path)
    if len(header) < 2:
        raise DataError(f"{path}: need at least one input column and one target column")
    if target is None:
        t = len(header) - 1
    elif target in header:
        t = header.index(target)
    else:
        raise DataError(f"{path}: target column {target!r} not in header {header}")
    if not rows:
        raise DataError(
            f"{path} has no data rows below the header. Fix: add rows of numbers, at least "
            f"two (one to train on, one to test on)"
        )
    table = numeric_columns(path, header, rows, list(range(len(header))))
    cols = [j for j in range(len(header)) if j != t]
    src = _Source(path, [header[j] for j in cols], header[t])
    return table[:, cols], table[:, t], src


def _split(n: int, test_fraction: Any, seed: Any, path: Path) -> tuple[torch.Tensor, ...]:
    """Seeded (train, test) index split."""
    number = (int, float, np.integer, np.floating)
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, number) or not (
            0.0 < test_fraction < 1.0):
        raise InputError(f"test_fraction must be a number in (0, 1), got {test_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (
            0 <= seed < 2**63):
        raise InputError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    n_test = int(round(test_fraction * n))
    if n_test < 1 or n_test > n - 1:
        raise DataError(
            f"{path}: cannot split {n} row{'' if n == 1 else 's'} with "
            f"test_fraction={test_fraction}: both parts need at least one row. Fix: add rows "
            f"or change test_fraction"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    return perm[n_test:], perm[:n_test]


def _warn_large(tensors: list[torch.Tensor], what: str, names: list[str], path: Path) -> None:
    """A DataWarning naming the columns whose max |value| exceeds LARGE_VALUE."""
    peak = torch.cat([t.reshape(len(t), -1).abs() for t in tensors]).amax(dim=0)
    big = torch.nonzero(peak > LARGE_VALUE).flatten().tolist()
    if not big:
        return
    shown = ", ".join(f"{names[j]} (max |value| {float(peak[j]):.3g})" for j in big[:_SHOWN])
    more = f" and {len(big) - _SHOWN} more" if len(big) > _SHOWN else ""
    warnings.warn(
        f"{path}: {what}(s) {shown}{more} exceed {LARGE_VALUE:g} in magnitude; such values "
        f"make training unstable. Fix: standardise them (inputs: standardize=True, command "
        f"line --standardize; targets: subtract the mean, divide by the std before saving) "
        f"or rescale before saving",
        DataWarning, stacklevel=caller_stacklevel(),
    )


def _read(path: Path, target: str | None) -> tuple[dict[str, Any], _Source, dict[str, Any]]:
    """The (x, y) parts of a file, where they came from and the file's metadata."""
    meta: dict[str, Any] = {"file": str(path)}
    if path.suffix.lower() == ".npz":
        parts = _npz_parts(path)
        if "all" not in parts:
            meta["split"] = "given in the file"
        return parts, _Source(path), meta
    x, y, src = _read_csv(path, target)
    meta.update(columns=src.columns, target=target if target is not None else "(last column)")
    return {"all": (x, y)}, src, meta


def load_file(
    path: str | os.PathLike,
    task: str | None = None,
    test_fraction: float = 0.2,
    seed: int = 0,
    target: str | None = None,
    num_classes: int | None = None,
    scale_uint8: bool = True,
    standardize: bool = False,
) -> Dataset:
    """Load a user ``.npz`` or ``.csv`` file as a :class:`Dataset` (see the module docstring).

    Args:
        path: the ``.npz`` or ``.csv`` file.
        task: ``"classification"``, ``"regression"`` or None (inferred from the targets).
        test_fraction: the test part of a file without a given split.
        seed: the seed of that split.
        target: a CSV's target column (default: ``target``, else the last column); an
            ``.npz`` refuses it (its targets are the arrays ``y``/``y_<split>``).
        num_classes: the number of classes K (labels 0..K-1; it makes the task
            classification); without it, K is ``max label + 1``, at most
            :data:`MAX_CLASSES`.
        scale_uint8: divide ``uint8`` inputs (pixels 0..255) by 255.
        standardize: standardise every input feature with the training mean and std.

    Raises:
        FileNotFoundError: the file does not exist.
        InputError: an invalid option (``task``, ``test_fraction``, ``seed``, ``num_classes``)
            or unsupported extension; :class:`DataError` (an InputError) for a file that
            breaks a contract (see the module docstring).
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise InputError(
            f"{path}: unsupported file type {ext or '(none)'!r}; supported: "
            f"{', '.join(SUPPORTED_EXTENSIONS)}"
        )
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    if ext == ".npz" and target is not None:
        raise InputError(
            f"{path}: target={target!r} names a .csv file's target column; an .npz holds its "
            f"targets in the arrays y (or y_train, y_test, y_val). Fix: drop target from "
            f"--data-kwargs, or save the targets you want as y")
    check_options(scale_uint8, standardize)
    parts, src, meta = _read(path, target)
    task, num_classes = _validate(parts, src, task, num_classes)
    if "all" in parts:
        x, y = parts.pop("all")
        tr, te = (i.numpy() for i in _split(len(x), test_fraction, seed, path))
        parts = {"train": (x[tr], y[tr]), "test": (x[te], y[te])}
        meta.update(split="seeded random permutation", split_seed=seed, test_fraction=test_fraction)
    parts, scaling = scale_inputs(parts, scale_uint8=bool(scale_uint8),
                                  standardize=bool(standardize))
    if scaling:
        meta["input_scaling"] = scaling
    ds = Dataset(path.stem, task, num_classes=num_classes, meta=meta, **_tensors(parts, task))
    _warn_after_load(ds, src)
    return ds


def _validate(
    parts: dict[str, Any], src: _Source, task: Any, num_classes: Any
) -> tuple[str, int | None]:
    """Check every array against the contracts; the task and the number of classes."""
    names = {p: "" if p == "all" else f"_{p}" for p in parts}
    for p, (x, y) in parts.items():
        _check_array(f"x{names[p]}", x, src)
        _check_array(f"y{names[p]}", y, src)
        _check_rows(p, x, y, src)
    what = f"column {src.target!r}" if src.columns is not None else "target array"
    task = infer_task([y for _, y in parts.values()], task, num_classes, src.path, what)
    for p, (x, y) in parts.items():
        _check_range(f"x{names[p]}", x, src)
        if task == "regression":
            _check_range(f"y{names[p]}", y, src)
        else:
            check_label_values(f"y{names[p]}", y, src.path, src.where)
    if task == "regression":
        return task, None
    labels = {f"y{names[p]}": y for p, (_, y) in parts.items()}
    return task, count_classes(labels, num_classes, src.path, src.where)


def _tensors(parts: dict[str, Any], task: str) -> dict[str, torch.Tensor]:
    """``x_<part>`` float32 (1-D x as one column) and ``y_<part>`` int64 or float32
    (cast in numpy: torch has no uint64 arithmetic)."""
    tensors = {}
    for p, (x, y) in parts.items():
        x = x.reshape(len(x), 1) if x.ndim == 1 else x
        tensors[f"x_{p}"] = as_float(x.astype(np.float32))
        labels = task == "classification"
        tensors[f"y_{p}"] = (as_labels(y.astype(np.int64)) if labels
                             else as_float(y.astype(np.float32)))
    return tensors


def _warn_after_load(ds: Dataset, src: _Source) -> None:
    """The warnings of a loaded file: large inputs or targets, inputs far from unit scale,
    unused classes."""
    splits = [s for s in (ds.train(), ds.test(), ds.val()) if s is not None]
    warn_input_scale(ds.x_train, src.path)
    if src.columns is not None:
        _warn_large([x for x, _ in splits], "input column", [repr(c) for c in src.columns],
                    src.path)
    else:
        width = int(np.prod(ds.input_shape))
        _warn_large([x for x, _ in splits], "input feature", [str(j) for j in range(width)],
                    src.path)
    if ds.task == "regression":
        width = int(np.prod(ds.y_train.shape[1:]))
        names = [repr(src.target)] if src.target is not None else [str(j) for j in range(width)]
        _warn_large([y for _, y in splits], "regression target", names, src.path)
    else:
        warn_unused_classes(ds.y_train, int(ds.num_classes), src.path)


__all__ = ["INPUT_SCALE", "LARGE_VALUE", "MAX_CLASSES", "SUPPORTED_EXTENSIONS", "load_file",
           "warn_input_scale"]
