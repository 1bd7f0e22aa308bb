"""The meta-training task distribution of ``bdlkit meta-train l2e`` (offline only).

L2E meta-trains on many small classification problems (``docs/l2e.md``, Tasks: CNNs of
width 4-16 and depth 1-5, plain or residual, on MNIST-like sets). bdlkit's CPU-sized
version draws one task per outer step, uniformly over these families:

* ``mnist-cnn``: the L2E CNN family (:class:`bdlkit.models.ConvNet`, width {4, 8}, depth
  {1, 2}, residual or not) on the *training part* of bdlkit's MNIST split
  (``load_mnist(train_size=5000, seed=0)``), average-pooled to 14x14 for speed;
* ``mnist1d-mlp``: MLPs (1-2 hidden layers of 16, 32 or 64 ReLU units) on MNIST-1D
  (Greydanus 2020), generated offline by the ``mnist1d`` package (optional: the family
  is left out when the package is missing);
* ``teacher-mlp``: teacher-student tasks, inputs N(0, I) of dimension {8, 16, 32}, labels
  sampled from a random two-layer teacher's softmax (2-10 classes), the same student MLPs.

Kept out, because ``bdlkit bench l2e`` evaluates on them: digits (the task with an HMC
reference), CIFAR-10 and ResNets, MNIST test images, and MLPs on MNIST. Each task splits
its data as learned_optimization does: the first 80% for the inner loop, the last 10% as
``outer_valid`` for the meta-loss.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from bdlkit.data import load_mnist
from bdlkit.models import MLP, ConvNet

FAMILIES = ("mnist-cnn", "mnist1d-mlp", "teacher-mlp")
HIDDEN_CHOICES = ((16,), (32,), (64,), (16, 16), (32, 32), (64, 64))


@dataclass(frozen=True)
class Task:
    """One meta-training problem: a network and its inner-training / outer-valid data."""

    name: str
    module: nn.Module
    x_train: Tensor
    y_train: Tensor
    x_valid: Tensor
    y_valid: Tensor
    num_classes: int

    @property
    def num_data(self) -> int:
        return len(self.y_train)


def _split(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    n = len(y)
    return x[: int(0.8 * n)], y[: int(0.8 * n)], x[int(0.9 * n):], y[int(0.9 * n):]


@functools.lru_cache(maxsize=1)
def _mnist_train(data_root: str | None) -> tuple[Tensor, Tensor]:
    ds = load_mnist(data_root, train_size=5000, seed=0)
    x = F.avg_pool2d(ds.x_train, 2)  # (5000, 1, 14, 14)
    return x, ds.y_train


@functools.lru_cache(maxsize=1)
def _mnist1d() -> tuple[Tensor, Tensor]:
    from mnist1d.data import get_dataset_args, make_dataset

    state = np.random.get_state()  # make_dataset seeds numpy's global generator
    try:
        data = make_dataset(get_dataset_args())
    finally:
        np.random.set_state(state)
    x = np.concatenate([data["x"], data["x_test"]]).astype(np.float32)
    y = np.concatenate([data["y"], data["y_test"]]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def available_families() -> tuple[str, ...]:
    try:
        import mnist1d  # noqa: F401
    except ImportError:
        return tuple(f for f in FAMILIES if f != "mnist1d-mlp")
    return FAMILIES


def _teacher_data(rnd: random.Random, gen: torch.Generator) -> tuple[Tensor, Tensor, int, str]:
    dim, classes = rnd.choice((8, 16, 32)), rnd.choice((2, 3, 5, 10))
    n = 2500
    x = torch.randn(n, dim, generator=gen)
    w1 = torch.randn(dim, 32, generator=gen) / math.sqrt(dim)
    w2 = torch.randn(32, classes, generator=gen) * (3.0 / math.sqrt(32))
    logits = torch.tanh(x @ w1) @ w2
    y = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=gen).squeeze(1)
    return x, y, classes, f"d{dim}-k{classes}"


def sample_task(seed: int, families: tuple[str, ...] | None = None,
                data_root: str | None = None) -> Task:
    """The task of one outer step, a deterministic function of ``seed``."""
    rnd = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    family = rnd.choice(families or available_families())
    if family == "mnist-cnn":
        x, y = _mnist_train(data_root)
        width, depth, residual = rnd.choice((4, 8)), rnd.choice((1, 2)), rnd.random() < 0.5
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = ConvNet(in_shape=(1, 14, 14), num_classes=10, width=width, depth=depth,
                             residual=residual, init="haiku")
        perm = torch.randperm(len(y), generator=gen)
        name = f"mnist-cnn-w{width}-d{depth}{'-res' if residual else ''}"
        return Task(name, module, *_split(x[perm], y[perm]), num_classes=10)
    hidden = rnd.choice(HIDDEN_CHOICES)
    if family == "mnist1d-mlp":
        x, y = _mnist1d()
        perm = torch.randperm(len(y), generator=gen)
        x, y, classes, tag = x[perm], y[perm], 10, "mnist1d"
    elif family == "teacher-mlp":
        x, y, classes, tag = _teacher_data(rnd, gen)
    else:
        raise ValueError(f"unknown task family {family!r}; valid: {FAMILIES}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = MLP(x.shape[1], classes, hidden=hidden)
    name = f"{family}-{tag}-h{'x'.join(map(str, hidden))}"
    return Task(name, module, *_split(x, y), num_classes=classes)


__all__ = ["FAMILIES", "Task", "available_families", "sample_task"]
