"""The score-vi-study on a tiny plan: the grids, the choice rule, the paired decision rule of
the ablations, the interleaved timing and a failing configuration kept as a record."""

import json

import pytest
import torch

from bdlkit.bench import score_vi_study


def test_the_chosen_point_is_the_lowest_mean_relative_nll():
    records = [
        {"protocol": "a", "point": {"w": 1}, "status": "ok", "nll": 0.40},
        {"protocol": "b", "point": {"w": 1}, "status": "ok", "nll": 0.60},
        {"protocol": "a", "point": {"w": 2}, "status": "ok", "nll": 0.44},
        {"protocol": "b", "point": {"w": 2}, "status": "ok", "nll": 0.30},
        {"protocol": "a", "point": {"w": 3}, "status": "error: boom"},
        {"protocol": "b", "point": {"w": 3}, "status": "ok", "nll": 0.29},
    ]
    # w=1: (1 + 2)/2 = 1.5; w=2: (1.1 + 1.0)/2 = 1.05; w=3 failed in protocol a
    assert score_vi_study.chosen_point(records) == {"w": 2}
    assert score_vi_study.chosen_point([records[4]]) is None


def test_an_ablation_changes_a_default_only_when_better_beyond_noise_in_every_protocol():
    def rec(label, protocol, shift):
        g = torch.Generator().manual_seed(hash((label, protocol)) % 1000)
        each = 0.3 + 0.05 * torch.randn(2000, generator=g, dtype=torch.float64)
        return {"label": label, "protocol": protocol, "status": "ok",
                "_nll_each": each if label == "chosen" else None, "shift": shift}

    base = {p: rec("chosen", p, 0) for p in "ab"}
    ablations = list(base.values())
    for name, shifts in (("clearly better", (-0.02, -0.03)), ("better in a only", (-0.02, 0.0)),
                         ("noise", (-1e-4, -1e-4))):
        for p, shift in zip("ab", shifts, strict=True):
            r = rec(name, p, shift)
            r["_nll_each"] = base[p]["_nll_each"] + shift + 5e-2 * torch.randn(
                2000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
            ablations.append(r)
    plan = score_vi_study.Plan(10, 1, ("a", "b"), 1, ("clearly better", "better in a only",
                                                      "noise"), 1, ivon_ablations=())
    decisions = score_vi_study.decide(ablations, plan)
    assert decisions["clearly better"]["decision"] == "change the default"
    assert decisions["better in a only"]["decision"] == "keep"
    assert decisions["noise"]["decision"] == "keep"
    assert decisions["clearly better"]["diff"]["a"]["mean"] < -0.019


@pytest.mark.slow
def test_a_tiny_study_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setattr(score_vi_study, "warm_up", lambda: None)
    monkeypatch.setattr(score_vi_study, "TIMING_STEPS", 2)
    plan = score_vi_study.Plan(60, 1, ("a",), 1, ("α = 0", "first estimate"), 1, val_size=200,
                               timing_rounds=1, ivon_ablations=("ivon β2 0.999",))
    rows = score_vi_study.run(tmp_path, plan=plan, echo=False)
    assert [r["row"] for r in rows] == ["map", "advi", "ivon", "closed_form",
                                        "closed_form IVON form"]
    assert all(r["status"] == "ok" and 0 <= r["error"] <= 100 for r in rows)
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["chosen"]) == {"map", "advi", "ivon", "closed_form"}
    assert len(results["grids"]) == 4 and len(results["ablations"]) == 5
    assert set(results["decisions"]) == {"α = 0", "first estimate", "ivon β2 0.999"}
    assert all("_nll_each" not in r for r in results["grids"] + results["ablations"])
    assert {t["row"] for t in results["timing"]} >= {"advi", "ivon", "closed_form"}
    assert next(t for t in results["timing"] if t["row"] == "ivon")["vs_ivon"] == 1.0
    text = (tmp_path / "results.md").read_text()
    assert "**Ablations**" in text and "**Time per step**" in text
