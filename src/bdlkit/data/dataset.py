"""The in-memory dataset record every loader returns.

A :class:`Dataset` is a plain frozen record of tensors: train and test parts, an
optional validation part, the task kind and what a model needs to know (number of
classes, input shape, the scaling applied). Loaders are in sibling modules; this
module only defines the record and its own consistency checks (row counts, per-example
shapes across splits, label range), which raise :class:`~bdlkit.core.errors.DataError`, and
the label checks file loaders run on the labels as read (before any cast): the task
(:func:`infer_task`), values, the class count (declared, or inferred up to
:data:`MAX_CLASSES`) and unused classes.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from bdlkit.core.errors import DataError, DataWarning, InputError, caller_stacklevel

Task = Literal["classification", "regression", "forecasting"]
Where = Callable[[str, int], str]  # (array name, row) -> where it is, for a message
SUPPORTED_EXTENSIONS = (".npz", ".csv")  #: the user data files bdlkit reads (bdlkit.data.files)
MAX_CLASSES = 10_000  #: cap on an inferred class count; a declared num_classes may exceed it
#: Floating targets that are all integers in ``[0, LABEL_LIMIT)`` with at least two distinct
#: values are read as class labels (with a DataWarning naming ``task="regression"``).
LABEL_LIMIT = 20
_SHOWN = 5  # classes listed in a warning


def is_data_file(name: Any) -> bool:
    """Whether data set ``name`` is a user data file's path (``.npz``/``.csv``), not a name
    from the data sets bdlkit knows."""
    return isinstance(name, (str, os.PathLike)) and (
        Path(name).suffix.lower() in SUPPORTED_EXTENSIONS)


@dataclass(frozen=True)
class Dataset:
    """Train/test (and optional validation) tensors plus metadata.

    Conventions: inputs are floating point (images channels-first ``(n, C, H, W)``,
    tabular ``(n, features)``, time-series windows ``(n, lookback, channels)``);
    classification labels are ``int64`` in ``[0, num_classes)``; regression targets
    are floating point ``(n,)`` or ``(n, outputs)``; forecasting targets are
    ``(n, horizon, channels)``.
    """

    name: str
    task: Task
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    x_val: Tensor | None = None
    y_val: Tensor | None = None
    num_classes: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for part in ("train", "test", "val"):
            x, y = getattr(self, f"x_{part}"), getattr(self, f"y_{part}")
            if (x is None) != (y is None):
                raise DataError(
                    f"{self.name}: x_{part} and y_{part} must both be given or both be None"
                )
            if x is not None and (x.ndim == 0 or y.ndim == 0):
                raise DataError(f"{self.name}: x_{part} and y_{part} need one row per example")
            if x is not None and len(x) != len(y):
                raise DataError(
                    f"{self.name}: x_{part} has {len(x)} rows but y_{part} has {len(y)}"
                )
        self._check_split_shapes()
        if self.task == "classification":
            self._check_labels()

    @property
    def _where(self) -> str:
        """The file the data came from (``meta["file"]``), else the data set's name."""
        return str(self.meta.get("file", self.name))

    def _check_split_shapes(self) -> None:
        """Every split's per-example shapes (x and y) must be the training split's."""
        for role in ("x", "y"):
            train = getattr(self, f"{role}_train")
            for part in ("test", "val"):
                t = getattr(self, f"{role}_{part}")
                if t is not None and t.shape[1:] != train.shape[1:]:
                    raise DataError(
                        f"{self._where}: {role}_{part} has shape {tuple(t.shape)} but "
                        f"{role}_train has {tuple(train.shape)}; every split needs the "
                        f"per-example shape {tuple(train.shape[1:])}. Fix: give {role}_{part} "
                        f"the same features (columns) as {role}_train"
                    )

    def _check_labels(self) -> None:
        """Classification labels are integers in ``[0, num_classes)`` in every split."""
        if self.num_classes is None:
            raise DataError(f"{self.name}: a classification dataset needs num_classes")
        for part in ("train", "test", "val"):
            y = getattr(self, f"y_{part}")
            if y is None or not len(y):
                continue
            if y.is_floating_point() or y.is_complex():
                raise DataError(f"{self._where}: y_{part} labels must be integers, got {y.dtype}")
            low, high = int(y.min()), int(y.max())
            if low < 0 or high >= self.num_classes:
                raise DataError(
                    f"{self._where}: y_{part} has labels in [{low}, {high}], outside "
                    f"[0, {self.num_classes}) for num_classes={self.num_classes}"
                )

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input example."""
        x = self.x_train if len(self.x_train) else self.x_test
        return tuple(x.shape[1:])

    @property
    def num_train(self) -> int:
        return len(self.x_train)

    def train(self) -> tuple[Tensor, Tensor]:
        return self.x_train, self.y_train

    def test(self) -> tuple[Tensor, Tensor]:
        return self.x_test, self.y_test

    def val(self) -> tuple[Tensor, Tensor] | None:
        return None if self.x_val is None else (self.x_val, self.y_val)

    def to(self, device: torch.device | str | None = None,
           dtype: torch.dtype | None = None) -> Dataset:
        """A copy on ``device`` with floating tensors (inputs, regression targets) cast to
        ``dtype``; labels stay int64. Returns ``self`` when nothing changes."""
        def move(t: Tensor | None) -> Tensor | None:
            if t is None:
                return None
            cast = dtype if dtype is not None and t.dtype.is_floating_point else None
            return t.to(device=device, dtype=cast)

        names = ("x_train", "y_train", "x_test", "y_test", "x_val", "y_val")
        moved = {n: move(getattr(self, n)) for n in names}
        if all(moved[n] is getattr(self, n) for n in names):
            return self
        return dataclasses.replace(self, **moved)

    def __repr__(self) -> str:
        parts = [f"train={len(self.x_train)}", f"test={len(self.x_test)}"]
        if self.x_val is not None:
            parts.append(f"val={len(self.x_val)}")
        extra = f", num_classes={self.num_classes}" if self.num_classes else ""
        return f"Dataset({self.name!r}, {self.task}, {', '.join(parts)}, input={self.input_shape}{extra})"


def as_float(x: Any, dtype: torch.dtype = torch.float32) -> Tensor:
    """Convert an array-like to a floating tensor (copying from numpy once)."""
    return torch.as_tensor(x).to(dtype)


def as_labels(y: Any) -> Tensor:
    """Convert an array-like of integer labels to ``int64``."""
    return torch.as_tensor(y).to(torch.int64)


# --- classification labels as a file holds them (numpy, before any cast) ---


def _label_text(v: Any) -> str:
    """A label as the file holds it (integral floats without the ``.0``)."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return str(v) if isinstance(v, (int, bool)) else repr(v)


