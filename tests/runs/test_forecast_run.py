"""``bdlkit fit`` / ``evaluate`` on forecasting data: Koopa on ETTh2 (the issue's command, a
few steps) and any zoo model on a user CSV; metrics, the forecast plot and resume."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from bdlkit.cli import main
from bdlkit.runs.directory import load_run
from bdlkit.runs.yaml_files import load_yaml

PNG = b"\x89PNG\r\n\x1a\n"
FORECAST_KEYS = ("mse", "mae", "nll", "nll_gaussian", "crps", "coverage_50", "coverage_90",
                 "width_50", "width_90", "mse_original", "mae_original")


def write_series(path, rows=400, channels=3, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    values = [np.sin(2 * np.pi * t / 24 + c) + 0.1 * rng.standard_normal(rows) + c
              for c in range(channels)]
    with open(path, "w") as fh:
        fh.write("date," + ",".join(f"s{c}" for c in range(channels - 1)) + ",OT\n")
        for i in range(rows):
            stamp = f"2020-01-{1 + i // 24:02d} {i % 24:02d}:00:00"
            fh.write(stamp + "," + ",".join(f"{v[i]:.5f}" for v in values) + "\n")
    return path


@pytest.fixture(scope="module")
def koopa_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("koopa") / "R"
    rc = main(["fit", "--method", "score_vi", "--model", "koopa", "--data", "ett/ETTh2",
               "--data-kwargs", '{"horizon": 48}', "--steps", "12", "--batch-size", "32",
               "--eval-samples", "4", "--no-progress", "--out", str(out)])
    assert rc == 0
    return out


@pytest.mark.slow
def test_koopa_fit_writes_forecast_metrics_and_plot(koopa_run, capsys):
    values = json.loads((koopa_run / "metrics.json").read_text())
    for key in FORECAST_KEYS:
        assert math.isfinite(values[key]), key
    assert values["num_test"] == 2833 and values["num_draws"] == 4
    assert 0 <= values["coverage_50"] <= values["coverage_90"] <= 1
    assert values["width_50"] < values["width_90"]
    assert (koopa_run / "forecast.png").read_bytes()[:8] == PNG
    report = (koopa_run / "report.md").read_text()
    assert "crps" in report and "forecast.png" in report
    cfg = load_yaml(koopa_run / "config.yaml")
    assert cfg["model"] == "koopa" and cfg["bayesian"] == "all"


@pytest.mark.slow
def test_evaluate_reproduces_the_metrics(koopa_run, tmp_path):
    copy = tmp_path / "R"
    shutil.copytree(koopa_run, copy)
    before = (copy / "metrics.json").read_bytes()
    assert main(["evaluate", str(copy)]) == 0
    assert (copy / "metrics.json").read_bytes() == before


@pytest.mark.parametrize(("bayesian", "names"), [
    ("head", {"dec_inv.3.weight", "dec_inv.3.bias", "dec_var.3.weight", "dec_var.3.bias",
              "operators.0", "operators.1"}),
    ("operators,dec_var.3.bias", {"operators.0", "operators.1", "dec_var.3.bias"}),
])
def test_a_subset_of_koopa_weights_is_bayesian(tmp_path, bayesian, names):
    csv = write_series(tmp_path / "series.csv")
    out = tmp_path / "R"
    rc = main(["fit", "--method", "advi", "--model", "koopa", "--data", str(csv),
               "--data-kwargs", '{"horizon": 12, "features": "M"}', "--model-kwargs",
               '{"dynamic_dim": 8, "hidden_dim": 16, "num_blocks": 2}', "--bayesian",
               bayesian, "--steps", "10", "--batch-size", "16", "--eval-samples", "3",
               "--no-progress", "--out", str(out)])
    assert rc == 0
    values = json.loads((out / "metrics.json").read_text())
    assert math.isfinite(values["crps"]) and values["num_draws"] == 3
    result, _, _ = load_run(out)
    assert set(result.problem.bayesian_names) == names


def test_any_zoo_model_forecasts_a_user_csv(tmp_path):
    csv = write_series(tmp_path / "series.csv")
    out = tmp_path / "R"
    rc = main(["fit", "--method", "sghmc", "--model", "mlp", "--data", str(csv),
               "--data-kwargs", '{"horizon": 12, "target": "OT", "features": "M"}',
               "--model-kwargs", '{"hidden": [32]}', "--steps", "40", "--batch-size", "16",
               "--no-progress", "--out", str(out)])
    assert rc == 0
    values = json.loads((out / "metrics.json").read_text())
    assert values["num_draws"] >= 4 and math.isfinite(values["nll"])
    assert "diagnostics" in values  # a sampler's R-hat and ESS on forecasts too


def test_bad_forecasting_input_is_one_clear_line(tmp_path, capsys):
    csv = write_series(tmp_path / "series.csv", rows=30)
    rc = main(["fit", "--method", "map", "--model", "koopa", "--data", str(csv),
               "--data-kwargs", '{"horizon": 12}', "--steps", "5", "--out",
               str(tmp_path / "R")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "series.csv" in err
    rc = main(["fit", "--method", "map", "--model", "koopa", "--data", "digits", "--steps", "5",
               "--out", str(tmp_path / "R2")])
    err = capsys.readouterr().err
    assert rc == 2 and "forecast" in err and "Traceback" not in err
