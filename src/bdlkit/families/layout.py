"""A network's parameters (a ``dict[str, Tensor]``) as one vector, and back.

A vector family (the flow of :mod:`bdlkit.families.flow`) lives on R^d; a network's
parameters are named tensors. :class:`Layout` fixes an order of the names (a chosen
group first, e.g. the tensors a flow acts on, then the rest in the problem's order)
and their shapes, and maps a point or a stack of draws between the two forms::

    flatten({name: (*batch, *shape)}) -> (*batch, d)
    unflatten((*batch, d))            -> {name: (*batch, *shape)}

``batch`` is the number of leading dimensions (0 for one point, 1 for stacked draws).
The order of the dict that :meth:`Layout.unflatten` returns is the problem's own, so the
result can be passed to the problem as its parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Layout:
    """Names in vector order, their shapes, and the names in the problem's order."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    problem_order: tuple[str, ...]

    @classmethod
    def of(cls, point: dict[str, Tensor], first: Sequence[str] = ()) -> Layout:
        """The layout of ``point`` with the names ``first`` leading (in ``point``'s order)."""
        unknown = [n for n in first if n not in point]
        if unknown:
            raise ValueError(f"{unknown} are not among the parameters {list(point)[:6]}")
        lead = [n for n in point if n in set(first)]
        names = (*lead, *(n for n in point if n not in set(first)))
        return cls(names=names, shapes=tuple(tuple(point[n].shape) for n in names),
                   problem_order=tuple(point))

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(math.prod(s) for s in self.shapes)

    @property
    def features(self) -> int:
        """d, the length of the vector."""
        return sum(self.sizes)

    def size_of(self, names: Sequence[str]) -> int:
        """How many coordinates the tensors ``names`` hold."""
        chosen = set(names)
        return sum(size for n, size in zip(self.names, self.sizes, strict=True) if n in chosen)

    def flatten(self, tree: dict[str, Tensor], batch: int = 1) -> Tensor:
        """The vector(s) of ``tree`` (leaves with ``batch`` leading dimensions)."""
        device = tree[self.names[0]].device  # a likelihood's parameters may sit elsewhere
        parts = [tree[n].reshape(*tree[n].shape[:batch], -1).to(device) for n in self.names]
        return torch.cat(parts, dim=-1)

    def unflatten(self, vector: Tensor) -> dict[str, Tensor]:
        """The named tensors of ``vector`` (``(*batch, d)``), in the problem's order."""
        lead = vector.shape[:-1]
        parts = torch.split(vector, list(self.sizes), dim=-1)
        named = {n: p.reshape((*lead, *s))
                 for n, p, s in zip(self.names, parts, self.shapes, strict=True)}
        return {n: named[n] for n in self.problem_order}


__all__ = ["Layout"]
