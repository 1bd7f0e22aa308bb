"""One contiguous buffer for a network's parameters, and the problem seen on that buffer.

An element-wise algorithm (SGLD, SGHMC, MAP, ADVI, ...) does the same arithmetic on every
coordinate. On a network's ``dict[str, Tensor]`` that arithmetic is one kernel per tensor
per operation, and with a dozen tensors the Python and launch overhead of those small
kernels costs as much as the arithmetic. On one flat vector it is one kernel per operation.
This module gives the flat form without changing what states look like:

* :class:`FlatLayout` fixes the order, shapes and offsets of a dict of tensors of one dtype
  and device; :meth:`~FlatLayout.flatten` returns the buffer the tensors are views of
  (no copy) when they are, and concatenates them otherwise; :meth:`~FlatLayout.views`
  gives the named views of a buffer (no copy).
* :func:`pack` / :func:`unpack` apply those to every parameter-shaped dict inside a state
  (parameters, momenta, optimiser moments, λ = (μ, ρ)).
* :class:`FlatProblem` is a problem on R^d: it hands the views of θ to the wrapped
  problem's oracle and concatenates the score into one vector.

States keep their named tensors (views into one buffer per field), so checkpoints, draws
and everything that reads a state are unchanged; a state whose tensors are not views (a
loaded checkpoint, a user's warm start) is concatenated once, on its first step.
Written by hand: ``torch.nn.utils.parameters_to_vector`` always copies and knows nothing
of views, and ``torch.func``'s functional_call wants the named tensors, not a vector.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.tree import tree_map

__all__ = ["FlatLayout", "FlatProblem", "pack", "unpack"]


@dataclass(frozen=True)
class FlatLayout:
    """The names (in the dict's order), shapes, sizes and offsets of a dict of tensors."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    sizes: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, tree: Any) -> FlatLayout | None:
        """The layout of ``tree``, or None when it is not a non-empty dict of floating
        tensors of one dtype and device (then it stays a tree)."""
        if not isinstance(tree, dict) or not tree:
            return None
        leaves = list(tree.values())
        if not all(isinstance(t, Tensor) for t in leaves):
            return None
        first = leaves[0]
        if not first.dtype.is_floating_point or any(
                t.dtype != first.dtype or t.device != first.device for t in leaves):
            return None
        shapes = tuple(tuple(t.shape) for t in leaves)
        return cls(names=tuple(tree), shapes=shapes, sizes=tuple(math.prod(s) for s in shapes),
                   dtype=first.dtype, device=first.device)

    @property
    def features(self) -> int:
        """d, the length of the flat vector."""
        return sum(self.sizes)

    def matches(self, tree: Any) -> bool:
        """Whether ``tree`` is a dict with this layout's names (in its order), dtype and
        device, its tensors shaped as the layout's (with any leading dimensions)."""
        if not isinstance(tree, dict) or tuple(tree) != self.names:
            return False
        for t, shape in zip(tree.values(), self.shapes, strict=True):
            if not isinstance(t, Tensor) or t.dtype != self.dtype or t.device != self.device \
                    or tuple(t.shape[t.ndim - len(shape):]) != shape:
                return False
        return True

    def flatten(self, tree: dict[str, Tensor], batch: int = 0) -> Tensor:
        """The vector(s) ``(*lead, d)`` of ``tree`` (each leaf ``(*lead, *shape)`` with
        ``batch`` leading dimensions): the common buffer, no copy, when the leaves are its
        views in this layout's order, else a concatenation."""
        leaves = [tree[n] for n in self.names]
        base = _common_buffer(leaves, self.shapes, self.dtype, batch)
        if base is not None:
            return base
        return torch.cat([t.reshape(*t.shape[:batch], -1) for t in leaves], dim=-1)

    def lead(self, tree: dict[str, Tensor]) -> int:
        """How many leading dimensions ``tree``'s leaves have before this layout's shapes
        (0 for parameters; 1 for L2E's rolling means, each ``(6, *shape)``)."""
        return tree[self.names[0]].ndim - len(self.shapes[0])

    def views(self, flat: Tensor) -> dict[str, Tensor]:
        """The named tensors of ``flat`` (``(*lead, d)``), views where the layout allows
        (one split; a 1-D tensor is its part as it is)."""
        lead = flat.shape[:-1]
        parts = flat.split(self.sizes, dim=-1)
        if lead:
            return {n: p.reshape((*lead, *s))
                    for n, p, s in zip(self.names, parts, self.shapes, strict=True)}
        return {n: p if len(s) == 1 else p.view(s)
                for n, p, s in zip(self.names, parts, self.shapes, strict=True)}


def _common_buffer(leaves: list[Tensor], shapes: tuple[tuple[int, ...], ...],
                   dtype: torch.dtype, batch: int = 0) -> Tensor | None:
    """The contiguous ``(*lead, d)`` buffer (``batch`` leading dimensions) whose consecutive
    column blocks, shaped ``(*lead, *shape)``, ``leaves`` are exactly (covering all of it),
    or None."""
    base = leaves[0]._base
    total = sum(math.prod(s) for s in shapes)
    if base is None or base.ndim != batch + 1 or base.shape[-1] != total \
            or base.dtype != dtype or not base.is_contiguous():
        return None
    lead, pointer, size = tuple(base.shape[:-1]), base.data_ptr(), base.element_size()
    for leaf, shape in zip(leaves, shapes, strict=True):
        want = (*base.stride()[:-1], *_contiguous_strides(shape))
        if leaf._base is not base or leaf.data_ptr() != pointer \
                or tuple(leaf.shape) != (*lead, *shape) \
                or any(n != 1 and a != b for n, a, b in zip(leaf.shape, leaf.stride(), want)):
            return None
        pointer += math.prod(shape) * size
    return base


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (a stride of a dimension of size 1
    does not matter)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _is_params(layout: FlatLayout) -> Any:
    return lambda node: isinstance(node, dict) and layout.matches(node)


def pack(layout: FlatLayout, state: Any) -> Any:
    """``state`` with every dict shaped like ``layout`` replaced by its flat vector, or
    ``(*lead, d)`` for leaves with leading dimensions (:meth:`FlatLayout.lead`)."""
    return tree_map(lambda node: layout.flatten(node, layout.lead(node))
                    if isinstance(node, dict) else node, state, is_leaf=_is_params(layout))


def unpack(layout: FlatLayout, like: Any, packed: Any) -> Any:
    """The inverse of :func:`pack`: ``packed``'s vectors back to named views, wherever
    ``like`` (a state of the same structure) has a dict and ``packed`` a tensor (where
    :func:`pack` put one: no dict is checked against the layout again)."""
    return tree_map(lambda node, value: layout.views(value)
                    if isinstance(node, dict) and isinstance(value, Tensor) else value,
                    like, packed, is_leaf=_is_dict)


def _is_dict(node: Any) -> bool:
    return isinstance(node, dict)


class FlatProblem:
    """A problem on R^d: ``value_and_score(θ (d,), batch) -> (value, score (d,))``.

    Wraps a problem whose parameters are a dict with ``layout``; every other attribute
    (``num_data``, ``temperature``, ``prior``, ...) is the wrapped problem's. A problem
    may offer an oracle on the flat vector itself, ``flat_oracle(names, sizes, shapes)``
    returning a callable or None (:meth:`bdlkit.BayesianModel.flat_oracle`: the module's
    own backward with θ's views as its parameters); otherwise the score is the problem's
    own on the views, concatenated.
    """

    def __init__(self, problem: Any, layout: FlatLayout) -> None:
        self.problem = problem
        self.layout = layout
        offer = getattr(problem, "flat_oracle", None)  # an optional capability
        self.oracle = offer(layout.names, layout.sizes, layout.shapes) if offer else None

    def __getattr__(self, name: str) -> Any:
        if name in ("problem", "layout", "oracle"):  # not yet set (copy, unpickling)
            raise AttributeError(name)
        return getattr(self.problem, name)

    def __repr__(self) -> str:
        return f"FlatProblem({self.problem!r}, d={self.layout.features})"

    @torch.compiler.disable  # a network's forward/backward runs eagerly in a compiled step
    def value_and_score(self, theta: Tensor, batch: Any) -> tuple[Tensor, Tensor]:
        if self.oracle is not None:
            return self.oracle(theta, batch)
        value, score = self.problem.value_and_score(self.layout.views(theta), batch)
        return value, self.layout.flatten(score)

    def log_prior(self, theta: Tensor) -> Tensor:
        return self.problem.log_prior(self.layout.views(theta))

    def init_params(self, generator: torch.Generator) -> Tensor:
        return self.layout.flatten(self.problem.init_params(generator))
