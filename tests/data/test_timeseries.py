"""Tests for the forecasting loaders (the Koopa protocol, docs/protocols.md)."""

from __future__ import annotations

import csv
import warnings
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pytest
import torch

from bdlkit.core.errors import DataError, InputError
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
    assert d.x_train.shape == (676 - 36 - 24 + 1, 36, 7)  # all channels by default
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
    s = load_csv_series(path, horizon=10, features="S")  # default target: the last column
    assert s.meta["target"] == "b" and s.x_train.shape[2] == 1
    m = load_csv_series(path, horizon=10)  # every column by default
    assert m.x_train.shape[2] == 3 and m.meta["features"] == "M"
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


def test_header_only_short_and_unreadable_series_are_data_errors(tmp_path: Path) -> None:
    path = tmp_path / "head.csv"
    for text in ("date,a,b\n", "date,a,b\n\n \n"):
        path.write_text(text)
        with pytest.raises(DataError, match="head.csv: no data rows below the header"):
            load_csv_series(path, horizon=1)
    path.write_text("date,a\n2020-01-01,1\n2020-01-02,2\n2020-01-03,3\n")
    with pytest.raises(DataError, match="the train split .* has 2 rows, too few"):
        load_csv_series(path, horizon=1)
    path.write_bytes(b"a,b\n1,\xff\n")
    with pytest.raises(DataError, match="not UTF-8"):
        load_csv_series(path, horizon=1)
    with pytest.raises(InputError, match="horizon must be a positive integer"):
        load_csv_series(path, horizon=0)


# --- refusals of bad input, the constant-channel warning, the scaler -------------------------

def _daily(n: int, start: date = date(2020, 1, 1)) -> list[str]:
    return [(start + timedelta(days=i)).isoformat() for i in range(n)]


def _write(path: Path, dates: list[str] | None, columns: dict[str, list]) -> Path:
    """A CSV with an optional ``date`` column and the given value columns."""
    names = list(columns)
    n = len(next(iter(columns.values())))
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow((["date"] if dates is not None else []) + names)
        for i in range(n):
            w.writerow(([dates[i]] if dates is not None else []) + [columns[c][i] for c in names])
    return path


def _good(n: int = 100) -> dict[str, list]:
    t = np.arange(n, dtype=np.float64)
    return {"a": list(np.sin(t / 3)), "target": list(np.cos(t / 5)), "b": list(t / n)}


def _raises(match: list[str], fn, *args, **kwargs) -> str:
    """Call ``fn``, expect a ValueError, check that every substring is in its message."""
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    for part in match:
        assert part in message, (part, message)
    return message


def test_refuses_missing_time_stamp(tmp_path: Path) -> None:
    dates = _daily(100)
    dates[2] = dates[40] = ""
    path = _write(tmp_path / "stamps.csv", dates, _good())
    _raises(
        ["stamps.csv", "2 missing time stamp", "'date'", "data row 3 (CSV line 4)", "Fix: fill"],
        load_csv_series, path, horizon=5,
    )


def test_refuses_duplicate_and_backward_time_stamps(tmp_path: Path) -> None:
    dates = _daily(100)
    dates[4] = dates[3]
    path = _write(tmp_path / "dup.csv", dates, _good())
    _raises(
        ["dup.csv", "duplicate time stamp '2020-01-04'", "data row 5 (CSV line 6)", "row 4",
         "strictly increasing", "remove or merge"],
        load_csv_series, path, horizon=5,
    )
    dates = _daily(100)
    dates[10], dates[11] = dates[11], dates[10]
    path = _write(tmp_path / "back.csv", dates, _good())
    _raises(
        ["back.csv", "'2020-01-11' goes backwards", "data row 12 (CSV line 13)", "'2020-01-12'",
         "sort the rows"],
        load_csv_series, path, horizon=5,
    )
    # date-times are compared as such; a column that does not parse is not ordered-checked
    hours = [f"2020-01-01 {h:02d}:00:00" for h in range(24)] * 5
    _raises(["'2020-01-01 00:00:00' goes backwards", "data row 25"], load_csv_series,
            _write(tmp_path / "h.csv", hours[:100], _good()), horizon=5)
    slashes = [f"2020/1/{1 + i % 28}" for i in range(100)]  # repeats, but not ISO
    d = load_csv_series(_write(tmp_path / "slash.csv", slashes, _good()), horizon=5)
    assert d.meta["date_column"] == "date" and d.meta["time_step"] is None


