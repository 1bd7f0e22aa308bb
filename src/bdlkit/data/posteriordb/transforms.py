"""Stan's constraining transforms, batched, with their log-Jacobians.

Each transform maps a block of unconstrained coordinates ``x`` of shape ``(n, m)``
to constrained values ``y = f(x)`` of the same shape, and gives
``log |det df/dx|`` per row, shape ``(n,)``. A density ``p_Y`` on the constrained
space becomes ``p_X(x) = p_Y(f(x)) |det J_f(x)|`` on R^m; this is what an
unconstrained sampler or VI family must target (Stan adds the same term).

* :class:`Identity`: ``y = x``, log-det 0.
* :class:`Positive` (``<lower=0>``): ``y = exp(x)``, log-det ``sum x``.
* :class:`UnitInterval` (``<lower=0, upper=1>``): ``y = sigmoid(x)``,
  log-det ``sum log sigmoid(x) + log(1 - sigmoid(x))``.
* :class:`Ordered` (``ordered[m]``): ``y_1 = x_1``, ``y_k = y_{k-1} + exp(x_k)``,
  log-det ``sum_{k>=2} x_k``.

:class:`ParamLayout` stacks named blocks into one flat unconstrained vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


class Transform:
    """A bijection R^m -> constrained set, applied row-wise to ``(n, m)`` tensors."""

    def forward(self, x: Tensor) -> Tensor:
        """Unconstrained ``x`` -> constrained ``y``."""
        raise NotImplementedError

    def inverse(self, y: Tensor) -> Tensor:
        """Constrained ``y`` -> unconstrained ``x``."""
        raise NotImplementedError

    def log_abs_det_jacobian(self, x: Tensor) -> Tensor:
        """``log |det d forward / dx|`` at each row of ``x``; shape ``(n,)``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Identity(Transform):
    """``y = x`` (an unconstrained ``real`` / ``vector``)."""

    def forward(self, x: Tensor) -> Tensor:
        return x

    def inverse(self, y: Tensor) -> Tensor:
        return y

    def log_abs_det_jacobian(self, x: Tensor) -> Tensor:
        return x.new_zeros(x.shape[0])


class Positive(Transform):
    """``y = exp(x)`` for ``<lower=0>``; ``log|J| = sum_i x_i``."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.exp(x)

    def inverse(self, y: Tensor) -> Tensor:
        return torch.log(y)

    def log_abs_det_jacobian(self, x: Tensor) -> Tensor:
        return x.sum(-1)


class UnitInterval(Transform):
    """``y = sigmoid(x)`` for ``<lower=0, upper=1>``.

    ``dy/dx = sigmoid(x) (1 - sigmoid(x))``, so
    ``log|J| = sum_i -softplus(-x_i) - softplus(x_i)`` (stable for large ``|x|``).
    """

    def forward(self, x: Tensor) -> Tensor:
        return torch.sigmoid(x)

    def inverse(self, y: Tensor) -> Tensor:
        return torch.logit(y)

    def log_abs_det_jacobian(self, x: Tensor) -> Tensor:
        return (-F.softplus(-x) - F.softplus(x)).sum(-1)


class Ordered(Transform):
    """Stan's ``ordered[m]``: ``y_1 = x_1``, ``y_k = y_{k-1} + exp(x_k)``.

    The Jacobian is lower triangular with diagonal ``(1, exp(x_2), ..., exp(x_m))``,
    so ``log|J| = sum_{k>=2} x_k``. Inverse: ``x_1 = y_1``, ``x_k = log(y_k - y_{k-1})``.
    """

    def forward(self, x: Tensor) -> Tensor:
        increments = torch.cat([x[:, :1], torch.exp(x[:, 1:])], dim=1)
        return torch.cumsum(increments, dim=1)

    def inverse(self, y: Tensor) -> Tensor:
        return torch.cat([y[:, :1], torch.log(torch.diff(y, dim=1))], dim=1)

    def log_abs_det_jacobian(self, x: Tensor) -> Tensor:
        return x[:, 1:].sum(-1)


@dataclass(frozen=True)
class Block:
    """One named parameter block: ``size`` coordinates through ``transform``.

    ``vector`` says whether Stan declares it as an array/vector (names ``"beta[1]"``)
    or a scalar (name ``"mu"``); by default a block of size 1 is a scalar.
    """

    name: str
    size: int
    transform: Transform
    vector: bool | None = None

    def element_names(self) -> list[str]:
        """Stan-style names: ``"mu"`` for a scalar, ``"beta[1]" ...`` for a vector."""
        if not (self.size > 1 if self.vector is None else self.vector):
            return [self.name]
        return [f"{self.name}[{i + 1}]" for i in range(self.size)]


class ParamLayout:
    """A flat unconstrained vector ``(n, d)`` <-> named constrained blocks.

    Blocks are laid out in the given order (Stan's ``parameters`` block order), so
    ``d = sum(block.size)``. ``forward`` returns the constrained blocks as a dict of
    ``(n, size)`` tensors plus the summed log-Jacobian ``(n,)``.

    Example::

        layout = ParamLayout([Block("beta", 2, Identity()), Block("sigma", 1, Positive())])
        params, logdet = layout.forward(theta)  # theta: (n, 3)
    """

    def __init__(self, blocks: list[Block]) -> None:
        names = [b.name for b in blocks]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate block names in {names}")
        self.blocks = tuple(blocks)
        self.dim = sum(b.size for b in blocks)

    def __repr__(self) -> str:
        inner = ", ".join(f"{b.name}[{b.size}]:{b.transform!r}" for b in self.blocks)
        return f"ParamLayout({inner})"

    @property
    def names(self) -> list[str]:
        """Element names of the constrained blocks, in layout order."""
        return [n for b in self.blocks for n in b.element_names()]

    def split(self, theta: Tensor) -> dict[str, Tensor]:
        """Cut ``(n, d)`` into the unconstrained blocks ``{name: (n, size)}``."""
        if theta.ndim != 2 or theta.shape[1] != self.dim:
            raise ValueError(f"expected theta of shape (n, {self.dim}), got {tuple(theta.shape)}")
        parts = torch.split(theta, [b.size for b in self.blocks], dim=1)
        return {b.name: p for b, p in zip(self.blocks, parts)}

    def forward(self, theta: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """Constrained blocks ``{name: f_b(x_b)}`` and ``sum_b log|J_b(x_b)|``."""
        out: dict[str, Tensor] = {}
        logdet = theta.new_zeros(theta.shape[0])
        for block, x in zip(self.blocks, self.split(theta).values()):
            out[block.name] = block.transform.forward(x)
            logdet = logdet + block.transform.log_abs_det_jacobian(x)
        return out, logdet

    def inverse(self, params: dict[str, Tensor]) -> Tensor:
        """Constrained blocks ``{name: (n, size)}`` -> flat unconstrained ``(n, d)``."""
        missing = [b.name for b in self.blocks if b.name not in params]
        if missing:
            raise KeyError(f"missing parameter blocks {missing}")
        parts = [b.transform.inverse(params[b.name].reshape(-1, b.size)) for b in self.blocks]
        return torch.cat(parts, dim=1)
