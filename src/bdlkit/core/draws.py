"""Where a result's parameter draws come from, one class per source.

Every algorithm says how its draws are produced (``algorithm.draws(state, kept)``,
:mod:`bdlkit.core.protocol`), so :class:`bdlkit.Result` never asks what kind of method ran:

- :class:`KeptDraws`: a sampler's kept draws (a sample store, or stacked tensors);
- :class:`ApproximationDraws`: fresh draws of a variational approximation q;
- :class:`MemberDraws`: the members of a deep ensemble;
- :class:`PointDraws`: an optimiser's single point, repeated.

Each answers ``count`` (draws held), ``take(n, generator)`` (``n`` draws stacked along
dim 0) and ``stream(num_samples, generator, chunk)`` (single draws for the BMA).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.tree import TensorTree, index, num_draws, tree_map


def _singles(draws: TensorTree) -> Iterator[TensorTree]:
    return (index(draws, s) for s in range(num_draws(draws)))


@dataclass(frozen=True)
class KeptDraws:
    """A sampler's kept draws: a :class:`~bdlkit.engine.collect.SampleStore`, stacked tensors
    (a Target's ``(K, [chains,] d)`` or a dict of ``(K, ...)``), or nothing kept."""

    kept: Any  # SampleStore | TensorTree | None
    load: Callable[[], TensorTree | None] | None = None  # a store's draws, loaded once

    @property
    def store(self) -> Any:
        return None if self.kept is None or isinstance(self.kept, (Tensor, dict)) else self.kept

    def stacked(self) -> TensorTree | None:
        """All kept draws stacked along dim 0 (``None`` when nothing was kept)."""
        if self.store is not None:
            if not len(self.store):
                return None
            return self.load() if self.load is not None else self.store.load()
        return self.kept

    @property
    def count(self) -> int:
        """Kept draws, counting each chain of a Target's ``(chains, d)`` draws."""
        if self.store is not None:
            if self.store.structure == "tensor":
                shape = next(iter(self.store.shapes.values()))
                return len(self.store) * (shape[0] if len(shape) == 2 else 1)
            return len(self.store)
        if self.kept is None:
            return 0
        if isinstance(self.kept, dict):
            return num_draws(self.kept)
        return self.kept.shape[0] * (self.kept.shape[1] if self.kept.ndim == 3 else 1)

    def take(self, n: int, generator: torch.Generator | None = None) -> TensorTree:
        """The last ``n`` kept draws (a Target's chains flattened draw-major)."""
        stacked = self.require()
        if n > self.count:
            raise ValueError(
                f"asked for {n} samples but only {self.count} were kept; run more steps, lower "
                "thin or burnin, or use more chains"
            )
        if isinstance(stacked, Tensor):  # Target: (K, [c,] d) -> (K*c, d), draw-major
            return stacked.reshape(-1, stacked.shape[-1])[-n:]
        return index(stacked, slice(-n, None))

    def require(self) -> TensorTree:
        stacked = self.stacked()
        if stacked is None:
            raise ValueError("no samples were kept: increase steps or lower burnin/thin")
        return stacked

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16) -> Iterator[TensorTree]:
        """Every kept draw (a disk store shard by shard); ``num_samples`` is not used."""
        if self.store is None:
            self.require()
            return _singles(self.take(self.count))
        if not len(self.store):
            self.require()
        return (d for draws in self.store.iter_chunks() for d in _singles(draws))


@dataclass(frozen=True)
class ApproximationDraws:
    """Fresh draws of a variational approximation ``q`` (``sample(n, generator)``)."""

    approximation: Any
    count = 0

    def take(self, n: int, generator: torch.Generator) -> TensorTree:
        return self.approximation.sample(n, generator)

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16) -> Iterator[TensorTree]:
        """``num_samples`` draws, made ``chunk`` at a time."""
        def gen() -> Iterator[TensorTree]:
            for start in range(0, num_samples, chunk):
                yield from _singles(self.take(min(chunk, num_samples - start), generator))

        return gen()


@dataclass(frozen=True)
class MemberDraws:
    """The members of a deep ensemble, stacked along dim 0."""

    members: TensorTree

    @property
    def count(self) -> int:
        return num_draws(self.members)

    def take(self, n: int, generator: torch.Generator | None = None) -> TensorTree:
        if n > self.count:
            raise ValueError(f"asked for {n} samples but the ensemble has M={self.count} "
                             "members; train more (members=)")
        return index(self.members, slice(0, n))

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16) -> Iterator[TensorTree]:
        """Every member; ``num_samples`` is not used."""
        return _singles(self.members)


@dataclass(frozen=True)
class PointDraws:
    """An optimiser's point estimate (a Target optimised in chains: one point per chain)."""

    point: TensorTree
    count = 0

    def take(self, n: int, generator: torch.Generator | None = None) -> TensorTree:
        point = self.point
        if isinstance(point, Tensor) and point.ndim == 2:  # a Target optimised in chains
            return point.repeat((n + len(point) - 1) // len(point), 1)[:n]
        return tree_map(lambda t: t.unsqueeze(0).expand(n, *t.shape), point)

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16) -> Iterator[TensorTree]:
        """The point, once."""
        return iter([self.point])


@dataclass(frozen=True)
class NoDraws:
    """A result without a source of draws (loaded without its problem, nothing kept)."""

    reason: str
    count = 0

    def take(self, n: int, generator: torch.Generator | None = None) -> TensorTree:
        raise ValueError(self.reason)

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16) -> Iterator[TensorTree]:
        raise ValueError(self.reason)


Draws = KeptDraws | ApproximationDraws | MemberDraws | PointDraws | NoDraws