def test_refuses_gaps_in_regular_time_stamps(tmp_path: Path) -> None:
    dates = _daily(103)
    del dates[10:12]  # two days missing after 2020-01-10 (row 10)
    del dates[50]
    path = _write(tmp_path / "gaps.csv", dates, _good())
    _raises(
        ["gaps.csv", "3 missing time stamps, first after row 10 (2020-01-10)", "CSV line 11",
         "'2020-01-13'", "interpolate", "allow_gaps=True"],
        load_csv_series, path, horizon=5,
    )
    d = load_csv_series(path, horizon=5, allow_gaps=True)
    assert d.meta["time_step"] == "1 day, 0:00:00"
    # irregular steps (not multiples of the usual one) are not gaps
    months = [date(2020 + i // 12, 1 + i % 12, 1).isoformat() for i in range(100)]
    assert load_csv_series(_write(tmp_path / "m.csv", months, _good()), horizon=5).num_train > 0


def test_refuses_non_numeric_and_missing_cells(tmp_path: Path) -> None:
    cols = _good()
    cols["a"][6] = "oops"
    path = _write(tmp_path / "text.csv", _daily(100), cols)
    _raises(
        ["text.csv", "non-numeric value 'oops'", "column 'a'", "data row 7 (CSV line 8)", "Fix"],
        load_csv_series, path, horizon=5,
    )
    cols = _good()
    cols["b"][3], cols["b"][9], cols["target"][20] = "", "nan", "inf"
    path = _write(tmp_path / "holes.csv", _daily(100), cols)
    text = path.read_text().splitlines()
    path.write_text("\n".join(text[:2] + [""] + text[2:]) + "\n")  # a blank line: rows != lines
    _raises(
        ["holes.csv", "3 empty or NaN/inf cell(s) in 3 row(s)", "an empty cell", "column 'b'",
         "data row 4 (CSV line 6)", "interpolate"],
        load_csv_series, path, horizon=5,
    )


def test_refuses_too_few_rows_per_split(tmp_path: Path) -> None:
    path = _write(tmp_path / "short.csv", _daily(50), _good(50))
    # n_va = 50 - 35 - 10 = 5 new rows < horizon 10; the look-back does not help there
    _raises(
        ["short.csv", "the val split", "too few", "needs at least 30 rows",
         "lower horizon= to at most 5"],
        load_csv_series, path, horizon=10,
    )
    path = _write(tmp_path / "tiny.csv", _daily(40), _good(40))  # 28 training rows
    _raises(
        ["tiny.csv", "the train split", "has 28 rows", "needs at least 30 rows", "lookback="],
        load_csv_series, path, horizon=10,
    )
    # ILI: n_va = 966 - 676 - 193 = 97 new validation rows
    _raises(["national_illness.csv", "val split", "lower horizon= to at most 97"],
            load_forecasting, "ili", horizon=100)
    assert load_csv_series(path, horizon=4).num_train == expected_windows(28, 8, 4)


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "8", None])
def test_refuses_bad_horizon(tmp_path: Path, bad) -> None:
    path = _write(tmp_path / "s.csv", _daily(100), _good())
    _raises(["horizon must be a positive integer", repr(bad)], load_csv_series, path,
            horizon=bad)
    if bad is not None:
        _raises(["ili", "horizon must be a positive integer"], load_forecasting, "ili",
                horizon=bad)


