"""The multimodal part of the synthetic suite: its targets, its measurements (which a q that
never left its start cannot fool), its verdict and its files."""

import json
import math

import pytest
import torch
from scipy import stats

from bdlkit.bench import synthetic, synthetic_modes, synthetic_modes_report

F64 = torch.float64


@pytest.mark.parametrize("components", [2, 5])
def test_neighbouring_modes_are_8_sd_apart(components):
    means = synthetic_modes.mode_means(components, 10)
    gaps = torch.cdist(means, means) + 1e9 * torch.eye(components, dtype=F64)
    assert torch.allclose(gaps.min(1).values, torch.full((components,), 8.0, dtype=F64))


@pytest.mark.parametrize("dim", [2, 10])
def test_the_ball_radius_is_the_chi2_quantile(dim):
    for p in (0.9, 0.99):
        assert synthetic_modes.chi2_quantile(dim, p) == pytest.approx(stats.chi2.ppf(p, dim),
                                                                      rel=1e-9)


class _Exact:
    """The target itself as a q."""

    def __init__(self, target):
        self.target = target

    def sample(self, n, generator):
        return self.target.sample(n, generator)

    def log_prob(self, theta):
        return self.target.log_prob(theta)


@pytest.mark.parametrize("setting", [s for s in synthetic_modes.settings(False)
                                     if s.kind == "modes"], ids=lambda s: s.name)
def test_the_target_itself_finds_every_mode_and_the_start_finds_none(setting):
    target = synthetic_modes.make_target(setting, seed=0)
    k = setting.components
    exact = synthetic_modes.measure(_Exact(target), target, setting, seed=0)
    assert abs(exact["reverse_kl"]) < 1e-9 and abs(exact["forward_kl"]) < 1e-9
    assert exact["modes_found"] == k and exact["outside"] < 0.13
    assert all(abs(m - 0.9 / k) < 0.03 for m in exact["mode_mass"])  # 4 se at n = 4000
    q0 = synthetic_modes.start_record(setting, seed=0)["final"]
    assert q0["modes_found"] == 0  # no credit for staying put
    assert max(q0["mode_mass"]) < 0.5 * 0.9 / k
    assert q0["reverse_kl"] > 0.5 and q0["forward_kl"] > 0.5


def _summary(found):
    return [{"setting": s, "row": row, "modes_found": n}
            for s, per_row in found.items() for row, n in per_row.items()]


def test_the_verdict_reads_the_modes_found():
    keep = {"score_vi_flow": 2, "advi_flow": 1, "advi_flow_stl": 1, "start": 0}
    tie = {"score_vi_flow": 5, "advi_flow": 5, "advi_flow_stl": 2, "start": 0}
    lose = {"score_vi_flow": 1, "advi_flow": 3, "advi_flow_stl": 1, "start": 0}
    failed = {"score_vi_flow": 2, "advi_flow_stl": 1, "start": 0}
    verdict = synthetic_modes_report.verdict
    assert verdict(_summary({"modes2-d2": keep, "modes5-d2": tie}))[1].startswith(
        "**supported**")
    assert verdict(_summary({"modes2-d2": tie, "modes5-d2": lose}))[1].startswith(
        "**not supported**")
    table, text = verdict(_summary({"modes2-d2": keep, "modes5-d2": lose}))
    assert text.startswith("**inconclusive**") and table[1]["modes"] == 5
    _, text = verdict(_summary({"modes2-d2": tie, "modes5-d2": failed}))  # advi_flow failed
    assert text.startswith("**inconclusive**") and "1 settings lack a number" in text


@pytest.mark.slow
def test_a_tiny_run_writes_the_multimodal_files_and_reuses_them(tmp_path):
    plan = synthetic.Plan(budget=160, time_limit=20.0, seeds=(0,), num_points=4)
    out = tmp_path / "out"
    synthetic.run(out, rows=("score_vi_flow", "advi_flow"), plan_override=plan, echo=False,
                  only_settings=("modes2-d2",))
    data = json.loads((out / "modes.json").read_text())
    assert {r["row"] for r in data["records"]} == {"start", "score_vi_flow", "advi_flow"}
    assert {r["setting"] for r in data["records"]} == {"modes2-d2"}
    assert all(r["score_evals"] <= 160 and r["status"] == "ok" for r in data["records"])
    assert data["claim"]["verdict"].split("**")[1] in ("supported", "not supported",
                                                       "inconclusive")
    assert "does score-based VI avoid" in (out / "report.md").read_text()
    assert "### Verdict" in (out / "results.md").read_text()  # what `bdlkit bench` prints
    synthetic.run(out, rows=("advi",), plan_override=plan, echo=False,
                  only_settings=("modes2-d2",), reuse=out)
    again = json.loads((out / "modes.json").read_text())
    assert {r["row"] for r in again["records"]} == {"start", "score_vi_flow", "advi_flow",
                                                    "advi"}
    assert again["reused"]["records"] == len(data["records"]) - 1  # the start is made again
    flow = [r for r in again["records"] if r["row"] == "advi_flow"]
    assert flow == [r for r in data["records"] if r["row"] == "advi_flow"]
    assert math.isfinite(flow[0]["final"]["reverse_kl"])
