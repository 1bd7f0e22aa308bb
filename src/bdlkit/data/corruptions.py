"""Covariate-shift image corruptions at five severities (CIFAR-10-C / MNIST-C style).

Six of the corruptions of Hendrycks & Dietterich, "Benchmarking Neural Network Robustness
to Common Corruptions and Perturbations" (ICLR 2019; code ``hendrycks/robustness``,
``ImageNet-C/create_c/make_cifar_c.py``), written in numpy on batches of images in [0, 1]
``(n, C, H, W)``. For severity ``s`` the constant is ``c = table[name][s - 1]`` and, with
every result clipped to [0, 1]:

* ``gaussian_noise``: ``x + c * N(0, 1)``;
* ``shot_noise``: ``Poisson(c * x) / c`` (smaller ``c``, more noise);
* ``gaussian_blur``: separable Gaussian filter of standard deviation ``c`` pixels, per
  channel, truncated at ``4 c`` with edge replication (skimage/scipy defaults
  ``truncate=4``, ``mode="nearest"``);
* ``contrast``: ``(x - m) * c + m`` with ``m`` the per-image, per-channel mean;
* ``brightness``: add ``c`` to the HSV value ``V = max_channel(x)`` clipped to 1, keeping
  hue and saturation; for a fixed H and S, RGB is proportional to V, so this is
  ``x * min(V + c, 1) / V`` (and ``min(c, 1)`` grey where ``V = 0``); for one channel it is
  ``x + c``;
* ``pixelate``: resize to ``floor(c H) x floor(c W)`` with PIL's BOX rule (each source pixel
  contributes, with equal weight, to the one target pixel whose footprint holds its
  centre), then back to ``H x W`` with BOX, which when enlarging is nearest-neighbour: every
  pixel shows the mean of its own block. This is PIL's result except where a pixel centre
  lies exactly on a block boundary (28 -> 16 and 28 -> 8 of the MNIST table; none of the
  CIFAR sizes): PIL then breaks the tie one way going down and the other going up, so such
  a pixel shows the neighbouring block, which shifts content and makes the mean change
  non-monotonic in severity; here both directions use the same (lower) block.

Two severity tables (:data:`SEVERITIES`):

* ``"cifar10"``: the CIFAR-10-C constants of ``make_cifar_c.py`` (32x32 RGB images).
* ``"mnist"``: the five-level constants of MNIST-C (Mu & Gilmer, "MNIST-C: A Robustness
  Benchmark for Computer Vision", 2019; ``google-research/mnist-c``, ``corruptions.py``).
  These replace the CIFAR constants for 28x28 grey images because near-binary digits are
  almost unaffected by the CIFAR ones (a 0.4-pixel blur or a 0.75 contrast change hardly
  moves an MNIST classifier), so CIFAR severities 1-5 would not be a shift. The published
  MNIST-C set uses one default severity per corruption; we use the full tables of its code.

``table=None`` picks ``"mnist"`` for single-channel and ``"cifar10"`` for RGB images. The
blur sigma is in pixels at the table's reference size (32 or 28) and is scaled by
``min(H, W) / reference`` (exact for 32x32 and 28x28; e.g. 8x8 digits get 8/28 of it);
the pixelate factor is already relative, the other constants do not depend on size.

Standardised data are corrupted in raw pixel space: un-standardised, corrupted, clipped and
standardised again (:func:`corrupt_dataset`). A standardisation *per pixel* makes that
degenerate where a pixel hardly varies in the training images: ``digits`` divides six
border pixels by stds from 0.0018 to 0.0093, so the mildest brightness (+0.1) moves them by
11-57 training standard deviations, far outside anything the network saw, and nearly every
image gets one class at every severity (accuracy near 0.10). A pixel whose std is below
:data:`MIN_PIXEL_STD` (= :data:`MILD_CHANGE` / :data:`MAX_SHIFT_STDS`: a severity-1 change
moves it by more than 3 training stds) carries nothing the network learned to read under
a shift, so it keeps its clean value and the corruption acts on the others (digits: 8 of
64 pixels, stds up to 0.029; the next is 0.057). Accuracy then falls with severity
(the 60-step SGLD MLP of the tests: contrast 0.62 -> 0.17, brightness 0.85 -> 0.49) instead of
sitting at 0.10-0.14 from severity 1. ``meta["corruption"]["frozen_pixels"]`` and the
evaluation's ``corruption_frozen_pixels`` record how many; data where more than half the
pixels would be frozen are refused. Per-channel normalisations (MNIST, CIFAR-10) freeze
nothing.

Differences from the reference code: images stay floating point (the originals round to
uint8 after every corruption), randomness comes from ``np.random.default_rng(seed)`` for
the whole batch, and only numpy is needed (no skimage, OpenCV or PIL). Written by hand
because those libraries are not dependencies of bdlkit and each corruption is a few lines.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from bdlkit.data.dataset import Dataset

__all__ = ["CORRUPTIONS", "MAX_SHIFT_STDS", "MILD_CHANGE", "MIN_PIXEL_STD", "SEVERITIES", "corrupt", "corrupt_dataset",
           "frozen_count", "frozen_pixels", "gaussian_kernel"]

#: Each corruption's parameter at severities 1–5.
SEVERITIES: dict[str, dict[str, tuple[float, ...]]] = {
    "cifar10": {
        "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
        "shot_noise": (500, 250, 100, 75, 50),
        "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),
        "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
        "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),
        "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),
    },
    "mnist": {
        "gaussian_noise": (0.08, 0.12, 0.18, 0.26, 0.38),
        "shot_noise": (60, 25, 12, 5, 3),
        "gaussian_blur": (1.0, 2.0, 3.0, 4.0, 6.0),
        "contrast": (0.4, 0.3, 0.2, 0.1, 0.05),
        "brightness": (0.1, 0.2, 0.3, 0.4, 0.5),
        "pixelate": (0.6, 0.5, 0.4, 0.3, 0.25),
    },
}
_REFERENCE_SIZE = {"cifar10": 32, "mnist": 28}
#: A severity-1 change of a pixel (brightness +0.1, noise σ 0.08), what a mild shift moves.
MILD_CHANGE = 0.1
#: More training standard deviations than this is outside what the network saw.
MAX_SHIFT_STDS = 3.0
#: Input values standardised by a std below this (1/30 of the [0, 1] pixel range, so a mild
#: change moves them by more than 3 training stds) keep their clean value (frozen_pixels).
MIN_PIXEL_STD = MILD_CHANGE / MAX_SHIFT_STDS
_TOLERANCE = 1e-4  # how far outside [0, 1] an input may be (rounding) before it is refused

Corruption = Callable[[np.ndarray, float, np.random.Generator], np.ndarray]


def _gaussian_noise(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    return x + rng.normal(scale=c, size=x.shape)


def _shot_noise(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    return rng.poisson(x * c) / c


def gaussian_kernel(sigma: float, truncate: float = 4.0) -> np.ndarray:
    """The normalised 1-d Gaussian kernel of radius ``int(truncate * sigma + 0.5)``."""
    radius = int(truncate * sigma + 0.5)
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    return kernel / kernel.sum()


def _blur_matrix(size: int, kernel: np.ndarray) -> np.ndarray:
    """``(size, size)`` matrix ``M`` of the correlation of a length-``size`` axis with the
    symmetric ``kernel``, edge pixels replicated: ``(M @ x)[i] = Σ_j kernel[j] x[clip(i + j - r)]``
    (``r`` the kernel's radius). Taps past an edge land on the edge pixel, so a kernel
    wider than the image is exact too."""
    radius = len(kernel) // 2
    rows = np.repeat(np.arange(size), len(kernel))
    cols = np.clip(rows + np.tile(np.arange(len(kernel)), size) - radius, 0, size - 1)
    matrix = np.zeros((size, size))
    np.add.at(matrix, (rows, cols), np.tile(kernel, size))
    return matrix


def _gaussian_blur(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    # separable: one (H, H) and one (W, W) matrix product per image (BLAS), not 2 (4c + 1)
    # shifted copies of the batch
    kernel = gaussian_kernel(c)
    return _blur_matrix(x.shape[-2], kernel) @ x @ _blur_matrix(x.shape[-1], kernel).T


def _contrast(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    means = x.mean(axis=(-2, -1), keepdims=True)
    return (x - means) * c + means


def _brightness(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    value = x.max(axis=1, keepdims=True)  # HSV value of (n, C, H, W) images
    new_value = np.minimum(value + c, 1.0)
    safe = np.where(value > 0, value, 1.0)
    return np.where(value > 0, x * (new_value / safe), new_value)


def _pixelate_matrix(size: int, factor: float) -> np.ndarray:
    """``(size, size)`` matrix of a BOX resize to ``floor(factor * size)`` and back."""
    small = max(int(size * factor), 1)
    scale = size / small
    # pixel j belongs to the block whose footprint (b * scale, (b + 1) * scale] holds j + 0.5
    block = np.clip(np.ceil((np.arange(size) + 0.5) / scale).astype(int) - 1, 0, small - 1)
    down = np.zeros((small, size))
    down[block, np.arange(size)] = 1.0
    down /= down.sum(axis=1, keepdims=True)
    return down[block]  # enlarging: every pixel shows the mean of its own block


def _pixelate(x: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    rows, cols = _pixelate_matrix(x.shape[-2], c), _pixelate_matrix(x.shape[-1], c)
    return rows @ x @ cols.T


CORRUPTIONS: dict[str, Corruption] = {
    "gaussian_noise": _gaussian_noise,
    "shot_noise": _shot_noise,
    "gaussian_blur": _gaussian_blur,
    "contrast": _contrast,
    "brightness": _brightness,
    "pixelate": _pixelate,
}
"""``name -> f(x, c, rng)``: the raw corruption of float64 ``(n, C, H, W)`` images with the
constant ``c`` (unclipped); :func:`corrupt` looks ``c`` up and clips."""


def _check_name_severity(name: str, severity: int) -> None:
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; valid names: {', '.join(CORRUPTIONS)}")
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)):
        raise ValueError(f"severity must be an integer in 1..5, got {severity!r}")
    if not 1 <= severity <= 5:
        raise ValueError(f"severity must be in 1..5, got {severity}")


def _table_for(images: np.ndarray, table: str | None) -> str:
    if table is None:
        return "mnist" if images.ndim == 3 or images.shape[1] == 1 else "cifar10"
    if table not in SEVERITIES:
        raise ValueError(f"unknown severity table {table!r}; valid: {', '.join(SEVERITIES)}")
    return table


def corrupt(
    images: np.ndarray, name: str, severity: int, seed: int = 0, *, table: str | None = None
) -> np.ndarray:
    """Corrupt a batch of images in [0, 1]; same shape and dtype, clipped to [0, 1].

    Args:
        images: floating ``(n, C, H, W)`` with ``C`` in {1, 3}, or ``(n, H, W)``.
        name: a key of :data:`CORRUPTIONS`.
        severity: 1 (mild) to 5 (severe).
        seed: seed of ``np.random.default_rng`` for the noise corruptions.
        table: ``"cifar10"`` or ``"mnist"`` (:data:`SEVERITIES`); default by channels.

    Raises:
        ValueError: unknown name or table, severity outside 1..5, a bad shape or values
            outside [0, 1] (normalised images: undo the normalisation first, see
            :func:`corrupt_dataset`).
        TypeError: non-floating images.
    """
    _check_name_severity(name, severity)
    images = np.asarray(images)
    if not np.issubdtype(images.dtype, np.floating):
        raise TypeError(f"images must be floating point in [0, 1], got dtype {images.dtype}")
    if images.ndim not in (3, 4) or (images.ndim == 4 and images.shape[1] not in (1, 3)):
        shape = tuple(images.shape)
        raise ValueError(f"images must be (n, C, H, W) with C in {{1, 3}} or (n, H, W): {shape}")
    if images.size and (images.min() < -_TOLERANCE or images.max() > 1 + _TOLERANCE):
        raise ValueError(
            f"images must lie in [0, 1], got [{images.min():.4g}, {images.max():.4g}] "
            "(undo any normalisation first)"
        )
    table = _table_for(images, table)
    c = SEVERITIES[table][name][severity - 1]
    x = np.clip(images.astype(np.float64), 0.0, 1.0)
    x = x[:, None] if images.ndim == 3 else x
    if name == "gaussian_blur":
        c = c * min(x.shape[-2:]) / _REFERENCE_SIZE[table]
    out = CORRUPTIONS[name](x, c, np.random.default_rng(seed))
    out = np.clip(out, 0.0, 1.0).astype(images.dtype)
    return out[:, 0] if images.ndim == 3 else out


def _image_codec(ds: Dataset) -> tuple[Callable[[np.ndarray], np.ndarray], Callable,
                                       np.ndarray | None]:
    """``(to_unit, from_unit, std)``: test inputs -> ``(n, C, H, W)`` in [0, 1] and back,
    and the standardisation's std in the inputs' layout (broadcastable; None without one)."""
    x = ds.x_test
    if ds.name == "digits" and x.ndim == 2 and x.shape[1] == 64:
        if "x_mean" not in ds.meta or "x_std" not in ds.meta:
            raise ValueError("digits: meta lacks the x_mean/x_std standardisation")
        mean = np.asarray(ds.meta["x_mean"], dtype=np.float64)
        std = np.asarray(ds.meta["x_std"], dtype=np.float64)
        return (
            lambda a: (a * std + mean).reshape(-1, 1, 8, 8),
            lambda a: (a.reshape(-1, 64) - mean) / std,
            std,
        )
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ValueError(
            f"corrupt_dataset needs image data (n, C, H, W) with C in {{1, 3}} (or the "
            f"'digits' data set); {ds.name!r} has test inputs of shape {tuple(x.shape)}"
        )
    norm = ds.meta.get("normalization")
    if not norm:
        return (lambda a: a), (lambda a: a), None
    mean = np.asarray(norm["mean"], dtype=np.float64).reshape(-1, 1, 1)
    std = np.asarray(norm["std"], dtype=np.float64).reshape(-1, 1, 1)
    return (lambda a: a * std + mean), (lambda a: (a - mean) / std), std


def frozen_pixels(ds: Dataset) -> np.ndarray | None:
    """The input coordinates whose standardisation std is below :data:`MIN_PIXEL_STD`
    (a mask in the test inputs' layout, broadcastable), which :func:`corrupt_dataset`
    leaves as they were; None when there is none.

    Raises:
        ValueError: when more than half of the coordinates are such (corruptions would
            say nothing about this data), or for data :func:`corrupt_dataset` refuses.
    """
    std = _image_codec(ds)[2]
    if std is None:
        return None
    frozen = std < MIN_PIXEL_STD
    if not frozen.any():
        return None
    per_image = math.prod(ds.x_test.shape[1:])
    count = _count(frozen, ds)
    if count > per_image / 2:
        raise ValueError(
            f"{ds.name}: {count} of {per_image} input values are standardised by a std below "
            f"{MIN_PIXEL_STD:g} (min {float(std.min()):.2g}), so any corruption of them moves "
            "the network's input by hundreds of training standard deviations: corruptions "
            "say nothing about this data. Use a data set normalised per channel (mnist, "
            "cifar10)")
    return frozen


def frozen_count(ds: Dataset) -> int:
    """How many input values per image :func:`corrupt_dataset` leaves uncorrupted
    (:func:`frozen_pixels`); 0 for data normalised per channel."""
    return _count(frozen_pixels(ds), ds)


def _count(frozen: np.ndarray | None, ds: Dataset) -> int:
    """How many of an image's input values the mask ``frozen`` covers (0 for None)."""
    return 0 if frozen is None else int(np.broadcast_to(frozen, ds.x_test.shape[1:]).sum())


def corrupt_dataset(
    ds: Dataset, name: str, severity: int, seed: int = 0, *, table: str | None = None
) -> Dataset:
    """A copy of an image :class:`Dataset` whose **test** images are corrupted.

    The normalisation ``ds.meta["normalization"]`` (``{"mean", "std"}``, scalar or
    per-channel) is undone, the images corrupted with :func:`corrupt` in raw pixel space
    and normalised again; train and validation parts are untouched. ``digits`` (flattened
    ``(n, 64)``, standardised per pixel with ``meta["x_mean"]``/``meta["x_std"]``) is
    un-standardised, reshaped to ``(n, 1, 8, 8)`` and back. Input values whose std is below
    :data:`MIN_PIXEL_STD` keep their clean value (:func:`frozen_pixels`, module docstring).
    ``meta["corruption"]`` records what was done (``frozen_pixels``: how many per image).

    Raises:
        ValueError: non-image data, an already corrupted data set, a standardisation that
            freezes most pixels, or see :func:`corrupt`.
    """
    _check_name_severity(name, severity)
    if "corruption" in ds.meta:
        raise ValueError(f"{ds.name}: already corrupted ({ds.meta['corruption']})")
    to_unit, from_unit, _ = _image_codec(ds)
    frozen = frozen_pixels(ds)
    x = ds.x_test.detach().cpu().numpy().astype(np.float64)
    unit = to_unit(x)
    table = _table_for(unit, table)
    corrupted = from_unit(corrupt(unit, name, severity, seed, table=table))
    if frozen is not None:
        corrupted = np.where(frozen, x, corrupted)
    x_test = torch.as_tensor(corrupted).to(ds.x_test.device, ds.x_test.dtype)
    record: dict[str, Any] = {
        "name": name,
        "severity": int(severity),
        "seed": seed,
        "table": table,
        "constant": SEVERITIES[table][name][severity - 1],
        "split": "test",
        "frozen_pixels": _count(frozen, ds),
        "reference": "Hendrycks & Dietterich (ICLR 2019); MNIST-C (Mu & Gilmer 2019)",
    }
    return dataclasses.replace(ds, x_test=x_test, meta={**ds.meta, "corruption": record})
