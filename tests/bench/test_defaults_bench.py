"""The defaults study: every method's default beats the trivial predictor (or said before
the run that it cannot), and the verdict logic itself."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from bdlkit import algorithms
from bdlkit.bench import defaults
from bdlkit.core.errors import DefaultsWarning


@pytest.mark.slow  # 2-3 minutes on 2 cores: `make test-slow` (the table is the committed bench)
def test_the_quick_suite_beats_the_trivial_predictor_with_every_default(tmp_path: Path):
    """digits and yacht at --epochs 30 and the own-module hetero-300 through bdlkit.infer,
    with no option: each method beats the majority class / mean predictor, or warned before
    the run (fisher_vi on a network, gsm on a network regression: at seed 0 its yacht RMSE
    is 16.8 against the mean's 15.4, its hetero-300 RMSE 0.88 against 0.84)."""
    rows = defaults.run(tmp_path, quick=True, echo=False)
    methods = sorted(m for m in algorithms.METHODS if m not in defaults.QUICK_SKIP
                     and m not in defaults.NO_DEFAULT)
    assert [(r["problem"], r["method"]) for r in rows] == [
        (p, m) for p in defaults.QUICK_PROBLEMS for m in methods]
    bad = [(r["problem"], r["method"], r["value"], r["baseline"]) for r in rows
           if r["verdict"] == "fails"]
    assert not bad
    assert all(r["verdict"] == "beats" for r in rows if r["method"] != "fisher_vi"
               and (r["method"], r["problem"]) not in {("gsm", "yacht"), ("gsm", "hetero-300")})
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["counts"]["fails"] == 0 and len(saved["rows"]) == len(rows)
    assert "bdlkit bench defaults --quick" in (tmp_path / "results.md").read_text()


def test_a_failed_run_is_declared_only_after_a_defaults_warning():
    values = {"accuracy": 0.5, "nll": 0.7, "health": {"majority": "..."}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("unrelated", UserWarning, stacklevel=1)
    assert defaults.row("p", "m", values, ("accuracy", 0.5), caught, 1.0)["verdict"] == "fails"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("this default cannot serve it", DefaultsWarning, stacklevel=1)
    row = defaults.row("p", "m", values, ("accuracy", 0.5), caught, 1.0)
    assert row["verdict"] == "declared" and row["declared"] == ["this default cannot serve it"]
    good = {**values, "health": {"rhat": "..."}}
    assert defaults.row("p", "m", good, ("accuracy", 0.4), caught, 1.0)["verdict"] == "beats"


@pytest.mark.parametrize("pixels", [None, 255])
def test_the_two_class_file_is_imbalanced_like_the_users(tmp_path: Path, pixels):
    path = defaults.write_two_class(tmp_path / "two.npz", pixels=pixels)
    with np.load(path, allow_pickle=False) as f:
        assert np.bincount(f["y_train"]).tolist() == [456, 168]
        assert np.bincount(f["y_test"]).tolist() == [400, 150]
        assert f["x_train"].shape == (624, 1, 28, 28)
        assert f["x_train"].max() == (255 if pixels else pytest.approx(1.0))


def test_the_study_runs_a_users_own_regression_module_through_infer(monkeypatch):
    """The own-module problems are in the full study and in --quick (hetero-300); a row
    scores the BMA against the training mean, and a run that diverges is a failed row
    (not a crash of the suite)."""
    from bdlkit.bench import defaults_own
    from bdlkit.core.errors import NonFiniteError

    assert "hetero-300" in defaults.QUICK_PROBLEMS and set(defaults_own.OWN_PROBLEMS) == {
        "hetero-300", "homo-300"}
    ds = defaults_own.own_data("hetero-300")
    assert (ds.x_train.shape, ds.y_test.shape) == ((300, 1), (defaults_own.TEST,))
    row = defaults_own.run_own("hetero-300", "map", epochs=20)
    assert row["metric"] == "rmse" and row["verdict"] == "beats" and row["value"] < row["baseline"]

    def diverge(*args, **kwargs):
        raise NonFiniteError("sgld: the log density became NaN or infinite at step 7. Lower lr")

    monkeypatch.setattr("bdlkit.infer", diverge)
    failed = defaults_own.run_own("homo-300", "sgld")
    assert failed["verdict"] == "fails" and failed["value"] is None
    assert failed["health"].startswith("diverged: sgld: the log density became NaN")
