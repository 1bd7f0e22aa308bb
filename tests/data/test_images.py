"""Tests for the image loaders and the IDX reader (real files in shared/data)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from bdlkit.data.images import (
    load_cifar10,
    load_digits,
    load_mnist,
    load_notmnist,
    read_idx,
)

MNIST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.fixture(scope="module")
def mnist():
    return load_mnist(train_size=1000, seed=0)


def test_mnist_shapes_and_counts(mnist) -> None:
    assert mnist.task == "classification" and mnist.num_classes == 10
    assert mnist.x_train.shape == (1000, 1, 28, 28) and mnist.x_test.shape == (9000, 1, 28, 28)
    assert mnist.x_train.dtype == torch.float32 and mnist.y_train.dtype == torch.int64
    counts = torch.bincount(torch.cat([mnist.y_train, mnist.y_test]), minlength=10)
    assert counts.tolist() == MNIST_COUNTS
    assert abs(float(mnist.x_test.mean())) < 0.05 and abs(float(mnist.x_test.std()) - 1) < 0.05
    assert mnist.meta["split_seed"] == 0 and mnist.meta["train_size"] == 1000
    assert len(mnist.meta["files"]) == 2


def test_mnist_split_is_seeded_and_disjoint() -> None:
    raw = load_mnist(train_size=100, test_size=50, seed=3, normalize=False)
    again = load_mnist(train_size=100, test_size=50, seed=3, normalize=False)
    other = load_mnist(train_size=100, test_size=50, seed=4, normalize=False)
    assert raw.x_train.shape[0] == 100 and raw.x_test.shape[0] == 50
    assert torch.equal(raw.x_train, again.x_train)
    assert not torch.equal(raw.x_train, other.x_train)
    assert float(raw.x_train.min()) >= 0.0 and float(raw.x_train.max()) <= 1.0
    perm = torch.randperm(10000, generator=torch.Generator().manual_seed(3))
    images = read_idx(raw.meta["files"][0])
    expected = torch.from_numpy(images[perm[:100].numpy()]).float() / 255
    assert torch.allclose(raw.x_train[:, 0], expected)


@pytest.mark.parametrize("bad", [0, 10000, -5])
def test_mnist_bad_train_size(bad: int) -> None:
    with pytest.raises(ValueError, match="train_size"):
        load_mnist(train_size=bad)


def test_mnist_bad_test_size() -> None:
    with pytest.raises(ValueError, match="test_size"):
        load_mnist(train_size=9000, test_size=1001)


def test_notmnist() -> None:
    d = load_notmnist()
    assert d.x_train.shape == (0, 1, 28, 28) and d.y_train.shape == (0,)
    assert d.x_test.shape == (10000, 1, 28, 28) and d.input_shape == (1, 28, 28)
    assert torch.bincount(d.y_test).tolist() == [1000] * 10
    assert d.meta["ood_for"] == "mnist" and d.num_classes == 10
    # brighter than MNIST (README: mean ~109 vs ~34 in uint8)
    raw = load_notmnist(normalize=False)
    assert 0.35 < float(raw.x_test.mean()) < 0.5


def test_cifar10() -> None:
    d = load_cifar10(normalize=False)
    assert d.x_train.shape == (5000, 3, 32, 32) and d.x_test.shape == (10000, 3, 32, 32)
    assert d.x_train.dtype == torch.float32 and d.y_test.dtype == torch.int64
    assert torch.bincount(d.y_test).tolist() == [1000] * 10
    assert torch.bincount(d.y_train).tolist() == [500] * 10
    assert d.meta["class_names"][0] == "airplane" and d.meta["class_names"][9] == "truck"
    assert 0.0 <= float(d.x_test.min()) and float(d.x_test.max()) <= 1.0
    small = load_cifar10(train_size=100)
    assert small.x_train.shape == (100, 3, 32, 32) and len(set(small.y_train.tolist())) > 5
    means = small.x_test.mean(dim=(0, 2, 3))
    assert torch.all(means.abs() < 0.15)
    few = load_cifar10(train_size=100, test_size=300)  # the file is sorted by class
    assert few.x_test.shape == (300, 3, 32, 32) and torch.bincount(few.y_test).min() > 10
    assert torch.equal(few.x_train, small.x_train)  # the training subset is unchanged
    with pytest.raises(ValueError, match="test_size"):
        load_cifar10(test_size=0)


def test_digits() -> None:
    d = load_digits(test_fraction=0.3, seed=0)
    assert d.x_train.shape[1] == 64 and len(d.x_train) + len(d.x_test) == 1797
    assert d.x_train.dtype == torch.float32 and d.num_classes == 10
    assert torch.allclose(d.x_train.mean(0), torch.zeros(64), atol=1e-4)
    counts = torch.bincount(d.y_test, minlength=10)
    assert counts.min() >= 50  # stratified
    assert torch.equal(load_digits(seed=0).x_test, d.x_test)


def _write_idx(path: Path, magic: int, dims: tuple[int, ...], data: bytes) -> Path:
    header = struct.pack(f">i{len(dims)}i", magic, *dims)
    with gzip.open(path, "wb") as fh:
        fh.write(header + data)
    return path


def test_read_idx_roundtrip(tmp_path: Path) -> None:
    data = np.arange(2 * 3 * 4, dtype=np.uint8)
    arr = read_idx(_write_idx(tmp_path / "ok.gz", 2051, (2, 3, 4), data.tobytes()))
    assert arr.shape == (2, 3, 4) and arr.dtype == np.uint8
    assert np.array_equal(arr.ravel(), data)
    raw = tmp_path / "raw.idx"
    raw.write_bytes(struct.pack(">ii", 2049, 3) + bytes([1, 2, 3]))
    assert read_idx(raw).tolist() == [1, 2, 3]


def test_read_idx_errors(tmp_path: Path) -> None:
    bad_magic = _write_idx(tmp_path / "magic.gz", 1234, (1, 1, 1), b"\x00")
    with pytest.raises(ValueError, match="magic.gz.*magic"):
        read_idx(bad_magic)
    short = _write_idx(tmp_path / "short.gz", 2051, (2, 28, 28), b"\x00" * 100)
    with pytest.raises(ValueError, match="short.gz.*truncated"):
        read_idx(short)
    full = _write_idx(tmp_path / "full.gz", 2049, (1000,), b"\x01" * 1000).read_bytes()
    cut = tmp_path / "cut.gz"
    cut.write_bytes(full[: len(full) // 2])
    with pytest.raises(ValueError, match="cut.gz"):
        read_idx(cut)
    tiny = tmp_path / "tiny.gz"
    tiny.write_bytes(gzip.compress(b"\x00\x00"))
    with pytest.raises(ValueError, match="tiny.gz"):
        read_idx(tiny)
    with pytest.raises(FileNotFoundError):
        read_idx(tmp_path / "missing.gz")
