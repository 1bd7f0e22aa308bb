"""``bdlkit bench vision``: pretraining, fine-tuning from the written weights, the table
and the verdict (a tiny size here; the committed quick run is under benchmarks/results)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from bdlkit.bench import vision

TINY = vision.Sizes(train=64, map_steps=3, vi_steps=3, test=40, draws=2, seeds=1, batch=32)


@pytest.mark.slow
def test_tiny_run_writes_table_verdict_and_fine_tunes_from_the_pretrained_weights(
        tmp_path: Path):
    rows = vision.run(tmp_path, sizes=TINY, models=("vit",), echo=False)
    assert [r["method"] for r in rows] == ["map", "advi", "score_vi", "ivon", "ivon_opt",
                                           "laplace"]
    assert all(0 <= r["error"] <= 1 and math.isfinite(r["nll"]) for r in rows)
    assert all(math.isfinite(r["sigma_moved"]) for r in rows[1:4])
    folder = tmp_path / "runs" / "vit" / "seed0"
    weights = folder / "pretrained.safetensors"
    for method in ("advi", "score_vi", "ivon"):
        config = (folder / method / "config.yaml").read_text()
        assert f"pretrained: {weights}" in config
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["verdicts"][0]["verdict"] == "inconclusive (one seed)"
    assert "## Claim" in (tmp_path / "results.md").read_text()


def _rows(d_error: list[float], d_nll: list[float], d_ece: list[float]) -> list[dict]:
    rows = []
    for s, (e, n, c) in enumerate(zip(d_error, d_nll, d_ece)):
        base = {"model": "m", "seed": s}
        rows.append({**base, "method": "advi", "error": 0.2, "nll": 1.0, "ece": 0.1,
                     "sigma_moved": 3.0})
        rows.append({**base, "method": "score_vi", "error": 0.2 + e, "nll": 1.0 + n,
                     "ece": 0.1 + c, "sigma_moved": 5.0})
    return rows


@pytest.mark.parametrize("d, word", [
    (([0.001, -0.002, 0.0], [-0.1, -0.12, -0.11], [-0.02, -0.03, -0.025]), "supported"),
    (([0.0, 0.001, -0.001], [0.1, 0.12, 0.11], [-0.02, -0.03, -0.025]), "not supported"),
    (([0.05, 0.06, 0.055], [-0.1, -0.12, -0.11], [-0.02, -0.03, -0.025]), "not supported"),
    (([0.0, 0.0, 0.0], [-0.1, 0.1, 0.0], [-0.02, 0.02, 0.0]), "inconclusive"),
])
def test_verdict_needs_same_error_and_lower_nll_and_ece_beyond_the_interval(d, word):
    got = vision.verdict(_rows(*d), "m")
    assert got["verdict"] == word
    assert got["d_nll"] == pytest.approx(float(torch.tensor(d[1]).mean()))


def test_a_sigma_that_never_moved_makes_the_verdict_inconclusive():
    rows = _rows([0.0, 0.001, 0.0], [-0.1, -0.12, -0.11], [-0.02, -0.03, -0.025])
    for r in rows:
        if r["method"] == "advi":
            r["sigma_moved"] = 1.2
    assert vision.verdict(rows, "m")["verdict"] == "inconclusive (σ of advi never left σ₀)"
