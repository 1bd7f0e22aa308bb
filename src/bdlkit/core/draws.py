"""Where a result's parameter draws come from, one class per source.

Every algorithm says how its draws are produced (``algorithm.draws(state, kept)``,
:mod:`bdlkit.core.protocol`), so :class:`bdlkit.Result` never asks what kind of method ran:

- :class:`KeptDraws`: a sampler's kept draws (a sample store, or stacked tensors);
- :class:`ApproximationDraws`: fresh draws of a variational approximation q;
- :class:`MemberDraws`: the members of a deep ensemble;
- :class:`PointDraws`: an optimiser's single point, repeated.

Each answers ``count`` (draws held), ``take(n, generator)`` (``n`` draws stacked along
dim 0), ``stream(num_samples, generator, chunk, max_draws)`` (single draws for the BMA) and
``stream_count(num_samples, max_draws)`` (how many draws that stream yields, known before any
is read: what an evaluation's progress bar and estimate count).

``max_draws`` (``None``: no cap) caps the draws of every source, so a long sampler run can be
evaluated on fewer draws: a sampler's kept draws are thinned to ``max_draws`` evenly spaced
ones (the last draw always among them, :func:`evenly_spaced`), an ensemble gives its first
``max_draws`` members and a VI approximation ``min(num_samples, max_draws)`` draws.
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


def _draw_major(shard: TensorTree) -> TensorTree:
    """A Target's ``(k, chains, d)`` shard as ``(k * chains, d)`` draws, as :meth:`KeptDraws.take`
    orders them (so a stream yields :attr:`KeptDraws.count` single draws)."""
    return shard.reshape(-1, shard.shape[-1]) if isinstance(shard, Tensor) else shard


def _capped(count: int, max_draws: int | None) -> int:
    if max_draws is not None and max_draws < 1:
        raise ValueError(f"max_draws must be >= 1 (or None for all draws), got {max_draws}")
    return count if max_draws is None else min(count, max_draws)


def evenly_spaced(count: int, n: int) -> list[int]:
    """``n`` of the indices ``0..count-1``, evenly spaced, ascending, ending at ``count - 1``
    (the chain's last draw): every ``count / n``-th draw counted back from the end, so
    ``n = count`` is every draw and ``n = count / k`` is a thinning by ``k``.

    Args:
        count: how many draws there are.
        n: how many to pick, ``1 <= n <= count``.
    """
    if not 1 <= n <= count:
        raise ValueError(f"cannot pick {n} of {count} draws")
    return sorted(count - 1 - (i * count) // n for i in range(n))


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

    def stream_count(self, num_samples: int, max_draws: int | None = None) -> int:
        return _capped(self.count, max_draws)

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16, max_draws: int | None = None) -> Iterator[TensorTree]:
        """Every kept draw (a disk store shard by shard; a Target's chains flattened
        draw-major), or ``max_draws`` evenly spaced ones (:func:`evenly_spaced`);
        ``num_samples`` is not used."""
        n = self.stream_count(num_samples, max_draws)
        if self.store is None:
            self.require()
            everything = self.take(self.count)
            return _singles(everything if n == self.count
                            else index(everything, torch.tensor(evenly_spaced(self.count, n))))
        if not len(self.store):
            self.require()
        draws = (d for shard in self.store.iter_chunks() for d in _singles(_draw_major(shard)))
        if n == self.count:
            return draws
        picked = set(evenly_spaced(self.count, n))
        return (d for i, d in enumerate(draws) if i in picked)


@dataclass(frozen=True)
class ApproximationDraws:
    """Fresh draws of a variational approximation ``q`` (``sample(n, generator)``)."""

    approximation: Any
    count = 0

    def take(self, n: int, generator: torch.Generator) -> TensorTree:
        return self.approximation.sample(n, generator)

    def stream_count(self, num_samples: int, max_draws: int | None = None) -> int:
        return _capped(num_samples, max_draws)

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16, max_draws: int | None = None) -> Iterator[TensorTree]:
        """``min(num_samples, max_draws)`` draws, made ``chunk`` at a time."""
        total = self.stream_count(num_samples, max_draws)

        def gen() -> Iterator[TensorTree]:
            for start in range(0, total, chunk):
                yield from _singles(self.take(min(chunk, total - start), generator))

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

    def stream_count(self, num_samples: int, max_draws: int | None = None) -> int:
        return _capped(self.count, max_draws)

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16, max_draws: int | None = None) -> Iterator[TensorTree]:
        """Every member, or the first ``max_draws``; ``num_samples`` is not used."""
        n = self.stream_count(num_samples, max_draws)
        return _singles(self.members if n == self.count else self.take(n))


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

    def stream_count(self, num_samples: int, max_draws: int | None = None) -> int:
        return _capped(1, max_draws)

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16, max_draws: int | None = None) -> Iterator[TensorTree]:
        """The point, once."""
        self.stream_count(num_samples, max_draws)  # checks max_draws
        return iter([self.point])


@dataclass(frozen=True)
class NoDraws:
    """A result without a source of draws (loaded without its problem, nothing kept)."""

    reason: str
    count = 0

    def take(self, n: int, generator: torch.Generator | None = None) -> TensorTree:
        raise ValueError(self.reason)

    def stream_count(self, num_samples: int, max_draws: int | None = None) -> int:
        raise ValueError(self.reason)

    def stream(self, num_samples: int, generator: torch.Generator,
               chunk: int = 16, max_draws: int | None = None) -> Iterator[TensorTree]:
        raise ValueError(self.reason)


Draws = KeptDraws | ApproximationDraws | MemberDraws | PointDraws | NoDraws
