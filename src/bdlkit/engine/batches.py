"""Minibatches as a function of the step number, so that data order survives a restart.

For tensor data (a :class:`~bdlkit.data.Dataset` or ``(x, y)``) the batch of global
step ``t`` (0-based) is::

    e = t // B,  i = t mod B,  perm_e = randperm(n; seed = fold_in(seed, e)),
    batch_t = rows perm_e[i·b : (i+1)·b]

with ``B = ceil(n / b)`` batches per epoch (the last one may be smaller); a batch of all
n rows is the data itself, in its stored order, every step. No generator
state has to be checkpointed: resuming at step ``t`` only needs ``t``. A user
``DataLoader`` is iterated as it is; on resume its current epoch is replayed up to
the resume point, which reproduces the order exactly when the loader does not
shuffle or shuffles with its own ``generator=`` (whose state at the start of each
epoch is checkpointed through :meth:`Batches.state_dict`).

Batches go where the model is (the problem's ``device``, e.g. after ``infer(...,
device="cuda")``): tensor data is moved there once, when the Batches are built (the
permutations are drawn on the CPU, as before, so the data order does not depend on the
device), and each DataLoader batch as it is drawn. On the data's own device nothing is
copied.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, RandomSampler

from bdlkit.core import rng
from bdlkit.core.protocol import Batch, Problem
from bdlkit.problems import Target


class Batches:
    """``batches(t)`` is the minibatch of step ``t`` (``None`` for a Target)."""

    def __init__(self, problem: Problem, data: Any, batch_size: int, seed: int,
                 shard: tuple[int, int] = (0, 1)) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.seed = int(seed)
        self.shard = shard
        self.device: torch.device | None = getattr(problem, "device", None)
        self.loader: DataLoader | None = None
        self.x = self.y = None
        if isinstance(problem, Target) or data is None:
            self.per_epoch = 1
        elif isinstance(data, DataLoader):
            if shard[1] > 1:
                raise ValueError("data-parallel runs split tensor data themselves; pass a "
                                 "Dataset or (x, y) tensors, not a DataLoader")
            self.loader = data
            self.per_epoch = len(data)
            self._iter: Iterator | None = None
            self._next_t = 0
            self._epoch_gen_state: Tensor | None = None
            self._resume_state: Tensor | None = None
        else:
            self.x, self.y = (self._placed(t) for t in tensors_of(data))
            n = len(self.x)
            if n < shard[1]:
                raise ValueError(f"{n} training rows cannot be split over {shard[1]} "
                                 "data-parallel ranks: use fewer processes")
            self.size = min(batch_size, n)
            self.per_epoch = math.ceil(n / self.size)
            self._epoch = -1
            self._perm: Tensor | None = None

    def use_every_row(self, needed_by: str, batch_size: int) -> int:
        """Make every step's batch all the rows (``needed_by`` takes full-batch gradients,
        in place); returns the step's rows (``batch_size`` where they are not known: a
        Target)."""
        if self.loader is not None and self.per_epoch != 1:
            raise ValueError(
                f"{needed_by} needs full-batch gradients but the DataLoader yields "
                f"{self.per_epoch} batches per epoch; pass the data as a Dataset or "
                "(x, y) tensors, or a DataLoader with one batch"
            )
        rows = self.num_rows
        if rows is None:
            return batch_size
        if self.x is not None:
            self.size, self.per_epoch, self._epoch = rows, 1, -1
        return rows

    @property
    def num_rows(self) -> int | None:
        if self.x is not None:
            return len(self.x)
        if self.loader is not None and hasattr(self.loader, "dataset"):
            return len(self.loader.dataset)
        return None

    def __call__(self, t: int) -> Batch:
        if self.loader is not None:
            return self._from_loader(t)
        if self.x is None:
            return None
        if self.size == len(self.x):  # full batch: the same tensors every step (no copy)
            return self._part(self.x), self._part(self.y)
        epoch, i = divmod(t, self.per_epoch)
        if epoch != self._epoch:
            gen = rng.generator(rng.fold_in(self.seed, epoch))
            self._perm = torch.randperm(len(self.x), generator=gen).to(self.x.device)
            self._epoch = epoch
        idx = self._part(self._perm[i * self.size : (i + 1) * self.size])
        return self.x[idx], self.y[idx]

    def _part(self, t: Tensor) -> Tensor:
        """This rank's piece of the global batch ``t`` (itself alone)."""
        index, count = self.shard
        return t if count == 1 else t.tensor_split(count)[index]

    def num_steps(self, steps: int | None = None, epochs: int | None = None) -> int:
        """Total steps of a run of ``steps=`` or ``epochs=`` passes (exactly one)."""
        if (steps is None) == (epochs is None):
            raise ValueError("give exactly one of steps= or epochs=")
        if steps is not None:
            if steps < 1:
                raise ValueError(f"steps must be >= 1, got {steps}")
            return int(steps)
        if self.x is None and self.loader is None:
            raise ValueError("epochs= needs data; a Target has none: use steps=")
        if epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {epochs}")
        return int(epochs) * self.per_epoch

    # ------------------------------------------------------------------ DataLoader
    def _from_loader(self, t: int) -> Batch:
        assert self.loader is not None
        if self._iter is None or t != self._next_t:
            self._start_at(t)
        elif t % self.per_epoch == 0:
            self._new_epoch()
        batch = next(self._iter)
        self._next_t = t + 1
        return self._placed(batch[0]), self._placed(batch[1])

    def _placed(self, t: Any) -> Any:
        """``t`` on the model's device (itself, not a copy, when it is there already)."""
        if self.device is None or not isinstance(t, Tensor):
            return t
        return t.to(self.device)

    def _new_epoch(self) -> None:
        gen = self.loader.generator
        self._epoch_gen_state = gen.get_state() if gen is not None else None
        self._iter = iter(self.loader)

    def _start_at(self, t: int) -> None:
        gen = self.loader.generator
        if self._resume_state is not None and gen is not None:
            gen.set_state(self._resume_state)
        elif t and isinstance(self.loader.sampler, RandomSampler):
            warnings.warn(
                "resuming a run whose shuffling DataLoader has no generator=: the data order "
                "after the resume point differs from an uninterrupted run; pass "
                "DataLoader(..., generator=torch.Generator().manual_seed(s)) for exact resumes",
                stacklevel=4,
            )
        self._new_epoch()
        for _ in range(t % self.per_epoch):
            next(self._iter)

    def state_dict(self, next_step: int) -> dict[str, Tensor]:
        """Tensors needed to replay the data order from ``next_step`` on.

        Only a DataLoader with its own generator has any: the generator's state at the
        start of the epoch that contains ``next_step``.
        """
        gen = self.loader.generator if self.loader is not None else None
        if gen is None:
            return {}
        at_boundary = next_step % self.per_epoch == 0 or self._epoch_gen_state is None
        return {"loader_generator": gen.get_state() if at_boundary else self._epoch_gen_state}

    def load_state_dict(self, tensors: dict[str, Tensor]) -> None:
        if self.loader is not None:
            self._resume_state = tensors.get("loader_generator")
            self._iter = None  # the next call replays the epoch up to the resume step


def tensors_of(data: Any) -> tuple[Tensor, Tensor]:
    """``(x, y)`` training tensors of a Dataset or an ``(x, y)`` pair."""
    if hasattr(data, "x_train"):
        return data.x_train, data.y_train
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data[0], data[1]
    raise TypeError(
        f"data must be a bdlkit Dataset, an (x, y) pair of tensors or a DataLoader, got "
        f"{type(data).__name__}"
    )
