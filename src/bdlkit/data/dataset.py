"""The in-memory dataset record every loader returns.

A :class:`Dataset` is a plain frozen record of tensors: train and test parts, an
optional validation part, the task kind and what a model needs to know (number of
classes, input shape, the scaling applied). Loaders are in sibling modules; this
module only defines the record and its own consistency checks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

Task = Literal["classification", "regression", "forecasting"]


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
                raise ValueError(
                    f"{self.name}: x_{part} and y_{part} must both be given or both be None"
                )
            if x is not None and len(x) != len(y):
                raise ValueError(
                    f"{self.name}: x_{part} has {len(x)} rows but y_{part} has {len(y)}"
                )
        if self.task == "classification" and self.num_classes is None:
            raise ValueError(f"{self.name}: a classification dataset needs num_classes")

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
