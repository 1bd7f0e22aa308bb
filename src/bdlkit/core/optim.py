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

import math
from dataclasses import dataclass

import torch

from bdlkit.core.tree import TensorTree, pytree_dataclass, tree_map, zeros_like


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
        self, grads: TensorTree, state: SGDState, params: TensorTree, lr: float
    ) -> tuple[TensorTree, SGDState]:
        """``params + update(...)`` fused (module docstring)."""
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
        self, grads: TensorTree, state: AdamState, params: TensorTree, lr: float
    ) -> tuple[TensorTree, AdamState]:
        """``params + update(...)`` fused (module docstring); the bias corrections are
        Python floats (the count is a CPU scalar), so no tiny tensor operations."""
        count = state.count + 1
        n = float(count)
        c1, c2 = 1 - self.b1**n, 1 - self.b2**n
        b1, b2, eps, root = self.b1, self.b2, self.eps, math.sqrt(c2)
        mu = tree_map(lambda m, g: torch.mul(m, b1).add_(g, alpha=1 - b1), state.mu, grads)
        nu = tree_map(lambda v, g: torch.mul(v, b2).addcmul_(g, g, value=1 - b2), state.nu,
                      grads)
        new = tree_map(lambda p, m, v: torch.addcdiv(p, m, v.sqrt().div_(root).add_(eps),
                                                     value=-lr / c1), params, mu, nu)
        return new, AdamState(count=count, mu=mu, nu=nu)


def make_optimizer(name: str, **kwargs) -> SGD | Adam:
    table = {"sgd": SGD, "adam": Adam}
    if name not in table:
        raise ValueError(f"unknown optimizer {name!r}; valid: {sorted(table)}")
    return table[name](**kwargs)
