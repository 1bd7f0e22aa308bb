"""The data :func:`bdlkit.evaluate` scores, given as :func:`bdlkit.infer` takes data.

``evaluate(result, data)`` accepts a :class:`~bdlkit.data.Dataset` (its test split is
scored, its training split gives the health checks' trivial predictor), an ``(x, y)`` pair
of tensors or arrays, or a DataLoader of ``(x, y)`` batches (every batch, in order). A
pair or a loader becomes a Dataset whose test split is those rows and whose training
split is empty; the task is the model's (its likelihood's), so labels of a classifier are
read as class indices and regression targets as floating point.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from bdlkit.core.errors import InputError
from bdlkit.data.dataset import Dataset, as_float, as_labels


def held_out(data: Any, task: str | None, name: str = "given data") -> Any:
    """``data`` as a data set with a test split (module docstring).

    Args:
        data: a Dataset (or any object with ``x_test``/``y_test``: returned as it is), an
            ``(x, y)`` pair or a DataLoader yielding ``(x, y)`` batches.
        task: ``"classification"`` or ``"regression"``: the model's task, which says how
            to read ``y``; None reads it as given.
        name: the data set's name in messages and reports.
    """
    if hasattr(data, "x_test") and hasattr(data, "y_test"):
        return data
    if isinstance(data, DataLoader):
        batches = [tuple(b) for b in data]
        if not batches or any(len(b) != 2 for b in batches):
            raise InputError(f"evaluate: the DataLoader must yield (x, y) batches and at "
                             f"least one, got {len(batches)} batches")
        x = torch.cat([torch.as_tensor(b[0]) for b in batches])
        y = torch.cat([torch.as_tensor(b[1]) for b in batches])
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        x, y = data
    else:
        raise InputError(
            f"evaluate: data must be a bdlkit Dataset, an (x, y) pair or a DataLoader of "
            f"(x, y) batches (as bdlkit.infer takes), got {type(data).__name__}")
    x = torch.as_tensor(x)
    x = x if x.is_floating_point() else as_float(x)  # integer inputs as float32, unscaled
    if task == "classification":
        y = as_labels(y)
        num_classes = int(y.max()) + 1 if len(y) else 1
    else:
        y, num_classes = torch.as_tensor(y), None
        y = y if y.is_floating_point() or task is None else y.to(x.dtype)
    return Dataset(name=name, task=task or ("regression" if y.is_floating_point()
                                            else "classification"),
                   x_train=x[:0], y_train=y[:0], x_test=x, y_test=y, num_classes=num_classes)
