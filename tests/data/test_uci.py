"""Tests for the UCI regression loaders and their standard splits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bdlkit.data.uci import UCI_FOLDERS, load_uci

SIZES = {  # rows, features, splits (the UCI splits of the data root)
    "boston": (506, 13, 20),
    "concrete": (1030, 8, 20),
    "energy": (768, 8, 20),
    "kin8nm": (8192, 8, 20),
    "naval": (11934, 16, 20),
    "power": (9568, 4, 20),
    "protein": (45730, 9, 5),
    "wine": (1599, 11, 20),
    "yacht": (308, 6, 20),
}


@pytest.mark.parametrize("name", list(SIZES))
def test_uci_shapes_and_standardisation(name: str) -> None:
    rows, features, splits = SIZES[name]
    d = load_uci(name, split=1)
    assert d.task == "regression" and d.name == f"uci/{name}"
    assert len(d.x_train) + len(d.x_test) == rows
    assert 0.85 < len(d.x_train) / rows < 0.95
    assert d.x_train.shape[1] == features and d.y_train.shape == (len(d.x_train),)
    assert d.x_train.dtype == torch.float32 and d.y_test.dtype == torch.float32
    assert d.meta["n_splits"] == splits and d.meta["split"] == 1
    assert torch.allclose(d.x_train.mean(0), torch.zeros(features), atol=1e-4)
    std = d.x_train.std(0, unbiased=False)
    constant = np.asarray(d.meta["x_std"]) == 1.0
    assert torch.allclose(
        std[~torch.from_numpy(constant)], torch.ones(int((~constant).sum())), atol=1e-3
    )
    assert abs(float(d.y_train.mean())) < 1e-4
    assert abs(float(d.y_train.std(unbiased=False)) - 1) < 1e-3
    assert d.meta["y_std"] > 0


def test_uci_original_units_roundtrip() -> None:
    d = load_uci("yacht", split=0)
    raw = load_uci("yacht", split=0, normalize=False)
    y = d.y_test * d.meta["y_std"] + d.meta["y_mean"]
    assert torch.allclose(y, raw.y_test, atol=1e-4)
    assert raw.meta["y_std"] == 1.0


def test_naval_constant_inputs() -> None:
    d = load_uci("naval")
    assert torch.isfinite(d.x_train).all() and torch.isfinite(d.x_test).all()
    # columns 8 and 11 are constant (11 has a round-off std of ~2e-13): both get std 1
    assert d.meta["x_std"][8] == 1.0 and d.meta["x_std"][11] == 1.0
    assert float(d.x_train[:, [8, 11]].abs().max()) < 1e-6


def test_folder_names_and_case() -> None:
    a = load_uci("wine-quality-red", split=2)
    b = load_uci("Wine", split=2)
    assert a.name == b.name == "uci/wine" and torch.equal(a.x_train, b.x_train)
    assert set(UCI_FOLDERS) == set(SIZES)


def test_splits_differ() -> None:
    assert not torch.equal(load_uci("boston", split=0).y_test, load_uci("boston", split=1).y_test)


def test_bad_split_and_name() -> None:
    with pytest.raises(ValueError, match="split must be .*5 splits"):
        load_uci("protein", split=5)
    with pytest.raises(ValueError, match="split"):
        load_uci("boston", split=-1)
    with pytest.raises(ValueError, match="valid names"):
        load_uci("housing")
