"""Fully connected network (multilayer perceptron).

A plain stack of ``Linear -> activation`` layers followed by a linear output layer.
Inputs of any trailing shape are flattened, so the same class serves tabular data
(``in_features=d``) and images (``in_features=(c, h, w)``).

``dropout=p > 0`` puts an ``nn.Dropout(p)`` before every ``Linear`` (the inputs too), the
placement of Gal & Ghahramani's MC dropout. A :class:`~bdlkit.BayesianModel` evaluates the
network in eval mode, so the layers act only under ``mc_dropout``, which draws their masks
itself (``docs/methods/mc_dropout.md``); every other method sees the same network as
without them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}


class MLP(nn.Module):
    """Multilayer perceptron ``[Linear -> act] x len(hidden) -> Linear``.

    Args:
        in_features: input size, an int or a shape tuple (flattened to its product).
        out_features: output size (e.g. number of classes).
        hidden: widths of the hidden layers; ``()`` gives a linear model.
        activation: one of ``"relu"``, ``"tanh"``, ``"silu"``, ``"gelu"``.
        dropout: the rate p in [0, 1) of a dropout layer before every ``Linear`` (0: none).

    ``forward`` maps ``(n, *in_shape)`` (or ``(n, prod(in_shape))``) to ``(n, out_features)``;
    inputs with another number of values per example are refused (flattening them would
    regroup their values into another number of rows).
    """

    def __init__(
        self,
        in_features: int | Sequence[int],
        out_features: int,
        hidden: Sequence[int] = (100,),
        activation: str = "relu",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; valid: {sorted(_ACTIVATIONS)}")
        if isinstance(in_features, int):
            self.in_shape: tuple[int, ...] = (in_features,)
        else:
            self.in_shape = tuple(int(s) for s in in_features)
        self.in_dim = math.prod(self.in_shape)
        if self.in_dim <= 0 or out_features <= 0 or any(h <= 0 for h in hidden):
            raise ValueError("MLP sizes must be positive")
        if isinstance(dropout, bool) or not 0 <= dropout < 1:
            raise ValueError(f"MLP dropout must be a rate in [0, 1), got {dropout!r}")
        self.out_features = out_features
        layers: list[nn.Module] = []
        width = self.in_dim
        drop: list[nn.Module] = [nn.Dropout(dropout)] if dropout > 0 else []
        for h in hidden:
            layers += [*drop, nn.Linear(width, h), _ACTIVATIONS[activation]()]
            width = h
        layers += [*(nn.Dropout(dropout) for _ in drop), nn.Linear(width, out_features)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """Flatten ``x`` to ``(n, prod(in_shape))`` and apply the network (a 1-d ``x`` is one
        example, or ``n`` scalar ones when ``in_shape`` is ``(1,)``)."""
        return self.net(torch.reshape(checked_rows(x, self.in_shape), (-1, self.in_dim)))


@torch.fx.wrap  # one call node when traced (mc_dropout's torch.fx finds the layers)
def checked_rows(x: Tensor, in_shape: tuple[int, ...]) -> Tensor:
    """``x`` itself, refused (``ValueError``) unless each example has ``prod(in_shape)``
    values: flattening it would regroup its values into another number of rows."""
    in_dim = math.prod(in_shape)
    per_row = math.prod(x.shape[1:]) if x.ndim > 1 else (1 if in_dim == 1 else x.numel())
    if per_row != in_dim:
        raise ValueError(f"MLP takes examples of shape {in_shape} ({in_dim} values each), "
                         f"got x of shape {tuple(x.shape)} ({per_row} values per example): "
                         f"pass x of shape (n, {in_dim})")
    return x
