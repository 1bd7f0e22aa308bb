"""The flow-stability suite: one configuration per row, measured against the target."""

import json

import pytest

from bdlkit.bench import flow_stability


@pytest.mark.slow
def test_a_run_is_measured_against_the_target_and_a_tiny_suite_writes_its_table(
        tmp_path, monkeypatch):
    rec = flow_stability.run_one("advi", {"lr": 2e-2}, steps=100, seed=0)
    assert rec["status"] == "ok" and rec["mean_err_sd"] < 2.0  # it moved from 6 sd off
    monkeypatch.setattr(flow_stability, "CONFIGS", {
        "advi": ("advi", {"lr": ("annealed", 1e-2)}),
        "score_vi": ("score_vi", {"lr": 3e-3})})
    monkeypatch.setattr(flow_stability, "DRAWS", 4)
    rows = flow_stability.run(tmp_path, quick=True, echo=False, steps=20)
    assert [r["config"] for r in rows] == ["advi", "score_vi"]
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["suite"] == "flow-stability" and len(data["runs"]) == 4
    assert "per_seed" in (tmp_path / "results.md").read_text()
