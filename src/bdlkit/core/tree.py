"""Pytree utilities on top of optree, and frozen dataclass states.

Parameters in bdlkit are pytrees of tensors (a single tensor for a
:class:`~bdlkit.problems.target.Target`, a ``dict[str, Tensor]`` for a network). Algorithms
manipulate them only through these few functions, so every algorithm works for both.

``pytree_dataclass`` turns a class into a frozen dataclass registered with optree
(namespace ``"bdlkit"``), so states can be flattened for checkpoints, mapped over
and compared leaf by leaf.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import optree
import torch
from torch import Tensor

from bdlkit.core import noise, rng

TensorTree = Any  # a pytree whose leaves are tensors
NAMESPACE = "bdlkit"
T = TypeVar("T")


def pytree_dataclass(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen dataclass and register it as an optree node.

    Every field is a child of the node, so ``tree_flatten(state)`` yields all the
    tensors (and Python scalars) the state holds.
    """
    cls = dataclasses.dataclass(frozen=True)(cls)
    names = tuple(f.name for f in dataclasses.fields(cls))

    def flatten(obj: Any) -> tuple[tuple[Any, ...], None, tuple[str, ...]]:
        return tuple(getattr(obj, n) for n in names), None, names

    def unflatten(_: None, children: tuple[Any, ...]) -> Any:
        return cls(**dict(zip(names, children)))

    optree.register_pytree_node(cls, flatten, unflatten, namespace=NAMESPACE)
    return cls


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any,
             is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """``optree.tree_map`` in bdlkit's namespace (``None`` is a leaf-less node; ``is_leaf``
    stops at the subtrees it accepts). A tensor (a Target's θ) is its own only leaf."""
    if isinstance(tree, Tensor):  # the same call, without optree's flatten and unflatten
        return fn(tree, *rest)
    return optree.tree_map(fn, tree, *rest, is_leaf=is_leaf, namespace=NAMESPACE)


def tree_leaves(tree: Any) -> list[Any]:
    return optree.tree_leaves(tree, namespace=NAMESPACE)


def tree_flatten_with_path(tree: Any) -> tuple[list[str], list[Any], Any]:
    """Leaves with dotted string paths (for file keys) and the treespec."""
    paths, leaves, spec = optree.tree_flatten_with_path(tree, namespace=NAMESPACE)
    return [".".join(str(p) for p in path) for path in paths], leaves, spec


def tree_unflatten(spec: Any, leaves: list[Any]) -> Any:
    return optree.tree_unflatten(spec, leaves)


def randn_like(tree: TensorTree, generator: torch.Generator | rng.NoiseTape,
               n: int | None = None) -> TensorTree:
    """Standard normal noise with the structure, shapes and dtypes of ``tree`` (with a new
    leading dimension of ``n`` draws when ``n`` is given).

    A dict of tensors of one dtype and device is drawn as *one* vector of all its values
    (in the dict's order) and split: one generator call per step, and the same numbers
    whether the parameters are a dict or the flat vector of :mod:`bdlkit.core.flat`. A
    draw of more than 65 536 values on the CPU is drawn in fixed chunks
    (:func:`bdlkit.core.noise.standard_normal`: the same numbers at any thread count).
    ``generator`` may be a :class:`~bdlkit.core.rng.NoiseTape` (a compiled chunk).
    """
    lead = () if n is None else (n,)
    if isinstance(tree, dict) and len(tree) > 1 and _uniform(tree.values()):
        first = next(iter(tree.values()))
        sizes = [t.numel() for t in tree.values()]
        z = noise.standard_normal((*lead, sum(sizes)), generator, first.dtype, first.device)
        return {k: part.reshape((*lead, *t.shape))
                for (k, t), part in zip(tree.items(), z.split(sizes, dim=-1), strict=True)}
    return tree_map(lambda t: noise.standard_normal((*lead, *t.shape), generator, t.dtype,
                                                    t.device), tree)


def _uniform(leaves: Any) -> bool:
    """Tensors all of one floating dtype and one device."""
    leaves = list(leaves)
    return all(isinstance(t, Tensor) for t in leaves) and leaves[0].dtype.is_floating_point \
        and all(t.dtype == leaves[0].dtype and t.device == leaves[0].device for t in leaves)


def zeros_like(tree: TensorTree) -> TensorTree:
    return tree_map(torch.zeros_like, tree)


def detach_clone(tree: TensorTree) -> TensorTree:
    return tree_map(lambda t: t.detach().clone(), tree)


def all_finite(tree: TensorTree) -> bool:
    """True if every floating leaf is free of NaN and inf (one host sync)."""
    flags = [torch.isfinite(t).all() for t in tree_leaves(tree) if torch.is_floating_point(t)]
    return bool(torch.stack(flags).all()) if flags else True


def max_abs(tree: TensorTree) -> float:
    """The largest ``abs(value)`` over the floating leaves (inf when any is NaN; 0 for none)."""
    values = [t.detach().abs().max() for t in tree_leaves(tree)
              if torch.is_floating_point(t) and t.numel()]
    if not values:
        return 0.0
    big = float(torch.stack([v.to(torch.float64).cpu() for v in values]).max())
    return float("inf") if big != big else big


def device_of(tree: TensorTree) -> torch.device:
    """Device of the first leaf (CPU for an empty tree)."""
    if isinstance(tree, Tensor):
        return tree.device
    leaves = tree_leaves(tree)
    return leaves[0].device if leaves else torch.device("cpu")


def stack(trees: list[TensorTree]) -> TensorTree:
    """Stack a list of same-shaped trees along a new leading axis."""
    return tree_map(lambda *ts: torch.stack(ts), trees[0], *trees[1:])


def num_draws(stacked: TensorTree) -> int:
    """The leading (draw) dimension of a stacked tree."""
    return tree_leaves(stacked)[0].shape[0]


def index(tree: TensorTree, i: int | slice | Tensor) -> TensorTree:
    """Index every leaf along its leading axis."""
    return tree_map(lambda t: t[i], tree)


def unzip(out: Any, n: int) -> tuple[TensorTree, ...]:
    """Split the result of ``tree_map`` with a function returning ``n``-tuples into ``n``
    trees (a tensor state's tuple is returned as it is)."""
    if isinstance(out, tuple):
        return out
    return tuple({k: v[i] for k, v in out.items()} for i in range(n))


def unzip_pairs(pairs: Any) -> tuple[TensorTree, TensorTree]:
    """Split the result of ``tree_map`` with a function returning pairs into two trees."""
    return unzip(pairs, 2)  # type: ignore[return-value]