def test_refuses_bad_lookback(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", _daily(100), _good())
    for bad in (0, 1.5, False, "12"):
        _raises(["lookback must be a positive integer"], load_csv_series, path, horizon=4,
                lookback=bad)
    _raises(
        ["s.csv", "lookback 3 is shorter than horizon 4", "lookback >= horizon",
         "2 * horizon = 8"],
        load_csv_series, path, horizon=4, lookback=3,
    )
    _raises(["ili", "lookback 12 is shorter than horizon 24"], load_forecasting, "ili",
            horizon=24, lookback=12)
    d = load_csv_series(path, horizon=np.int64(4), lookback=np.int64(4),
                        features="S")  # numpy ints are fine
    assert d.x_train.shape[1:] == (4, 1) and d.meta["lookback"] == 4


def test_refuses_unknown_target_and_date_columns(tmp_path: Path) -> None:
    path = _write(tmp_path / "cols.csv", _daily(100), _good())
    message = _raises(
        ["cols.csv", "target column 'tagret' not found", "did you mean 'target'",
         "available columns: 'a', 'target', 'b'"],
        load_csv_series, path, horizon=5, target="tagret",
    )
    assert "'date'" not in message  # the time stamp is not a candidate target
    assert "did you mean" not in _raises(["'zz'"], load_csv_series, path, horizon=5, target="zz")
    _raises(["cols.csv", "date column 'dates' not found", "did you mean 'date'"],
            load_csv_series, path, horizon=5, date_column="dates")
    # date_column=None: no time-stamp column, so a text column is refused ...
    _raises(["non-numeric value '2020-01-01'", "column 'date'", "data row 1 (CSV line 2)"],
            load_csv_series, path, horizon=5, date_column=None)
    # ... and a numeric first column is data
    plain = _write(tmp_path / "plain.csv", None, _good())
    d = load_csv_series(plain, horizon=5, date_column=None, features="M")
    assert d.meta["columns"] == ["a", "target", "b"] and d.meta["date_column"] is None
    assert d.meta["first_date"] is None


def test_features_case_insensitive(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", _daily(100), _good())
    m, s = load_csv_series(path, horizon=5, features="m"), load_csv_series(path, horizon=5,
                                                                          features="s")
    assert (m.meta["features"], m.x_train.shape[2]) == ("M", 3)
    assert (s.meta["features"], s.x_train.shape[2]) == ("S", 1)
    assert load_forecasting("ili", horizon=24, features="m").x_train.shape[2] == 7
    with pytest.raises(ValueError, match="features must be 'S'.*got 'x'"):
        load_csv_series(path, horizon=5, features="x")


def test_constant_training_channel_warns_and_is_recorded(tmp_path: Path) -> None:
    cols = _good()
    cols["c"] = [2.5] * 70 + [float(i) for i in range(30)]  # constant over the 70 train rows
    path = _write(tmp_path / "flat.csv", _daily(100), cols)
    with pytest.warns(UserWarning, match=r"'c'.*constant over the 70 training rows"):
        d = load_csv_series(path, horizon=5, target="target", features="M")
    assert d.meta["columns"] == ["a", "b", "c", "target"]
    assert d.meta["constant_channels"] == ["c"]
    assert d.meta["std"][2] == 1.0 and d.meta["mean"][2] == 2.5
    assert torch.all(d.x_train[:, :, 2] == 0) and torch.isfinite(d.x_test).all()
    with warnings.catch_warnings():  # the target alone is not constant: no warning
        warnings.simplefilter("error")
        s = load_csv_series(path, horizon=5, target="target", features="S")
    assert s.meta["constant_channels"] == []


def test_shipped_files_time_stamps_and_no_constant_channels() -> None:
    steps = {"ett/ETTh2": "1:00:00", "exchange_rate": None, "ili": "7 days, 0:00:00"}
    for name, step in steps.items():
        d = load_forecasting(name, features="M")
        assert d.meta["time_step"] == step and d.meta["date_column"] == "date"
        assert d.meta["constant_channels"] == []


def _raw(path: Path) -> np.ndarray:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    return np.array([[float(c) for c in r[1:]] for r in rows[1:] if r])


@pytest.mark.parametrize(
    ("name", "horizon", "counts", "channels"),
    [
        ("ett/ETTh2", 48, (8497, 2833, 2833), 7),
        ("exchange_rate", 48, (5168, 713, 1470), 8),
        ("ili", 24, (605, 74, 170), 7),
    ],
)
def test_scaler_uses_training_rows_only(name, horizon, counts, channels) -> None:
    d = load_forecasting(name, horizon=horizon, features="M")
    assert (len(d.x_train), len(d.x_val), len(d.x_test)) == counts
    assert d.x_train.shape[2] == channels
    raw = _raw(Path(d.meta["file"]))  # the CSV order ends with OT, as the loader's
    train = raw[: d.meta["borders"]["train"][1]]
    assert np.allclose(d.meta["mean"], train.mean(0), rtol=1e-12, atol=0)
    assert np.allclose(d.meta["std"], train.std(0, ddof=0), rtol=1e-12, atol=0)
    assert not np.allclose(d.meta["std"], train.std(0, ddof=1), rtol=1e-7, atol=0)


@pytest.mark.parametrize(("name", "row"), [("ett/ETTh2", 13000), ("ili", 900)])
def test_test_period_values_do_not_leak_into_training(tmp_path: Path, name, row) -> None:
    original = load_forecasting(name, features="M")
    src = Path(original.meta["file"])
    dst = tmp_path / original.meta["source"]
    dst.parent.mkdir(parents=True)
    lines = src.read_text().splitlines()
    cells = lines[row + 1].split(",")  # data row `row` (0-based) is in the test period
    cells[-1] = repr(float(cells[-1]) * 1000 + 12345)
    lines[row + 1] = ",".join(cells)
    dst.write_text("\n".join(lines) + "\n")
    changed = load_forecasting(name, root=tmp_path, features="M")
    assert original.meta["borders"]["test"][0] <= row < original.meta["borders"]["test"][1]
    assert torch.equal(changed.x_train, original.x_train)
    assert torch.equal(changed.y_train, original.y_train)
    assert torch.equal(changed.x_val, original.x_val)
    assert changed.meta["mean"] == original.meta["mean"]
    assert changed.meta["std"] == original.meta["std"]
    assert not torch.equal(changed.y_test, original.y_test)
