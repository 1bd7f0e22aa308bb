"""The input contract of a network posterior: the per-example shape and dtype it was fit on.

:meth:`bdlkit.BayesianModel.validate_data` records it from the training inputs (``x`` of
shape ``(n, *shape)``); a :class:`~bdlkit.Result` keeps it, writes it into
``result.json`` and checks every input it predicts at against it (``predict``,
``predictive``, ``intervals``, ``forecast``, ``to_arviz``), so inputs of another
per-example shape are refused instead of being regrouped into other rows by a network
that flattens them (``reshape(-1, in_dim)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.errors import InputError


@dataclass(frozen=True)
class InputContract:
    """What one training example looked like.

    Attributes:
        shape: the per-example shape (``x.shape[1:]`` of the training inputs).
        dtype: the inputs' dtype (``"float32"``; integer inputs, token ids, accept any
            integer dtype).
    """

    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, x: Tensor) -> InputContract:
        """The contract of training inputs ``x`` ``(n, *shape)``."""
        return cls(tuple(int(s) for s in x.shape[1:]), str(x.dtype).removeprefix("torch."))

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, record: Any) -> InputContract | None:
        """The contract ``result.json`` records, or ``None`` for a record that is absent
        (a result saved before bdlkit recorded it: its inputs are not checked)."""
        if not isinstance(record, dict):
            return None
        shape, dtype = record.get("shape"), record.get("dtype")
        if not (isinstance(shape, list) and all(isinstance(s, int) for s in shape)
                and isinstance(dtype, str) and isinstance(getattr(torch, dtype, None),
                                                          torch.dtype)):
            return None
        return cls(tuple(shape), dtype)

    def check(self, x: Any, where: str) -> None:
        """Refuse inputs ``x`` that are not ``(n, *shape)`` of the recorded dtype.

        Args:
            x: the inputs to predict at.
            where: the call that received them (``"Result.predict"``), for the message.

        Raises:
            InputError: naming the expected and the given shape or dtype, and the fix.
        """
        if not isinstance(x, Tensor):
            raise InputError(f"{where}: x must be a torch.Tensor of shape "
                             f"{_rows(self.shape)}, got {type(x).__name__}")
        if tuple(x.shape[1:]) != self.shape or x.ndim != len(self.shape) + 1:
            raise InputError(
                f"{where}: x has shape {tuple(x.shape)}, but the model was fit on examples "
                f"of shape {self.shape}: pass x of shape {_rows(self.shape)}, one "
                "example per row")
        trained = getattr(torch, self.dtype)
        given = x.dtype
        same_kind = not trained.is_floating_point and not given.is_floating_point
        if given != trained and not same_kind:
            raise InputError(f"{where}: x is {given}, but the model was fit on {trained} "
                             f"inputs: convert them with x.to({trained})")


def _rows(shape: tuple[int, ...]) -> str:
    """``(n, 64)`` for examples of shape ``(64,)``, ``(n,)`` for scalar ones."""
    return f"(n, {', '.join(str(s) for s in shape)})" if shape else "(n,)"
