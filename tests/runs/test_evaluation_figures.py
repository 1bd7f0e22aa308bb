"""The evaluation plots (regression intervals, OOD entropy/ROC, corruption severity): the
numbers they show, the PNGs, the no-matplotlib path and their place in a run's report.md."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import torch

from bdlkit import metrics
from bdlkit.cli import main
from bdlkit.evaluation.predictive import ClassificationBMA, RegressionBMA
from bdlkit.metrics.forecasting import GaussianMixture
from bdlkit.runs import evaluation_figures as ef

PNG = b"\x89PNG\r\n\x1a\n"
QUICK = ["--steps", "40", "--log-every", "20", "--no-progress", "--seed", "0"]


def _png(path) -> bool:
    return path is not None and path.read_bytes()[:8] == PNG and path.stat().st_size > 10_000


def _mixture(n: int = 400, s: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centre = torch.randn(n, 1, generator=g, dtype=torch.float64)
    loc = centre + 0.4 * torch.randn(s, n, 1, generator=g, dtype=torch.float64)
    scale = 0.3 + torch.rand(s, n, 1, generator=g, dtype=torch.float64)
    y = centre + 0.9 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    return GaussianMixture(loc, scale), y


def _bma(n: int, k: int, sharp: float, seed: int) -> ClassificationBMA:
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.log_softmax(sharp * torch.randn(n, k, generator=g, dtype=torch.float64), -1)
    expected = 0.8 * metrics.classification.entropy_from_log_probs(log_probs)
    return ClassificationBMA(log_probs, expected, num_samples=4)


def _corruption_metrics():
    names = ("gaussian_noise", "contrast")
    cells = {name: {str(s): {"accuracy": 0.9 - 0.08 * s * (i + 1), "nll": 0.3 + s,
                             "ece": 0.02 * s * (i + 1)} for s in range(1, 6)}
             for i, name in enumerate(names)}
    flat = [c for by in cells.values() for c in by.values()]
    cells["mean"] = {k: sum(c[k] for c in flat) / len(flat) for k in ("accuracy", "nll", "ece")}
    return {"accuracy": 0.95, "ece": 0.01, "nll": 0.2, "num_test": 360, "corruptions": cells}


# ----------------------------------------------------------------------------- numbers
def test_coverage_curve_equals_a_naive_count_inside_the_mixture_intervals():
    mixture, y = _mixture()
    curve = ef.coverage_curve(mixture.cdf(y))
    assert len(curve) == len(ef.COVERAGE_LEVELS) == 9
    for level, value in zip(ef.COVERAGE_LEVELS, curve, strict=True):
        lo, hi = mixture.interval(level)
        naive = sum(int(a <= t <= b) for a, t, b in zip(lo.flatten().tolist(),
                                                        y.flatten().tolist(),
                                                        hi.flatten().tolist(), strict=True))
        assert value == naive / len(y), level
    assert curve == sorted(curve) and 0 < curve[0] < curve[-1] < 1


def test_plotted_points_spread_over_the_sorted_predictions():
    mean = torch.tensor([[3.0], [1.0], [2.0], [0.0], [4.0]])
    assert ef.plotted_points(mean, 10).tolist() == [3, 1, 2, 0, 4]
    assert ef.plotted_points(mean, 3).tolist() == [3, 2, 4]  # lowest, middle, highest


def test_ood_roc_numbers_equal_the_metrics_values():
    bma_in, bma_out = _bma(300, 10, 4.0, 0), _bma(200, 10, 1.0, 1)
    values = metrics.ood_metrics(bma_in, bma_out)
    roc = ef.ood_roc(bma_in.entropy, bma_out.entropy)
    assert roc["auroc"] == values["ood_auroc"] and roc["aupr"] == values["ood_aupr"]
    assert roc["base_rate"] == values["ood_aupr_base_rate"] == 200 / 500
    assert roc["fpr"][0] == roc["tpr"][0] == 0 and roc["fpr"][-1] == roc["tpr"][-1] == 1
    assert np.trapezoid(roc["tpr"], roc["fpr"]) == pytest.approx(roc["auroc"], abs=1e-12)
    assert 0.8 < roc["auroc"] < 1  # the flatter OOD predictive has the higher entropy


def test_severity_curves_start_at_the_clean_value_and_average_per_severity():
    values = _corruption_metrics()
    acc = ef.severity_curves(values, "accuracy")
    assert set(acc) == {"gaussian_noise", "contrast", "mean"}
    assert acc["gaussian_noise"] == pytest.approx([0.95, 0.82, 0.74, 0.66, 0.58, 0.5])
    assert acc["mean"] == pytest.approx([0.95, 0.78, 0.66, 0.54, 0.42, 0.3])
    assert ef.severity_curves(values, "ece")["contrast"][0] == 0.01
    with pytest.raises(ValueError, match="--corruptions"):
        ef.severity_curves({"accuracy": 1.0, "corruptions": {"mean": {}}}, "accuracy")


# ----------------------------------------------------------------------------- PNGs
def test_each_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    mixture, y = _mixture(n=120)
    points = ef.plotted_points(mixture.mean, 50)
    sub = GaussianMixture(mixture.loc[:, points], mixture.scale[:, points])
    path = ef.intervals_plot(y, mixture.mean, mixture.cdf(y), sub, points,
                             tmp_path / "intervals.png", shift=10.0, scale=2.0, title="t")
    assert path == tmp_path / "intervals.png" and _png(path)
    bma_in, bma_out = _bma(100, 10, 4.0, 0), _bma(80, 10, 1.0, 1)
    assert _png(ef.ood_plot(bma_in.entropy, bma_out.entropy, tmp_path / "ood.png",
                            ood_name="notmnist", title="t"))
    assert _png(ef.corruption_plot(_corruption_metrics(), tmp_path / "corruptions.png"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corruptions.png", "intervals.png",
                                                          "ood.png"]  # no temp files left


def test_without_matplotlib_every_plot_returns_none(tmp_path, monkeypatch):
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends",
                   "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
    mixture, y = _mixture(n=30)
    points = torch.arange(30)
    assert ef.intervals_plot(y, mixture.mean, mixture.cdf(y), mixture, points,
                             tmp_path / "i.png") is None
    bma = _bma(20, 3, 1.0, 0)
    assert ef.ood_plot(bma.entropy, bma.entropy, tmp_path / "o.png") is None
    assert ef.corruption_plot(_corruption_metrics(), tmp_path / "c.png") is None

    class NoPrediction:  # the prediction pass is skipped when nothing can be drawn
        def predict(self, *args, **kwargs):
            raise AssertionError("predicted without matplotlib")

    class Ev:
        test = RegressionBMA(mixture.mean, mixture.var, 8, cdf=mixture.cdf(y))
        metrics = {"num_draws": 8}

    assert ef.regression_intervals_figure(NoPrediction(), Ev(), None, tmp_path / "r.png") is None
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- runs
def _report_plots(run_dir) -> list[str]:
    text = (run_dir / "report.md").read_text()
    section = text.split("## Plots\n")[1]
    return [line.split("](")[1].rstrip(")") for line in section.splitlines()
            if line.startswith("![")]


def test_classification_report_links_ood_and_corruption_plots_and_keeps_them_on_reevaluation(
        tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sgld"
    assert main(["fit", "--method", "sgld", "--data", "digits", "--out", str(out), *QUICK]) == 0
    assert main(["evaluate", str(out), "--ood", "digits", "--corruptions"]) == 0
    plots = _report_plots(out)
    assert {"reliability.png", "ood.png", "corruptions.png"} <= set(plots)
    assert "intervals.png" not in plots
    for name in ("ood.png", "corruptions.png"):
        assert _png(out / name), name
    values = json.loads((out / "metrics.json").read_text())
    assert values["ood_aupr_base_rate"] == pytest.approx(0.5)  # the test split against itself
    from bdlkit.evaluation import evaluate
    from bdlkit.runs import report
    from bdlkit.runs.directory import load_run

    result, cfg, ds = load_run(out)
    head = evaluate(result, ds, max_test=30, ood=ds, diagnostics=False)  # first 30 rows
    assert {"reliability.png", "ood.png"} <= set(report.write(out, cfg, result, head, ds))
    # no --ood or --corruptions this time: their metrics and figures are kept, and say so
    assert main(["evaluate", str(out)]) == 0
    kept = json.loads((out / "metrics.json").read_text())
    assert {k: kept[k] for k in values if k.startswith("ood_") or k == "corruptions"} == {
        k: values[k] for k in values if k.startswith("ood_") or k == "corruptions"}
    assert set(kept["kept_from_earlier"]) == {"ood", "corruptions"}
    assert kept["kept_from_earlier"]["ood"] == {"num_draws": values["num_draws"],
                                                "num_test": values["num_test"]}
    assert {"ood.png", "corruptions.png"} <= set(_report_plots(out))
    assert _png(out / "ood.png") and _png(out / "corruptions.png")
    assert "kept from an earlier evaluation" in (out / "report.md").read_text()
    assert main(["evaluate", str(out), "--corruptions", "--max-test", "40"]) == 0  # recomputed
    again = json.loads((out / "metrics.json").read_text())
    assert set(again["kept_from_earlier"]) == {"ood"} and again["num_test"] == 40


def test_regression_report_links_intervals_drawn_from_the_evaluations_mixture(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "uci"
    rc = main(["fit", "--method", "sgld", "--data", "uci/yacht", "--lr", "0.01", "--out",
               str(out), *QUICK])
    if rc == 2 and not (out / "config.yaml").exists():
        pytest.skip("UCI data not available here")
    assert rc == 0
    assert "intervals.png" in _report_plots(out) and _png(out / "intervals.png")
    assert not {"ood.png", "corruptions.png", "reliability.png"} & set(_report_plots(out))

    from bdlkit.evaluation import evaluate
    from bdlkit.runs.directory import load_run

    result, cfg, ds = load_run(out)
    ev = evaluate(result, ds, num_samples=cfg.eval_samples, diagnostics=False)
    values = json.loads((out / "metrics.json").read_text())
    curve = ef.coverage_curve(ev.test.cdf)
    assert curve[ef.COVERAGE_LEVELS.index(0.5)] == pytest.approx(values["coverage_50"])
    assert curve[ef.COVERAGE_LEVELS.index(0.9)] == pytest.approx(values["coverage_90"])
    # the plotted intervals come from the evaluation's draws, all of them or max_draws
    mixture = ef.evaluation_mixture(result, ds.x_test, values["num_draws"])
    assert mixture.num_components == values["num_draws"] == 20
    assert torch.allclose(mixture.cdf(ds.y_test.double()), ev.test.cdf.reshape(
        mixture.element_shape), atol=1e-6)
    thinned = evaluate(result, ds, max_draws=5, diagnostics=False)
    mixture = ef.evaluation_mixture(result, ds.x_test, thinned.metrics["num_draws"])
    assert mixture.num_components == 5
    assert torch.allclose(mixture.cdf(ds.y_test.double()), thinned.test.cdf.reshape(
        mixture.element_shape), atol=1e-6)
    from bdlkit.runs import report

    head = evaluate(result, ds, max_test=10, diagnostics=False)  # the first 10 test rows
    assert "intervals.png" in report.write(out, cfg, result, head, ds)
    assert math.isclose(values["rmse"], ds.meta["y_std"] * metrics.regression.rmse(
        ev.test.mean, ds.y_test), rel_tol=1e-9)
