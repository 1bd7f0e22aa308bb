"""`bdlkit evaluate` end to end: every metric that applies, written to metrics.json and report.md."""

import json
import shutil

import numpy as np
import pytest

from bdlkit.cli import main

QUICK = ["--steps", "60", "--log-every", "20", "--no-progress", "--seed", "0"]


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "sgld"
    assert main(["fit", "--method", "sgld", "--data", "digits", "--out", str(out), *QUICK]) == 0
    return out


@pytest.fixture
def run(digits_run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(digits_run, dst)
    return dst


def _metrics(run_dir):
    return json.loads((run_dir / "metrics.json").read_text())


def test_issue_acceptance_evaluate_digits_writes_nll_ece_brier(run):
    assert main(["evaluate", str(run)]) == 0
    values = _metrics(run)
    for key in ("accuracy", "nll", "ece", "brier", "ece_all_class", "mce_all_class", "entropy",
                "mutual_information", "sample_accuracy", "sample_nll"):
        assert isinstance(values[key], float), key
    assert values["sample_nll"] >= values["nll"]  # the BMA's NLL is below the mean draw's
    diag = values["diagnostics"]
    assert diag["chain_draws"] == values["num_draws"] == 30
    assert 0 <= diag["weights_rhat_frac_below_1.1"] <= 1 and diag["weights_ess_sum"] > 0
    assert set(diag["layers"]) == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}
    text = (run / "report.md").read_text()
    assert "Sampling diagnostics" in text and "per training second" in text
    for png in ("reliability.png", "history.png", "rhat_layers.png", "ess_layers.png",
                "trace.png"):
        assert (run / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_reference_probabilities_give_agreement_and_tv(run, tmp_path):
    from bdlkit.runs.directory import load_run

    result, cfg, ds = load_run(run)
    probs = result.predict(ds.x_test).double().numpy()
    np.save(tmp_path / "same.npy", probs)
    assert main(["evaluate", str(run), "--reference", str(tmp_path / "same.npy")]) == 0
    values = _metrics(run)
    assert values["agreement"] == 1.0 and values["total_variation"] < 1e-6
    np.save(tmp_path / "short.npy", probs[:10])
    assert main(["evaluate", str(run), "--reference", str(tmp_path / "short.npy")]) == 2


def test_corruptions_six_kinds_five_severities(run):
    assert main(["evaluate", str(run), "--corruptions"]) == 0
    corr = _metrics(run)["corruptions"]
    names = {"gaussian_noise", "shot_noise", "gaussian_blur", "contrast", "brightness",
             "pixelate"}
    assert set(corr) == names | {"mean"}
    for name in names:
        assert set(corr[name]) == {"1", "2", "3", "4", "5"}
    clean = _metrics(run)["accuracy"]
    assert corr["gaussian_noise"]["5"]["accuracy"] < clean  # the shift hurts
    # digits' degenerate border pixels keep their clean value (issue 43, item 9): contrast
    # and brightness no longer put every image in one class at every severity
    assert _metrics(run)["corruption_frozen_pixels"] == 8
    for name in ("contrast", "brightness"):
        mild, severe = corr[name]["1"]["accuracy"], corr[name]["5"]["accuracy"]
        assert mild > 0.3 and mild > severe, (name, mild, severe)
    assert "Covariate shift" in (run / "report.md").read_text()


def test_regression_run_metrics(tmp_path):
    out = tmp_path / "uci"
    argv = ["fit", "--method", "sgld", "--data", "uci/yacht", "--lr", "0.01", "--out", str(out),
            *QUICK]
    rc = main(argv)
    if rc == 2 and not (out / "config.yaml").exists():
        pytest.skip("UCI data not available here")
    assert rc == 0
    values = _metrics(out)
    for key in ("rmse", "mae", "nll", "nll_mixture", "coverage_50", "coverage_90",
                "coverage_95"):
        assert isinstance(values[key], float), key
    assert values["coverage_50"] <= values["coverage_90"] <= values["coverage_95"]
    assert main(["evaluate", str(out), "--corruptions"]) == 2  # classification only


def test_diagnostics_stream_the_store_and_never_load_every_draw(digits_run):
    from bdlkit.evaluation.sampling import sampler_diagnostics
    from bdlkit.runs.directory import load_run

    result, cfg, ds = load_run(digits_run)
    diag = sampler_diagnostics(result, ds.x_test[:16])
    assert result._samples is None  # nothing cached: one parameter at a time
    assert diag["chain_draws"] == 30 and diag["function_probe_points"] == 16


def test_single_draw_runs_have_no_mutual_information(tmp_path):
    out = tmp_path / "map"
    assert main(["fit", "--method", "map", "--data", "digits", "--out", str(out), *QUICK]) == 0
    assert main(["evaluate", str(out), "--ood", "digits"]) == 0
    values = _metrics(out)
    assert "mutual_information" not in values and "ood_auroc_mi" not in values
    assert values["ood_auroc"] == pytest.approx(0.5) and "diagnostics" not in values


def test_reference_must_hold_probabilities(run, tmp_path, capsys):
    from bdlkit.runs.directory import load_run

    result, cfg, ds = load_run(run)
    log_probs = result.predict(ds.x_test).double().log().numpy()
    np.save(tmp_path / "log.npy", log_probs)
    assert main(["evaluate", str(run), "--reference", str(tmp_path / "log.npy")]) == 2
    assert "log probabilities" in capsys.readouterr().err


def test_overwriting_a_sampler_run_with_map_leaves_no_stale_plots(run):
    assert (run / "rhat_layers.png").exists()
    assert main(["fit", "--method", "map", "--data", "digits", "--out", str(run), "--overwrite",
                 *QUICK]) == 0
    assert not (run / "rhat_layers.png").exists() and not (run / "trace.png").exists()


def test_vi_run_report_has_sigma_per_layer_and_the_run_warns_it_never_moved(tmp_path):
    from bdlkit.core.errors import PointEstimateWarning

    out = tmp_path / "advi"
    with pytest.warns(PointEstimateWarning, match="close to a point estimate"):
        assert main(["fit", "--method", "advi", "--data", "digits", "--out", str(out),
                     *QUICK[2:], "--steps", "5"]) == 0
    text = (out / "report.md").read_text()
    section = text.split("## Variational σ (per layer)")[1].split("## Run")[0]
    for row in ("| net.0.weight | 6400 |", "| net.2.bias | 10 |", "| all | 7510 |"):
        assert row in section, row


def test_evaluation_holds_the_ood_bma(digits_run):
    from bdlkit import data
    from bdlkit.evaluation.summary import evaluate
    from bdlkit.runs.directory import load_run

    result, cfg, ds = load_run(digits_run)
    assert evaluate(result, ds, diagnostics=False).ood is None
    ev = evaluate(result, ds, ood=data.load("digits", root=cfg.data_root), diagnostics=False)
    assert ev.ood is not None and ev.ood.log_probs.shape == ev.test.log_probs.shape
    assert ev.ood.num_samples == ev.metrics["num_draws"]


def test_reduced_evaluation_prints_estimate_bar_and_summary(run, capsys):
    argv = ["evaluate", str(run), "--ood", "digits", "--corruptions", "--num-draws", "5",
            "--max-test", "100"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    estimate = captured.err.splitlines()[0]
    assert estimate.startswith("evaluate: 4 prediction passes: test 5 draws × 100 rows")
    assert "corruptions 5 draws × 30 cells × 100 rows" in estimate
    assert "probe 30 draws" in estimate  # diagnostics: the whole chain
    assert "evaluate: 100%" in captured.err  # the bar reached its total
    out = captured.out
    assert "accuracy" in out and "(100 test rows, 5 draws)" in out
    assert "AUROC 0.5000" in out and "base rate 0.5000" in out
    assert "severity" in out and "mean over 6 corruptions" in out
    assert "run health:" in out and "  ! ood_aupr:" in out
    values = json.loads((run / "metrics.json").read_text())
    assert values["num_draws"] == 5 and values["num_test"] == 100
    assert values["diagnostics"]["chain_draws"] == 30


def test_no_progress_keeps_the_estimate_line_only(run, capsys):
    assert main(["evaluate", str(run), "--no-progress", "--max-test", "50"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("evaluate: 2 prediction passes") and "%|" not in err
