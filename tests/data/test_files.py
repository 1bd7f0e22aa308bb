"""Tests for user .npz / .csv files."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from bdlkit.core.errors import DataError, DataWarning, InputError
from bdlkit.data import load
from bdlkit.data.dataset import Dataset
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
    with pytest.warns(DataWarning, match=r"2 of the 5 classes never occur.*: 3, 4\."):
        d = load_file(path)  # class 4 only in the test split, class 3 nowhere
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
    with pytest.warns(DataWarning, match="119 of the 199 classes"):
        forced = load_file(path, task="classification")
    assert forced.task == "classification" and forced.num_classes == 199


def test_csv_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    rows = ["a,label,b"] + [f"{i},{i % 3},{i * 0.5}" for i in range(50)]
    path.write_text("\n".join(rows) + "\n")
    d = load_file(path, target="label", test_fraction=0.2, task="regression")
    assert d.task == "regression" and d.x_train.shape == (40, 2)
    assert d.meta["columns"] == ["a", "b"]
    assert torch.allclose(d.x_train[:, 1], d.x_train[:, 0] * 0.5)
    assert torch.allclose(d.y_train, d.x_train[:, 0] % 3)
    last = load_file(path)  # target: last column
    assert torch.allclose(last.y_train, last.x_train[:, 0] * 0.5)
    cls = load_file(path, target="label", task="classification")
    assert cls.num_classes == 3 and cls.y_train.dtype == torch.int64
    with pytest.warns(DataWarning, match="column 'label' holds only the integers 0, 1, 2"):
        assert load_file(path, target="label").num_classes == 3  # inferred: labels 0..2
    declared = load_file(path, target="label", num_classes=3)  # a count makes it classification
    assert declared.task == "classification" and declared.num_classes == 3


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


# --- data contracts (issue 19, item 4): F5 shapes, F6 empty data, F7 labels, value range ---


def _npz(tmp_path: Path, name: str = "d.npz", **arrays: np.ndarray) -> Path:
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def _splits(x_test_shape=(50, 5), y_test_shape=(50,), **extra: np.ndarray) -> dict:
    return {"x_train": np.ones((60, 5)), "y_train": np.ones(60),
            "x_test": np.ones(x_test_shape), "y_test": np.ones(y_test_shape), **extra}


def test_f5_split_feature_shapes_must_match(tmp_path: Path) -> None:
    path = _npz(tmp_path, **_splits(x_test_shape=(50, 6)))
    with pytest.raises(DataError, match=r"x_test has shape \(50, 6\).*x_train has \(60, 5\)"):
        load_file(path)
    path = _npz(tmp_path, **_splits(x_val=np.ones((4, 5, 1)), y_val=np.ones(4)))
    with pytest.raises(DataError, match=r"x_val has shape \(4, 5, 1\)"):
        load_file(path)
    path = _npz(tmp_path, **_splits(y_test_shape=(50, 2)))
    with pytest.raises(DataError, match=r"y_test has shape \(50, 2\).*y_train has \(60,\)"):
        load_file(path)
    with pytest.raises(DataError, match="x_test"):  # every loader gets the check
        Dataset("toy", "regression", torch.ones(6, 5), torch.ones(6),
                torch.ones(5, 6), torch.ones(5))


def test_f6_empty_data_is_refused(tmp_path: Path) -> None:
    csv = tmp_path / "header.csv"
    for text in ("a,b\n", "a,b\n\n\n , \n"):
        csv.write_text(text)
        with pytest.raises(DataError, match="header.csv has no data rows"):
            load_file(csv)
    with pytest.raises(DataError, match="e.npz has no data rows"):
        load_file(_npz(tmp_path, "e.npz", x=np.ones((0, 3)), y=np.ones(0)))
    empty_train = _splits() | {"x_train": np.ones((0, 5)), "y_train": np.ones(0)}
    with pytest.raises(DataError, match="x_train has no rows"):
        load_file(_npz(tmp_path, **empty_train))
    with pytest.raises(DataError, match="cannot split 1 row"):
        load_file(_npz(tmp_path, x=np.ones((1, 3)), y=np.ones(1)))
    with pytest.raises(DataError, match=r"'x' has no values per row \(shape \(4, 0\)\)"):
        load_file(_npz(tmp_path, x=np.ones((4, 0)), y=np.ones(4)))


def test_f7_huge_labels_are_refused_not_allocated(tmp_path: Path) -> None:
    y = np.zeros(10, dtype=np.int64)
    y[9] = 10**9
    path = _npz(tmp_path, x=np.ones((10, 2)), y=y)
    with pytest.raises(DataError, match=r"label 1000000000 .*'y', row 9.*10000.*0\.\.K-1"):
        load_file(path)
    y[9] = 50_000
    with pytest.raises(DataError, match="label 50000.*num_classes"):
        load_file(_npz(tmp_path, x=np.ones((10, 2)), y=y))
    with pytest.warns(DataWarning):  # declared: allowed above the cap (classes unused)
        assert load_file(path, num_classes=10**9 + 1).num_classes == 10**9 + 1


def test_f7_labels_checked_against_declared_num_classes(tmp_path: Path) -> None:
    arrays = _splits() | {"y_train": np.arange(60) % 3, "y_test": np.arange(50) % 3}
    arrays["y_test"][7] = 12
    path = _npz(tmp_path, **arrays)
    with pytest.raises(DataError, match=r"'y_test', row 7.*label 12.*num_classes=10"):
        load_file(path, num_classes=10)
    with pytest.warns(DataWarning, match="10 of the 13 classes"):
        assert load_file(path).num_classes == 13  # inferred once, from every split
    with pytest.raises(DataError, match="label 12.*num_classes=4"):
        load(str(path), num_classes=4)  # data.load passes it on, as --data-kwargs does
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(InputError, match="num_classes"):
            load_file(path, num_classes=bad)
    with pytest.raises(InputError, match="num_classes.*classification"):
        load_file(path, num_classes=13, task="regression")


def test_f7_unused_and_single_classes_warn(tmp_path: Path) -> None:
    path = _npz(tmp_path, x=np.ones((40, 2)), y=np.arange(40) % 3)
    with pytest.warns(DataWarning, match=r"7 of the 10 classes never occur.*3, 4, 5, 6, 7"):
        load_file(path, num_classes=10)
    with pytest.warns(DataWarning, match="a single class"):
        d = load_file(_npz(tmp_path, "one.npz", x=np.ones((40, 2)), y=np.zeros(40, dtype=int)))
    assert d.num_classes == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_file(path).num_classes == 3  # every class present: no warning


def test_float32_overflow_names_array_and_column(tmp_path: Path) -> None:
    x = np.ones((10, 4))
    x[3, 2] = -1e39
    with pytest.raises(DataError, match=r"'x', row 3, feature 2.*-1e\+39.*float32.*rescale"):
        load_file(_npz(tmp_path, x=x, y=np.ones(10)))
    with pytest.raises(DataError, match=r"'y_train', row 0.*1e\+300"):
        load_file(_npz(tmp_path, **_splits(y_train=np.full(60, 1e300))))
    csv = tmp_path / "big.csv"
    csv.write_text("a,b,t\n" + "".join(f"{i},{'2e40' if i == 4 else i},{i}\n" for i in range(9)))
    with pytest.raises(DataError, match=r"column 'b', data row 5.*2e\+40"):
        load_file(csv)


def test_huge_but_representable_values_warn(tmp_path: Path) -> None:
    csv = tmp_path / "scale.csv"
    csv.write_text("a,b,t\n" + "".join(f"{i},{i * 1e30},{i * 1e7}\n" for i in range(9)))
    with pytest.warns(DataWarning) as record:
        load_file(csv)
    messages = [str(w.message) for w in record if w.category is DataWarning]  # not scale
    assert len(messages) == 2, messages
    assert re.search(r"input column\(s\) 'b' \(max \|value\| 8e\+30\).*standardis", messages[0])
    assert re.search(r"regression target\(s\) 't' \(max \|value\| 8e\+07\)", messages[1])


def test_uint64_labels_report_their_true_value(tmp_path: Path) -> None:
    y = np.arange(10, dtype=np.uint64) % 2
    y[4] = 2**63 + 5
    with pytest.raises(DataError, match=f"label {2**63 + 5} .*row 4"):
        load_file(_npz(tmp_path, x=np.ones((10, 2)), y=y))
    with pytest.raises(DataError, match=f"label {2**63 + 5}"):
        load_file(_npz(tmp_path, x=np.ones((10, 2)), y=y), num_classes=2)


def test_bool_integral_float_and_negative_labels(tmp_path: Path) -> None:
    d = load_file(_npz(tmp_path, x=np.ones((10, 2)), y=np.arange(10) % 2 == 0))
    assert d.num_classes == 2 and d.y_train.dtype == torch.int64
    f = load_file(_npz(tmp_path, x=np.ones((10, 2)), y=(np.arange(10) % 3).astype(np.float16)),
                  task="classification")
    assert f.num_classes == 3
    y = np.arange(10) % 2
    y[6] = -3
    with pytest.raises(DataError, match=r"label -3 .*'y', row 6"):
        load_file(_npz(tmp_path, x=np.ones((10, 2)), y=y))


def test_complex_and_text_arrays_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="'x' is complex"):
        load_file(_npz(tmp_path, x=np.ones((10, 2), dtype=complex), y=np.ones(10)))
    with pytest.raises(DataError, match="'y' has non-numeric dtype"):
        load_file(_npz(tmp_path, x=np.ones((10, 2)), y=np.array(["a"] * 10)))


def test_inputs_far_from_unit_scale_warn_before_the_run(tmp_path: Path) -> None:
    """0..255 float pixels (or uint8 ones with scale_uint8=False): a DefaultsWarning naming
    the scale and the fixes; [0, 1] pixels and uint8 pixels (scaled on load): none."""
    from bdlkit.core.errors import DefaultsWarning

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(40, 1, 4, 4)).astype(np.uint8)
    y = np.arange(40) % 2
    with pytest.warns(DefaultsWarning, match=r"root mean square of 1\d\d.*--standardize.*"
                      "divide by 255"):
        load_file(_npz(tmp_path, x=pixels.astype(np.float64), y=y))
    with pytest.warns(DefaultsWarning, match=r"root mean square of 1\d\d"):
        load_file(_npz(tmp_path, x=pixels, y=y), scale_uint8=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DefaultsWarning)
        load_file(_npz(tmp_path, x=pixels / 255.0, y=y))
        load_file(_npz(tmp_path, x=pixels, y=y))


def test_uint8_pixels_are_scaled_to_the_unit_range_on_load(tmp_path: Path) -> None:
    """Issue 43, raw pixels: a user's uint8 images come out in [0, 1]; the option keeps
    the raw values; both are recorded in the data set's meta."""
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, size=(30, 1, 6, 6)).astype(np.uint8)
    pixels[0, 0, 0, :2] = (0, 255)
    path = _npz(tmp_path, x=pixels, y=np.arange(30) % 2)
    d = load_file(path)
    x = torch.cat([d.x_train, d.x_test])
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    perm_x = np.sort((pixels / 255.0).astype(np.float32).reshape(-1))
    assert np.array_equal(np.sort(x.numpy().reshape(-1)), perm_x)
    assert d.meta["input_scaling"] == ["uint8 inputs divided by 255 (scale_uint8)"]
    with pytest.warns(DataWarning):
        raw = load_file(path, scale_uint8=False)
    assert float(torch.cat([raw.x_train, raw.x_test]).max()) == 255.0
    assert "input_scaling" not in raw.meta
    with pytest.raises(InputError, match="scale_uint8 must be true or false"):
        load_file(path, scale_uint8="no")


