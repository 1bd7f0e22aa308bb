"""Small functional optimisers on pytrees (SGD with momentum, Adam).

Written by hand because bdlkit's states must be immutable pytrees that flatten
into checkpoints: ``torch.optim`` keeps mutable per-parameter state inside the
optimiser object, and ``torchopt`` (the functional alternative) is unmaintained
since 2023. Each optimiser is a pair
``init(params) -> opt_state`` and ``update(grads, opt_state, params, lr) ->
(updates, opt_state)``; apply with ``params + updates`` (optax convention).
``apply(grads, opt_state, params, lr) -> (new_params, opt_state)`` is the same step with
the addition fused in: every new tensor is allocated once and finished in place (the
inputs are never modified), which is what the element-wise methods call each step.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import optree
import torch
from torch import Tensor

from bdlkit.core.tree import (
    NAMESPACE,
    TensorTree,
    pytree_dataclass,
    tree_leaves,
    tree_map,
    zeros_like,
)


@pytree_dataclass
class SGDState:
    momentum: TensorTree


@pytree_dataclass
class AdamState:
    count: torch.Tensor
    mu: TensorTree
    nu: TensorTree


@dataclass(frozen=True)
class SGD:
    """``v ← m·v + g``; ``update = -lr·v`` (plain SGD when ``momentum = 0``)."""

    momentum: float = 0.0

    def init(self, params: TensorTree) -> SGDState:
        return SGDState(momentum=zeros_like(params))

    def update(
        self, grads: TensorTree, state: SGDState, params: TensorTree, lr: float
    ) -> tuple[TensorTree, SGDState]:
        buf = tree_map(lambda v, g: self.momentum * v + g, state.momentum, grads)
        return tree_map(lambda v: -lr * v, buf), SGDState(momentum=buf)

    def apply(
        self, grads: TensorTree, state: SGDState, params: TensorTree, lr: float,
        fused: bool = False,
    ) -> tuple[TensorTree, SGDState]:
        """``params + update(...)`` fused (module docstring): three passes per tensor
        (``fused`` is Adam's option; SGD's step is these three either way)."""
        buf = tree_map(lambda v, g: torch.mul(v, self.momentum).add_(g), state.momentum, grads)
        return tree_map(lambda p, v: torch.add(p, v, alpha=-lr), params, buf), \
            SGDState(momentum=buf)


@dataclass(frozen=True)
class Adam:
    """Adam (Kingma & Ba 2015) with bias correction; ``update = -lr·m̂/(√v̂ + eps)``."""

    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8

    def init(self, params: TensorTree) -> AdamState:
        return AdamState(
            count=torch.zeros((), dtype=torch.float64), mu=zeros_like(params), nu=zeros_like(params)
        )

    def update(
        self, grads: TensorTree, state: AdamState, params: TensorTree, lr: float
    ) -> tuple[TensorTree, AdamState]:
        count = state.count + 1
        mu = tree_map(lambda m, g: self.b1 * m + (1 - self.b1) * g, state.mu, grads)
        nu = tree_map(lambda v, g: self.b2 * v + (1 - self.b2) * g * g, state.nu, grads)
        c1 = 1 - self.b1**count  # tensors: no host sync
        c2 = 1 - self.b2**count
        # back to m's dtype: a 0-dim parameter (a learned log σ) would be promoted to the
        # float64 of the 0-dim bias corrections, and its checkpoint would not load
        updates = tree_map(lambda m, v: (-lr * (m / c1) / ((v / c2).sqrt() + self.eps)).to(
            m.dtype), mu, nu)
        return updates, AdamState(count=count, mu=mu, nu=nu)

    def apply(
        self, grads: TensorTree, state: AdamState, params: TensorTree, lr: float,
        fused: bool = False,
    ) -> tuple[TensorTree, AdamState]:
        """``params + update(...)`` fused (module docstring); the bias corrections are
        Python floats (the count is a CPU scalar), so no tiny tensor operations.

        ``fused=True`` (the VI steps): the new λ, m and v are copies of the old ones
        finished in place by torch's fused Adam kernel (``torch.optim.Adam(...,
        fused=True)``'s), one pass over all the tensors of a dtype and device instead of
        seven. Its rounding depends on where a value sits in its tensor (the kernel's
        vector body or its tail), so a stack of members would not reproduce each member
        bit for bit, as the element-wise operations of the default do. Where torch has no
        such kernel (torch < 2.4 on the CPU, other devices) and inside a compiled graph
        (whose compiler fuses the element-wise operations itself) it is the default's."""
        count = state.count + 1
        n = float(count)
        if fused and not torch.compiler.is_compiling():
            leaves, spec = optree.tree_flatten(params, namespace=NAMESPACE)
            if all(t.device.type in _FUSED_DEVICES for t in leaves):
                new, mu, nu = ([t.clone() for t in tree_leaves(tree)]
                               for tree in (params, state.mu, state.nu))
                self._fused(new, tree_leaves(grads), mu, nu, n, lr)
                unflatten = functools.partial(optree.tree_unflatten, spec)
                return unflatten(new), AdamState(count=count, mu=unflatten(mu),
                                                 nu=unflatten(nu))
        c1, c2 = 1 - self.b1**n, 1 - self.b2**n
        b1, b2, eps, root = self.b1, self.b2, self.eps, math.sqrt(c2)
        mu = tree_map(lambda m, g: torch.mul(m, b1).add_(g, alpha=1 - b1), state.mu, grads)
        nu = tree_map(lambda v, g: torch.mul(v, b2).addcmul_(g, g, value=1 - b2), state.nu,
                      grads)
        new = tree_map(lambda p, m, v: torch.addcdiv(p, m, v.sqrt().div_(root).add_(eps),
                                                     value=-lr / c1), params, mu, nu)
        return new, AdamState(count=count, mu=mu, nu=nu)

    def _fused(self, params: list[Tensor], grads: list[Tensor], mu: list[Tensor],
               nu: list[Tensor], n: float, lr: float) -> None:
        """torch's fused kernel on the copies, one call per (device, dtype)."""
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i, t in enumerate(params):
            groups.setdefault((t.device, t.dtype), []).append(i)
        for (device, _), index in groups.items():
            step = torch.full((), n, dtype=torch.float32, device=device)
            torch._fused_adam_(*([seq[i] for i in index] for seq in (params, grads, mu, nu)),
                               [], [step] * len(index), lr=lr, beta1=self.b1, beta2=self.b2,
                               weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)


#: The devices with torch's fused Adam kernel (the CPU's since torch 2.4).
_FUSED_DEVICES = ("cuda", "cpu") if tuple(
    int(x) for x in torch.__version__.split(".")[:2]) >= (2, 4) else ("cuda",)


def make_optimizer(name: str, **kwargs) -> SGD | Adam:
    table = {"sgd": SGD, "adam": Adam}
    if name not in table:
        raise ValueError(f"unknown optimizer {name!r}; valid: {sorted(table)}")
    return table[name](**kwargs)
