"""The score-vi-study pieces on tiny budgets: rows, columns and a diverging run recorded."""

import math

from bdlkit.bench import score_vi_study


def test_gaussian_rows_measure_the_excess_kl_of_every_row():
    rows = score_vi_study._gaussian(0, (5, 10), echo=False)
    assert len(rows) == 2 * len(score_vi_study.GAUSSIAN_ROWS)
    for row in rows:
        assert row["excess_kl@5"] > 0 and math.isfinite(row["excess_kl@10"])
    # from sigma0 = 1e-6 nothing is near the optimum after 10 steps: the numbers are real
    assert min(r["excess_kl@10"] for r in rows if "1e-06" in r["problem"]) > 10


def test_mnist_rows_report_metrics_sigma_and_status(monkeypatch):
    monkeypatch.setattr(score_vi_study, "MNIST_ROWS", [
        ("advi", {"lr": 1e-2}),
        ("score_vi", {"solver": "closed_form", "omega": 1.0, "a_min": 1e9})])
    rows = score_vi_study._mnist(0, 4, echo=False)
    assert rows[0]["status"] == "ok" and 0 <= rows[0]["error"] <= 1
    assert rows[0]["sigma_median"] > 1e-2  # moved from init_std 1e-2 in 4 steps of lr 1e-2
    assert "ok" in rows[1]["status"] or rows[1]["status"].startswith("diverged")
    assert {"error", "nll", "ece", "sigma_median", "status"} <= set(rows[1])