def test_standardize_uses_the_training_statistics_for_every_split(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(loc=[500.0, -3.0, 7.0], scale=[80.0, 0.01, 0.0], size=(50, 3))
    path = _npz(tmp_path, x=x, y=rng.normal(size=50) * 1000)
    d = load_file(path, standardize=True)
    train = d.x_train.double()
    torch.testing.assert_close(train[:, :2].mean(0), torch.zeros(2, dtype=torch.float64),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(train[:, :2].std(0, unbiased=False),
                               torch.ones(2, dtype=torch.float64), atol=1e-5, rtol=0)
    assert torch.all(d.x_test[:, 2] == 0)  # a constant feature: minus its mean, over 1
    raw = load_file(path)
    mean, std = raw.x_train.double().mean(0), raw.x_train.double().std(0, unbiased=False)
    std[std == 0] = 1
    torch.testing.assert_close(d.x_test.double(), (raw.x_test.double() - mean) / std,
                               atol=1e-3, rtol=1e-4)
    assert torch.equal(d.y_test, raw.y_test)  # targets untouched
    assert "standardize" in d.meta["input_scaling"][0]


def test_integer_valued_targets_are_classes_with_a_warning_naming_the_switch(
        tmp_path: Path) -> None:
    """Issue 43, own data 3: a CSV whose target holds 0/1 labels is a classification task
    (it was silently regression); the warning names task='regression'."""
    gen = np.random.default_rng(3)
    x = gen.normal(size=(60, 2))
    csv = tmp_path / "moons.csv"
    labels = (x[:, 0] > 0).astype(int)
    csv.write_text("a,b,label\n" + "".join(f"{u},{v},{t}\n" for (u, v), t in zip(x, labels)))
    switch = """task='regression' (command line: --data-kwargs '{"task": "regression"}')"""
    with pytest.warns(DataWarning) as record:
        d = load_file(csv)
    assert d.task == "classification" and d.num_classes == 2
    assert any(switch in str(w.message) and "0, 1" in str(w.message) for w in record)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        assert load_file(csv, task="regression").task == "regression"
        assert load_file(csv, task="classification").num_classes == 2
        for y in (labels + 0.5, labels * 20.0, np.zeros(60)):  # not a few small integers
            assert load_file(_npz(tmp_path, x=x, y=y)).task == "regression"