def infer_task(ys: list[np.ndarray], task: Any, num_classes: Any, path: Any,
               target: str) -> str:
    """The task of a file whose target arrays are ``ys`` (every split, as read).

    The given ``task``; else classification for a declared ``num_classes``, for integer or
    boolean targets, and for floating targets holding only a few small integers (every
    value an integer in ``[0, LABEL_LIMIT)``, at least two distinct: 0/1 labels in a
    CSV), which draws a :class:`~bdlkit.core.errors.DataWarning` naming the switch back
    to regression; regression otherwise.

    Args:
        ys: the target arrays of every split.
        task: ``"classification"``, ``"regression"`` or None (infer).
        num_classes: the declared number of classes, or None.
        path: the file, named in messages.
        target: the target, as messages name it (``column 'label'``, ``array 'y'``).

    Raises:
        InputError: a bad ``task`` or ``num_classes``, or both a count and regression.
    """
    if task not in (None, "classification", "regression"):
        raise InputError(f"task must be 'classification' or 'regression', got {task!r}")
    if num_classes is not None:
        is_int = isinstance(num_classes, (int, np.integer)) and not isinstance(
            num_classes, (bool, np.bool_))
        if not is_int or num_classes < 1:
            raise InputError(
                f"num_classes must be a positive integer K (labels are 0..K-1), got "
                f"{num_classes!r} ({type(num_classes).__name__})"
            )
        if task == "regression":
            raise InputError("num_classes applies to classification only; drop it or the task")
        return "classification"
    if task is not None:
        return task
    if ys[0].dtype.kind in "biu":
        return "classification"
    values = np.unique(np.concatenate([y.reshape(-1) for y in ys]))
    small_integers = (all(y.ndim == 1 and y.dtype.kind == "f" for y in ys)
                      and len(values) >= 2 and values[0] >= 0 and values[-1] < LABEL_LIMIT
                      and bool(np.all(values == np.round(values))))
    if not small_integers:
        return "regression"
    shown = ", ".join(_label_text(v.item()) for v in values)
    warnings.warn(
        f"{path}: the {target} holds only the integers {shown}, so it is read as class "
        f"labels: a classification task with {int(values[-1]) + 1} classes. If it is a "
        f"quantity to predict, load it as regression: task='regression' (command line: "
        f"--data-kwargs '{{\"task\": \"regression\"}}'); to say it is classification "
        f"and silence this: task='classification'",
        DataWarning, stacklevel=caller_stacklevel(),
    )
    return "classification"


