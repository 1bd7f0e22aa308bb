"""Tests for the bdlkit.data.load dispatcher."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

import bdlkit.data as data
from bdlkit.core.errors import InputError
from bdlkit.data import DATASETS, DataNotFoundError, load


def test_missing_root_lists_paths_tried() -> None:
    with pytest.raises(DataNotFoundError) as info:
        load("mnist", root="/nonexistent")
    assert isinstance(info.value, FileNotFoundError)
    message = str(info.value)
    assert "/nonexistent" in message and "Paths tried" in message


def test_dispatch_named_sets() -> None:
    assert load("digits").name == "digits"
    assert load("MNIST", train_size=500).num_train == 500
    assert load("uci/yacht", split=3).meta["split"] == 3
    assert load("uci/naval-propulsion-plant").name == "uci/naval"
    assert load("etth2", horizon=48).name == "ett/ETTh2"
    assert load("ett/ETTh2", horizon=48).x_train.shape[1] == 96
    assert load("ili", horizon=24).task == "forecasting"
    assert load("exchange_rate", horizon=48, features="M").x_train.shape[2] == 8


def test_root_is_passed_through() -> None:
    for name in ("cifar10", "notmnist", "uci/boston", "ili"):
        with pytest.raises(DataNotFoundError, match="/nonexistent"):
            load(name, root="/nonexistent")


def test_file_paths(tmp_path: Path) -> None:
    path = tmp_path / "mine.npz"
    np.savez(path, x=np.ones((20, 2)), y=np.arange(20) % 2)
    d = load(str(path))
    assert d.task == "classification" and d.num_classes == 2
    assert load(path, test_fraction=0.5).num_train == 10
    with pytest.raises(FileNotFoundError, match="absent.csv"):
        load(str(tmp_path / "absent.csv"))


def test_unknown_name_lists_every_family_on_one_short_line() -> None:
    """Issue 43: `--data digts` printed the suggestion, then all 24 names and descriptions."""
    with pytest.raises(ValueError) as info:
        load("digts")
    message = str(info.value)
    assert "(did you mean digits?)" in message and "`bdlkit list` describes each" in message
    assert "\n" not in message and len(message) < 400, message
    for name in ("digits", "mnist", "notmnist", "cifar10", "uci/<name> (boston, concrete",
                 "ett/ETTh2", "exchange_rate", "ili", "posteriordb/<name> (7 of them)",
                 "synthetic/<kind>", ".npz/.csv"):
        assert name in message, name
    with pytest.raises(ValueError, match="valid names"):
        load("uci/nope")


def test_a_misspelt_data_option_names_the_closest_and_the_valid_ones(tmp_path: Path) -> None:
    """Issue 43, own data 4: ``--data-kwargs '{"tsk": ...}'`` was ``load_file() got an
    unexpected keyword argument 'tsk'``."""
    path = tmp_path / "mine.csv"
    path.write_text("a,t\n" + "".join(f"{i},{i % 2}\n" for i in range(10)))
    with pytest.raises(InputError) as info:
        load(str(path), tsk="classification")
    message = str(info.value)
    assert "unknown data option 'tsk'" in message and "(did you mean 'task'?)" in message
    assert ("valid options: task, test_fraction, seed, target, num_classes, scale_uint8, "
            "standardize; horizon or lookback make a .csv a time series") in message
    assert """--data-kwargs '{"task": ...}'""" in message
    with pytest.raises(InputError, match=r"'train_sise' for mnist \(did you mean 'train_size'"):
        load("mnist", train_sise=10)
    with pytest.raises(InputError, match="valid options: test_fraction, seed"):
        load("digits", root_dir="x")


def test_a_generator_without_its_required_option_names_it() -> None:
    """Issue 43: ``load("synthetic/gaussian")`` without ``dim=`` was a raw TypeError."""
    with pytest.raises(InputError, match=r"synthetic/gaussian needs the option 'dim': e.g. "
                       r"bdlkit.data.load\('synthetic/gaussian', dim=...\)"):
        load("synthetic/gaussian")
    assert load("synthetic/gaussian", dim=3, num_draws=10).dim == 3


def test_registry_and_exports() -> None:
    for name in (
        "digits",
        "mnist",
        "notmnist",
        "cifar10",
        "uci/protein",
        "ett/ETTh2",
        "exchange_rate",
        "ili",
        "synthetic/<kind>",
    ):
        assert name in DATASETS and DATASETS[name]
    assert any(k.startswith("posteriordb/") for k in DATASETS)
    for attr in (
        "Dataset",
        "DataNotFoundError",
        "load",
        "DATASETS",
        "load_mnist",
        "load_notmnist",
        "load_cifar10",
        "load_digits",
        "load_uci",
        "load_forecasting",
        "load_csv_series",
        "load_file",
    ):
        assert hasattr(data, attr) and attr in data.__all__


def test_lazy_dispatch_to_posteriordb_and_synthetic(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    fake_pdb = types.ModuleType("bdlkit.data.posteriordb")
    fake_pdb.load_posterior = lambda name, root=None, **kw: calls.append(("pdb", name, root, kw))
    fake_syn = types.ModuleType("bdlkit.data.synthetic")
    fake_syn.KINDS = {"banana": lambda dim=2: calls.append(("syn", "banana", {"dim": dim}))}
    fake_syn.make_target = lambda kind, **kw: calls.append(("syn", kind, kw))
    monkeypatch.setitem(sys.modules, "bdlkit.data.posteriordb", fake_pdb)
    monkeypatch.setitem(sys.modules, "bdlkit.data.synthetic", fake_syn)
    load("posteriordb/arK-arK", root="/r", chains=2)
    load("synthetic/banana", dim=2)
    assert calls == [("pdb", "arK-arK", "/r", {"chains": 2}), ("syn", "banana", {"dim": 2})]
