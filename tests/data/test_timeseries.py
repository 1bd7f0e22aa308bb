"""Tests for the forecasting loaders (the Koopa protocol, docs/protocols.md)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from bdlkit.data.timeseries import expected_windows, load_csv_series, load_forecasting


@pytest.mark.parametrize(
    ("name", "horizon", "counts", "channels"),
    [
        ("ett/ETTh2", 96, (8353, 2785, 2785), 7),
        ("ett/ETTh2", 48, (8497, 2833, 2833), 7),
        ("exchange_rate", 96, (5024, 665, 1422), 8),
        ("exchange_rate", 192, (4736, 569, 1326), 8),
        ("ili", 24, (605, 74, 170), 7),
        ("ili", 60, (497, 38, 134), 7),
    ],
)
def test_window_counts_match_koopa_table(name, horizon, counts, channels) -> None:
    d = load_forecasting(name, horizon=horizon, features="M")
    L = 2 * horizon
    assert (len(d.x_train), len(d.x_val), len(d.x_test)) == counts
    assert d.x_train.shape[1:] == (L, channels) and d.y_train.shape[1:] == (horizon, channels)
    assert d.x_train.dtype == torch.float32 and d.task == "forecasting"
    assert d.meta["lookback"] == L and d.meta["columns"][-1] == "OT"


def test_single_channel_and_scaling() -> None:
    d = load_forecasting("etth2", horizon=96, features="S")
    assert d.name == "ett/ETTh2" and d.x_train.shape == (8353, 192, 1)
    assert d.meta["borders"] == {"train": [0, 8640], "val": [8448, 11520], "test": [11328, 14400]}
    # the training rows: window 0's inputs and targets, then every later window's last row
    train_rows = torch.cat([d.x_train[0, :, 0], d.y_train[0, :, 0], d.y_train[1:, -1, 0]])
    assert len(train_rows) == 8640
    assert abs(float(train_rows.mean())) < 1e-4
    assert abs(float(train_rows.std(unbiased=False)) - 1) < 1e-4
    # stride-1: window i+1 is window i shifted by one row; y follows x
    assert torch.equal(d.x_train[1, :-1], d.x_train[0, 1:])
    assert torch.equal(d.x_train[0, -1], d.x_train[1, -2])
    assert torch.equal(d.y_train[0, 0], d.x_train[1, -1])


def test_matches_manual_standard_scaler() -> None:
    path = Path(load_forecasting("ili", horizon=24).meta["file"])
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    values = np.array([[float(c) for c in r[1:]] for r in rows])
    n, n_tr, n_te = len(values), int(0.7 * len(values)), int(0.2 * len(values))
    scaled = (values - values[:n_tr].mean(0)) / values[:n_tr].std(0)
    d = load_forecasting("ili", horizon=24, features="M")
    assert np.allclose(d.x_val[0].numpy(), scaled[n_tr - 48 : n_tr], atol=1e-5)
    assert np.allclose(d.y_test[-1].numpy(), scaled[n - 24 :], atol=1e-5)
    assert np.allclose(d.x_test[0].numpy(), scaled[n - n_te - 48 : n - n_te], atol=1e-5)
    assert np.allclose(d.meta["std"], values[:n_tr].std(0))


def test_custom_lookback_and_errors() -> None:
    d = load_forecasting("ili", horizon=24, lookback=36)
    assert d.x_train.shape == (676 - 36 - 24 + 1, 36, 1)
    with pytest.raises(ValueError, match="features"):
        load_forecasting("ili", horizon=24, features="X")
    with pytest.raises(ValueError, match="too few"):
        load_forecasting("ili", horizon=100)
    with pytest.raises(ValueError, match="valid names"):
        load_forecasting("weather")
    with pytest.raises(ValueError, match="horizon"):
        load_forecasting("ili", horizon=0)


def _write_series(path: Path, n: int, with_date: bool) -> np.ndarray:
    t = np.arange(n, dtype=np.float64)
    data = np.stack([np.sin(t / 5), np.cos(t / 7), t / n], axis=1)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow((["date"] if with_date else []) + ["a", "target", "b"])
        for i, row in enumerate(data):
            w.writerow(([f"2020-01-{i}"] if with_date else []) + [repr(float(v)) for v in row])
    return data


@pytest.mark.parametrize("with_date", [True, False])
def test_csv_series(tmp_path: Path, with_date: bool) -> None:
    path = tmp_path / "series.csv"
    data = _write_series(path, 300, with_date)
    d = load_csv_series(path, horizon=10, target="target", features="M")
    assert d.meta["columns"] == ["a", "b", "target"]
    n_tr, n_te = int(0.7 * 300), int(0.2 * 300)
    assert len(d.x_train) == expected_windows(n_tr, 20, 10)
    assert len(d.x_val) == expected_windows(300 - n_tr - n_te + 20, 20, 10)
    assert len(d.x_test) == expected_windows(n_te + 20, 20, 10)
    col = data[:, 1]
    scaled = (col - col[:n_tr].mean()) / col[:n_tr].std()
    assert np.allclose(d.x_train[0, :, 2].numpy(), scaled[:20], atol=1e-5)
    s = load_csv_series(path, horizon=10)  # default target: last column ("b")
    assert s.meta["target"] == "b" and s.x_train.shape[2] == 1
    assert (s.meta["first_date"] is not None) == with_date


def test_csv_series_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        load_csv_series(tmp_path / "nope.csv")
    path = tmp_path / "bad.csv"
    path.write_text("date,a,b\n2020,1,2\n2021,x,3\n")
    with pytest.raises(ValueError, match="non-numeric.*'a'"):
        load_csv_series(path, horizon=1)
    path.write_text("a,b\n1,2\n3,\n")
    with pytest.raises(ValueError, match="NaN"):
        load_csv_series(path, horizon=1)
    _write_series(path, 300, True)
    with pytest.raises(ValueError, match="target column 'zz'"):
        load_csv_series(path, horizon=10, target="zz")
