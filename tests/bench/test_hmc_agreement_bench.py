"""The hmc-agreement suite: the quick run end to end (slow), and its summary (fast)."""

import json

import pytest

from bdlkit.bench import hmc_agreement


def test_summary_means_and_stds_over_seeds():
    rows = [{"accuracy": 0.9, "nll": 0.3, "ece": 0.1, "agreement": 0.8,
             "total_variation": 0.2, "train_s": 1.0},
            {"accuracy": 0.7, "nll": 0.5, "ece": 0.3, "agreement": 0.6,
             "total_variation": 0.4, "train_s": 3.0}]
    row = hmc_agreement._summary("sgld", rows)
    assert row["method"] == "sgld"
    assert row["agreement"] == pytest.approx(0.7) and row["train_s"] == pytest.approx(2.0)
    assert row["agreement_std"] == pytest.approx(0.1414, abs=1e-4)
    assert "train_s_std" not in row
    assert "agreement_std" not in hmc_agreement._summary("sgld", rows[:1])


@pytest.mark.slow
def test_quick_suite_scores_every_method_and_reuses_the_reference(tmp_path):
    out = tmp_path / "agreement"
    rows = hmc_agreement.run(out, quick=True, echo=False)
    assert [r["method"] for r in rows] == ["hmc", *hmc_agreement.METHODS]
    for r in rows:
        assert 0 <= r["agreement"] <= 1 and 0 <= r["total_variation"] <= 1
        assert 0 <= r["accuracy"] <= 1 and r["nll"] > 0
    results = json.loads((out / "results.json").read_text())
    assert results["reference"]["chains"] == 2
    stamp = (out / "runs" / "reference" / "probs.safetensors").stat().st_mtime_ns
    hmc_agreement.run(out, quick=True, echo=False)  # the reference is reused, not rebuilt
    assert (out / "runs" / "reference" / "probs.safetensors").stat().st_mtime_ns == stamp
