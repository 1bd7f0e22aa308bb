"""Image corruptions (CIFAR-10-C / MNIST-C severities) and corrupt_dataset."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest
import torch

from bdlkit.data import Dataset, load
from bdlkit.data.corruptions import (
    CORRUPTIONS,
    SEVERITIES,
    corrupt,
    corrupt_dataset,
    gaussian_kernel,
)
from bdlkit.data.images import load_digits

SHAPES = [(6, 3, 32, 32), (6, 1, 28, 28), (6, 28, 28)]


def _images(shape=(6, 3, 32, 32), seed: int = 0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).random(shape).astype(dtype)


@pytest.mark.parametrize("name", list(CORRUPTIONS))
@pytest.mark.parametrize("shape", SHAPES)
def test_shape_dtype_range_and_determinism(name, shape):
    x = _images(shape)
    for dtype in (np.float32, np.float64):
        out = corrupt(x.astype(dtype), name, 3, seed=1)
        assert out.shape == x.shape and out.dtype == dtype
        assert out.min() >= 0.0 and out.max() <= 1.0
    a, b = corrupt(x, name, 5, seed=7), corrupt(x, name, 5, seed=7)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, x)
    if name.endswith("noise"):
        assert not np.array_equal(a, corrupt(x, name, 5, seed=8))


@pytest.mark.parametrize("name", list(CORRUPTIONS))
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_severity_is_monotonic(name, shape):
    x = _images(shape, seed=3)
    change = [np.abs(corrupt(x, name, s, seed=0) - x).mean() for s in range(1, 6)]
    assert all(lo < hi for lo, hi in zip(change, change[1:])), change


def test_table_defaults_by_channels():
    rgb, grey = _images((2, 3, 32, 32)), _images((2, 1, 28, 28))
    np.testing.assert_array_equal(
        corrupt(rgb, "contrast", 2), corrupt(rgb, "contrast", 2, table="cifar10")
    )
    np.testing.assert_array_equal(
        corrupt(grey, "contrast", 2), corrupt(grey, "contrast", 2, table="mnist")
    )
    assert not np.array_equal(
        corrupt(grey, "contrast", 2, table="cifar10"), corrupt(grey, "contrast", 2)
    )


def test_brightness_raises_mean_and_matches_hsv():
    x = _images((2, 3, 8, 8), seed=4)
    x[0, :, 0, 0] = 0.0  # black pixel: becomes grey
    for s in range(1, 6):
        assert corrupt(x, "brightness", s).mean() > x.mean()
    out = corrupt(x.astype(np.float64), "brightness", 3)
    c = SEVERITIES["cifar10"]["brightness"][2]
    for n, i, j in [(0, 0, 0), (0, 3, 5), (1, 7, 2)]:
        h, s, v = colorsys.rgb_to_hsv(*x[n, :, i, j].astype(np.float64))
        expected = colorsys.hsv_to_rgb(h, s, min(v + c, 1.0))
        np.testing.assert_allclose(out[n, :, i, j], expected, atol=1e-12)


def test_contrast_shrinks_spread_around_mean():
    x = _images((4, 3, 32, 32), seed=5)
    out = corrupt(x, "contrast", 4)
    np.testing.assert_allclose(out.mean(axis=(2, 3)), x.mean(axis=(2, 3)), atol=1e-6)
    c = SEVERITIES["cifar10"]["contrast"][3]
    np.testing.assert_allclose(out.std(axis=(2, 3)), c * x.std(axis=(2, 3)), rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_pixelate_severity5_is_blockwise_constant(shape):
    x = _images(shape, seed=6)
    out = corrupt(x, "pixelate", 5)
    size = shape[-1]
    factor = SEVERITIES["cifar10" if shape[1] == 3 else "mnist"]["pixelate"][4]
    small = int(size * factor)
    block = ((np.arange(size) + 0.5) * small / size).astype(int)  # nearest-neighbour source
    for b in range(small):
        rows = out[..., block == b, :]
        cols = out[..., :, block == b]
        assert np.all(rows == rows[..., :1, :]) and np.all(cols == cols[..., :, :1])
    assert len(np.unique(out[0, 0])) <= small * small


@pytest.mark.parametrize("size, table", [(32, "cifar10"), (28, "mnist")])
def test_pixelate_matches_pil_box_resize(size, table):
    image_module = pytest.importorskip("PIL.Image")
    x = _images((1, 1, size, size), seed=9)
    for s, factor in enumerate(SEVERITIES[table]["pixelate"], start=1):
        small = int(size * factor)
        if np.any(((np.arange(size) + 0.5) * small) % size == 0):
            continue  # a pixel centre on a block boundary: PIL's tie-break differs (docstring)
        img = image_module.fromarray(x[0, 0], mode="F")
        ref = img.resize((small, small), image_module.BOX).resize((size, size), image_module.BOX)
        np.testing.assert_allclose(corrupt(x, "pixelate", s, table=table)[0, 0], ref, atol=1e-6)


def test_blur_kernel_normalised_constant_image_unchanged():
    for sigma in (0.4, 1.0, 6.0):
        assert gaussian_kernel(sigma).sum() == pytest.approx(1.0)
    x = np.full((2, 3, 32, 32), 0.3)
    for s in range(1, 6):
        np.testing.assert_allclose(corrupt(x, "gaussian_blur", s), x, atol=1e-12)


def test_blur_matches_scipy():
    ndimage = pytest.importorskip("scipy.ndimage")
    x = _images((2, 3, 32, 32), seed=8, dtype=np.float64)
    sigma = SEVERITIES["cifar10"]["gaussian_blur"][4]
    ref = ndimage.gaussian_filter(x, sigma=(0, 0, sigma, sigma), mode="nearest", truncate=4.0)
    np.testing.assert_allclose(corrupt(x, "gaussian_blur", 5), ref, atol=1e-12)


def _blur_by_shifted_copies(x: np.ndarray, sigma: float) -> np.ndarray:
    """The earlier blur: a weighted sum of edge-padded shifted copies, last axis then the
    one before (kept as the reference of the matrix form)."""
    kernel = gaussian_kernel(sigma)

    def along_last(a):
        radius, length = len(kernel) // 2, a.shape[-1]
        padded = np.pad(a, [(0, 0)] * (a.ndim - 1) + [(radius, radius)], mode="edge")
        return sum(w * padded[..., j : j + length] for j, w in enumerate(kernel))

    return along_last(along_last(x).swapaxes(-1, -2)).swapaxes(-1, -2)


@pytest.mark.parametrize("table", ["mnist", "cifar10"])
@pytest.mark.parametrize("shape", [(5, 1, 28, 28), (3, 3, 32, 32), (4, 1, 8, 8), (2, 1, 9, 5)])
def test_blur_equals_the_shifted_copy_sum(table, shape):
    x = _images(shape, seed=3, dtype=np.float64)
    reference = 32 if table == "cifar10" else 28
    for s in range(1, 6):  # sigma 6 on 8x8 digits: a kernel wider than the image
        sigma = SEVERITIES[table]["gaussian_blur"][s - 1] * min(shape[-2:]) / reference
        ref = np.clip(_blur_by_shifted_copies(x, sigma), 0, 1)
        np.testing.assert_allclose(corrupt(x, "gaussian_blur", s, table=table), ref,
                                   atol=1e-12)


def test_bad_arguments():
    x = _images((1, 3, 8, 8))
    for bad in (0, 6, 2.0, True):
        with pytest.raises(ValueError, match="severity"):
            corrupt(x, "contrast", bad)
    with pytest.raises(ValueError, match="gaussian_noise, shot_noise"):
        corrupt(x, "fog", 1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        corrupt(x * 3 - 1, "contrast", 1)
    with pytest.raises(ValueError, match=r"\(n, C, H, W\)"):
        corrupt(_images((1, 2, 8, 8)), "contrast", 1)
    with pytest.raises(TypeError):
        corrupt((x * 255).astype(np.uint8), "contrast", 1)
    with pytest.raises(ValueError, match="table"):
        corrupt(x, "contrast", 1, table="imagenet")


def _image_dataset(channels: int = 3) -> Dataset:
    mean, std = (0.4914, 0.4822, 0.4465)[:channels], (0.2470, 0.2435, 0.2616)[:channels]
    m, s = torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1)
    g = torch.Generator().manual_seed(0)
    x_tr = (torch.rand(10, channels, 16, 16, generator=g) - m) / s
    x_te = (torch.rand(8, channels, 16, 16, generator=g) - m) / s
    y_tr, y_te = torch.randint(0, 3, (10,), generator=g), torch.randint(0, 3, (8,), generator=g)
    meta = {"normalization": {"mean": mean, "std": std}}
    return Dataset("toy", "classification", x_tr, y_tr, x_te, y_te, num_classes=3, meta=meta)


@pytest.mark.parametrize("channels", [1, 3])
def test_corrupt_dataset_round_trips_normalisation(channels):
    ds = _image_dataset(channels)
    out = corrupt_dataset(ds, "brightness", 2, seed=3)
    assert out.x_train is ds.x_train and out.y_test is ds.y_test
    assert out.x_test.shape == ds.x_test.shape and out.x_test.dtype == ds.x_test.dtype
    assert out.meta["corruption"]["name"] == "brightness"
    assert out.meta["corruption"]["severity"] == 2 and out.meta["corruption"]["seed"] == 3
    assert "corruption" not in ds.meta and out.meta["normalization"] == ds.meta["normalization"]
    norm = ds.meta["normalization"]
    m = torch.tensor(norm["mean"]).view(1, -1, 1, 1)
    s = torch.tensor(norm["std"]).view(1, -1, 1, 1)
    unit = (ds.x_test * s + m).clamp(0, 1).numpy()
    expected = (torch.from_numpy(corrupt(unit, "brightness", 2, seed=3)) - m) / s
    torch.testing.assert_close(out.x_test, expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="already corrupted"):
        corrupt_dataset(out, "contrast", 1)


def test_corrupt_dataset_digits_and_refusals():
    ds = load_digits()
    out = corrupt_dataset(ds, "contrast", 5)
    assert out.x_test.shape == ds.x_test.shape and out.meta["corruption"]["table"] == "mnist"
    mean, std = np.asarray(ds.meta["x_mean"]), np.asarray(ds.meta["x_std"])
    raw = out.x_test.numpy() * std + mean
    assert raw.min() >= -1e-5 and raw.max() <= 1 + 1e-5
    assert raw.std() < (ds.x_test.numpy() * std + mean).std()
    tabular = Dataset(
        "tab", "regression", torch.zeros(4, 5), torch.zeros(4), torch.zeros(3, 5), torch.zeros(3)
    )
    with pytest.raises(ValueError, match="image data"):
        corrupt_dataset(tabular, "contrast", 1)
    with pytest.raises(ValueError, match="severity"):
        corrupt_dataset(ds, "contrast", 9)


def test_corrupt_real_mnist():
    try:
        ds = load("mnist", train_size=100, test_size=200)
    except Exception as err:  # data not shipped on this machine
        pytest.skip(f"MNIST not available: {err}")
    out = corrupt_dataset(ds, "gaussian_blur", 3)
    assert out.x_test.shape == (200, 1, 28, 28) and torch.equal(out.x_train, ds.x_train)
    unit = out.x_test * 0.3081 + 0.1307
    assert float(unit.min()) >= -1e-5 and float(unit.max()) <= 1 + 1e-5
    clean = ds.x_test * 0.3081 + 0.1307
    assert float(unit.max()) < float(clean.max())  # blurred strokes lose their peaks


def test_digits_pixels_a_per_pixel_standardisation_makes_degenerate_keep_their_clean_value():
    """Issue 43, item 9: digits divides six border pixels by stds down to 0.0018, so a
    +0.1 brightness put them 57 training stds away and every image in one class. Pixels
    with a std below 1/30 keep their clean value; every other one moves by at most 3 stds."""
    from bdlkit.data.corruptions import MIN_PIXEL_STD, frozen_pixels

    ds = load_digits()
    std = np.asarray(ds.meta["x_std"])
    frozen = frozen_pixels(ds)
    assert frozen.tolist() == (std < MIN_PIXEL_STD).tolist() and frozen.sum() == 8
    out = corrupt_dataset(ds, "brightness", 1)
    shift = (out.x_test - ds.x_test).abs()
    assert out.meta["corruption"]["frozen_pixels"] == 8
    assert float(shift[:, torch.from_numpy(frozen)].max()) == 0.0
    assert float(shift.max()) <= 0.1 / MIN_PIXEL_STD + 1e-4  # 3 training stds
    assert float(shift[:, torch.from_numpy(~frozen)].mean()) > 0.05  # the others did move


def test_a_standardisation_that_would_freeze_most_pixels_is_refused():
    ds = _image_dataset(1)
    ds.meta["normalization"] = {"mean": (0.5,), "std": (0.001,)}
    with pytest.raises(ValueError, match="say nothing about this data"):
        corrupt_dataset(ds, "contrast", 1)
    assert corrupt_dataset(_image_dataset(3), "contrast", 1).meta["corruption"][
        "frozen_pixels"] == 0  # per-channel normalisations freeze nothing
