"""The published UCI reference numbers: every method covers the nine sets, each cell is a pair
of finite floats with a non-negative spread or None, and every method is cited."""

import math

import pytest

from bdlkit.bench import uci_published
from bdlkit.data.uci import UCI_FOLDERS

METHODS = ("pbp", "deep_ensembles", "sghmc")


def test_methods_and_sources():
    assert set(uci_published.PUBLISHED) == set(METHODS)
    assert set(uci_published.SOURCES) == set(METHODS)
    assert set(uci_published.SPREAD) == set(METHODS)
    for method in METHODS:
        assert uci_published.SOURCES[method].strip()
        assert "table" in uci_published.SOURCES[method].lower()


@pytest.mark.parametrize("method", METHODS)
def test_every_set_and_metric_present(method):
    table = uci_published.PUBLISHED[method]
    assert set(table) == set(UCI_FOLDERS)
    for cells in table.values():
        assert set(cells) == {"rmse", "ll"}
    assert any(cell is not None for cells in table.values() for cell in cells.values())


@pytest.mark.parametrize("method", METHODS)
def test_cells_are_finite_pairs(method):
    for name, cells in uci_published.PUBLISHED[method].items():
        for metric, cell in cells.items():
            if cell is None:
                continue
            assert isinstance(cell, tuple) and len(cell) == 2, (method, name, metric)
            mean, spread = cell
            assert isinstance(mean, float) and isinstance(spread, float), (method, name, metric)
            assert math.isfinite(mean) and math.isfinite(spread), (method, name, metric)
            assert spread >= 0.0, (method, name, metric)
            if metric == "rmse":
                assert mean >= 0.0, (method, name, metric)


def test_log_likelihood_sign_convention():
    """Stored as log-likelihoods (higher is better): Boston negative, naval positive."""
    for method in ("pbp", "deep_ensembles"):
        table = uci_published.PUBLISHED[method]
        assert table["boston"]["ll"][0] < 0.0
        assert table["naval"]["ll"][0] > 0.0
