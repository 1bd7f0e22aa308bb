"""Tests for user .npz / .csv files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bdlkit.data.files import load_file


def test_npz_explicit_split_classification(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.normal(size=(30, 4)),
        "y_train": rng.integers(0, 3, size=30),
        "x_test": rng.normal(size=(10, 4)),
        "y_test": np.array([0, 1, 2, 4, 0, 1, 2, 0, 1, 2]),
        "x_val": rng.normal(size=(5, 4)),
        "y_val": rng.integers(0, 3, size=5),
    }
    path = tmp_path / "cls.npz"
    np.savez(path, **arrays)
    d = load_file(path)
    assert d.task == "classification" and d.num_classes == 5 and d.name == "cls"
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert d.x_val.shape == (5, 4)
    assert np.allclose(d.x_test.numpy(), arrays["x_test"].astype(np.float32))
    assert d.y_test.tolist() == arrays["y_test"].tolist()


def test_npz_xy_split_regression(tmp_path: Path) -> None:
    x = np.arange(100, dtype=np.float64)
    path = tmp_path / "reg.npz"
    np.savez(path, x=x, y=2.0 * x)
    d = load_file(path, test_fraction=0.25, seed=1)
    assert d.task == "regression" and d.num_classes is None
    assert d.x_train.shape == (75, 1) and d.x_test.shape == (25, 1)
    assert torch.allclose(d.y_train, 2 * d.x_train[:, 0])
    all_x = sorted(torch.cat([d.x_train[:, 0], d.x_test[:, 0]]).tolist())
    assert all_x == x.tolist()
    again = load_file(path, test_fraction=0.25, seed=1)
    assert torch.equal(again.x_test, d.x_test)
    forced = load_file(path, task="classification")
    assert forced.task == "classification" and forced.num_classes == 199


def test_csv_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    rows = ["a,label,b"] + [f"{i},{i % 3},{i * 0.5}" for i in range(50)]
    path.write_text("\n".join(rows) + "\n")
    d = load_file(path, target="label", test_fraction=0.2)
    assert d.task == "regression" and d.x_train.shape == (40, 2)
    assert d.meta["columns"] == ["a", "b"]
    assert torch.allclose(d.x_train[:, 1], d.x_train[:, 0] * 0.5)
    assert torch.allclose(d.y_train, d.x_train[:, 0] % 3)
    last = load_file(path)  # target: last column
    assert torch.allclose(last.y_train, last.x_train[:, 0] * 0.5)
    cls = load_file(path, target="label", task="classification")
    assert cls.num_classes == 3 and cls.y_train.dtype == torch.int64


def test_nan_and_inf_errors(tmp_path: Path) -> None:
    x = np.ones((10, 3))
    x[2, 0] = np.nan
    x[5, 1] = np.inf
    x[5, 2] = np.nan
    path = tmp_path / "nan.npz"
    np.savez(path, x=x, y=np.ones(10))
    with pytest.raises(ValueError, match=r"'x' has 2 of 10 rows with NaN or inf"):
        load_file(path)
    np.savez(
        path,
        x_train=np.ones((4, 2)),
        y_train=np.array([1.0, np.nan, 2, 3]),
        x_test=np.ones((2, 2)),
        y_test=np.ones(2),
    )
    with pytest.raises(ValueError, match=r"'y_train' has 1 of 4 rows"):
        load_file(path)
    csv = tmp_path / "nan.csv"
    csv.write_text("a,b\n1,2\n3,\nnan,4\n")
    with pytest.raises(ValueError, match="'x' has 1 of 3 rows"):
        load_file(csv)


def test_shape_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, x=np.ones((10, 2)), y=np.ones(9))
    with pytest.raises(ValueError, match="x has 10 rows but y has 9"):
        load_file(path)
    np.savez(path, a=np.ones(3))
    with pytest.raises(ValueError, match="expected arrays"):
        load_file(path)
    np.savez(path, x=np.ones((10, 2)), y=np.array([0.5] * 10))
    with pytest.raises(ValueError, match="not integer-valued"):
        load_file(path, task="classification")
    np.savez(path, x=np.ones((10, 2)), y=-np.ones(10, dtype=int))
    with pytest.raises(ValueError, match=">= 0"):
        load_file(path)


def test_object_array_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "obj.npz"
    np.savez(path, x=np.array([{"evil": 1}, None], dtype=object), y=np.ones(2))
    with pytest.raises(ValueError, match="object .*pickled"):
        load_file(path)
    npy = tmp_path / "fake.npz"
    np.save(tmp_path / "single.npy", np.ones(3))
    npy.write_bytes((tmp_path / "single.npy").read_bytes())
    with pytest.raises(ValueError, match="fake.npz"):
        load_file(npy)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="junk.npz"):
        load_file(junk)


def test_missing_and_unsupported(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        load_file(tmp_path / "missing.npz")
    other = tmp_path / "data.parquet"
    other.write_bytes(b"")
    with pytest.raises(ValueError, match=r"\.npz, \.csv"):
        load_file(other)