def check_label_values(name: str, y: np.ndarray, path: Any, where: Where) -> None:
    """Classification labels are 1-D, integral and >= 0 (values as the file holds them)."""
    if y.ndim != 1:
        raise DataError(
            f"{path}: classification labels {name!r} must be 1-D, got {y.shape}. Fix: "
            f"save one integer label per row"
        )
    if y.dtype.kind == "f" and not np.all(y == np.round(y)):
        i = int(np.flatnonzero(y != np.round(y))[0])
        raise DataError(
            f"{path}: classification labels {name!r} are not integer-valued: "
            f"{where(name, i)} holds {y[i].item()!r}. Fix: use labels 0..K-1, or "
            f"task='regression'"
        )
    i = int(np.argmin(y))
    if y[i].item() < 0:
        raise DataError(
            f"{path}: label {_label_text(y[i].item())} ({where(name, i)}) is "
            f"negative; labels must be >= 0. Fix: relabel the classes to 0..K-1"
        )


def count_classes(
    labels: dict[str, np.ndarray], declared: int | None, path: Any, where: Where
) -> int:
    """The declared count (every label below it), or max label + 1 up to MAX_CLASSES."""
    name, y = max(labels.items(), key=lambda item: item[1].max().item())
    i = int(np.argmax(y))
    top = y[i].item()
    fix = ("relabel the classes to 0..K-1, or declare the count with num_classes=K "
           "(command line: --data-kwargs '{\"num_classes\": K}')")
    if declared is None and int(top) + 1 > MAX_CLASSES:
        raise DataError(
            f"{path}: label {_label_text(top)} ({where(name, i)}) would make "
            f"{int(top) + 1} classes, more than MAX_CLASSES = {MAX_CLASSES} that bdlkit "
            f"infers. Fix: {fix}"
        )
    if declared is not None and top >= declared:
        raise DataError(
            f"{path}: {where(name, i)} has label {_label_text(top)}, outside "
            f"[0, {declared}) for num_classes={declared}. Fix: {fix}"
        )
    return int(top) + 1 if declared is None else int(declared)


def warn_unused_classes(y_train: Tensor, num_classes: int, path: Any) -> None:
    """DataWarnings for a single training class or classes absent from training."""
    present = set(torch.unique(y_train).tolist())
    if len(present) == 1:
        warnings.warn(
            f"{path}: the training labels hold a single class ({present.pop()}) of "
            f"{num_classes}; a classifier trained on them predicts it everywhere and its "
            f"accuracy means nothing. Fix: include examples of every class in training",
            DataWarning, stacklevel=caller_stacklevel(),
        )
        return
    if len(present) < num_classes:
        missing, c = [], 0
        while len(missing) < _SHOWN and c < num_classes:  # at most len(present) + 5 steps
            if c not in present:
                missing.append(c)
            c += 1
        more = ", ..." if num_classes - len(present) > len(missing) else ""
        warnings.warn(
            f"{path}: {num_classes - len(present)} of the {num_classes} classes never occur in "
            f"the training labels: {', '.join(map(str, missing))}{more}. Fix: relabel the "
            f"classes to 0..K-1 or add training examples of them",
            DataWarning, stacklevel=caller_stacklevel(),
        )
