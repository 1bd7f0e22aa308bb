"""The ``bnn-lowdata`` suite: the verdict functions, the claims, and a tiny run end to end."""

import json
import math

import pytest
import torch

from bdlkit import bench
from bdlkit.bench import bnn_lowdata, bnn_lowdata_report
from bdlkit.bench.bnn_lowdata_report import (
    compute_claims,
    lower_verdict,
    margin_verdict,
    mean_se,
    overall_verdict,
    sigma_warning,
)
from bdlkit.evaluation.predictive import bma
from bdlkit.families.diag_gaussian import DiagGaussian, DiagGaussianParams


def test_mean_se():
    assert mean_se([]) == (None, None)
    assert mean_se([0.3]) == (0.3, None)
    mean, se = mean_se([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0) and se == pytest.approx(1 / 3 ** 0.5)


def test_lower_verdict_reaches_every_verdict():
    assert lower_verdict([-0.10, -0.11, -0.09]) == "supported"
    assert lower_verdict([0.10, 0.11, 0.09]) == "not supported"
    assert lower_verdict([-0.1, 0.1, 0.0]) == "inconclusive"
    assert lower_verdict([-0.1]) == "inconclusive"  # one seed: no standard error
    assert lower_verdict([]) == "inconclusive"


def test_margin_verdict_reaches_every_verdict():
    assert margin_verdict([0.1, -0.1, 0.0], 0.5) == "supported"
    assert margin_verdict([2.0, 2.1, 1.9], 0.5) == "not supported"
    assert margin_verdict([-2.0, -2.1, -1.9], 0.5) == "not supported"
    assert margin_verdict([0.0, 1.0, 0.5], 0.5) == "inconclusive"  # straddles the margin
    assert margin_verdict([0.0], 0.5) == "inconclusive"


def test_overall_verdict_and_sigma_warning():
    assert overall_verdict(["supported", "supported"]) == "supported"
    assert overall_verdict(["supported", "not supported"]) == "not supported"
    assert overall_verdict(["supported", "inconclusive"]) == "inconclusive"
    assert overall_verdict([]) == "inconclusive"
    assert sigma_warning(1.0) and sigma_warning(0.5) and sigma_warning(2.0)
    assert not sigma_warning(2.5) and not sigma_warning(0.3) and not sigma_warning(None)


def _records(prox_ece, advi_ece, prox_moved=30.0):
    out = []
    for seed, (p, a) in enumerate(zip(prox_ece, advi_ece)):
        for label, ece, moved in (("score_vi_prox", p, prox_moved), ("advi", a, 5.0),
                                  ("map", 0.2, None), ("ivon", 0.15, 1.0)):
            out.append({"model": "mlp", "n": 500, "label": label, "seed": seed, "status": "ok",
                        "error": 0.1 + 0.001 * seed, "nll": 10 * ece, "ece": ece,
                        "sigma_moved": moved})
    return out


def test_claims_pair_seeds_and_carry_controls():
    records = _records([0.05, 0.06, 0.04], [0.10, 0.12, 0.11])
    rows = [bnn_lowdata_report.summarize([r for r in records if r["label"] == label], {})
            for label in ("score_vi_prox", "advi", "map", "ivon")]
    claims = compute_claims(records, rows)
    assert set(claims) == {"comparable_error", "lower_ece", "lower_nll"}
    cell = claims["lower_ece"]["cells"][0]
    assert cell["verdict"] == "supported" and claims["lower_ece"]["overall"] == "supported"
    assert cell["mean_diff"] == pytest.approx(-0.06) and cell["paired_seeds"] == 3
    assert cell["values"]["map"] == pytest.approx(0.2) and not cell["sigma_warning"]
    assert claims["comparable_error"]["cells"][0]["verdict"] == "supported"  # same error
    # a failed advi seed is left out of the pairs; a σ that never moved warns
    records[1]["status"] = "error: boom"
    rows[0]["sigma_moved"] = 1.3
    claims = compute_claims(records, rows)
    assert claims["lower_nll"]["cells"][0]["paired_seeds"] == 2
    assert claims["lower_nll"]["cells"][0]["sigma_warning"]
    text = bnn_lowdata_report.claims_markdown(claims, "advi")
    assert "## Claims" in text and "MAP-like" in text and "**supported**" in text
    against_ivon = compute_claims(records, rows, "ivon")
    assert against_ivon["lower_ece"]["cells"][0]["mean_diff"] == pytest.approx(
        0.05 - 0.15)  # every seed pairs: the failed run was advi's
    assert against_ivon["lower_ece"]["cells"][0]["paired_seeds"] == 3
    assert "lower ECE than ivon" in against_ivon["lower_ece"]["text"]


def test_summary_keeps_failures():
    records = _records([0.05, 0.06], [0.1, 0.1])
    prox = [r for r in records if r["label"] == "score_vi_prox"]
    prox[1]["status"] = "error: NonFiniteError: nan"
    row = bnn_lowdata_report.summarize(prox, {"omega": 0.1})
    assert row["status"].startswith("partial (1/2 seeds)") and row["seeds"] == 1
    assert row["ece"] == pytest.approx(0.05) and "ece_std" not in row
    line = bnn_lowdata_report.table([row])[0]
    assert line["chosen"] == "omega=0.1" and line["error (%)"] == "10.00"


def test_plans_and_registration():
    assert bench.SUITES["bnn-lowdata"] is bnn_lowdata.run
    assert "bnn-lowdata" in bench.DESCRIPTIONS
    quick, full = bnn_lowdata.make_plan(True), bnn_lowdata.make_plan(False)
    assert quick.models == ("mlp",) and quick.sizes == (1000,) and quick.seeds == 1
    assert not quick.tune and full.tune and full.sizes == (500, 1000, 2000)
    assert full.seeds == 3 and full.test_size is None and full.ood_points == 2000
    assert full.protocols == ("a", "b") and bnn_lowdata.PROTOCOLS == {"a": 1e-3, "b": 1.0}
    assert [full.steps(n) for n in full.sizes] == [400, 800, 1600]  # 100 epochs of batch 128
    assert quick.steps(1000) < full.steps(1000)
    sizes = {len(bnn_lowdata.GRIDS[k]) for k in bnn_lowdata.GRIDS}
    assert sizes == {3}  # every tuned row: a grid of the same size
    assert bnn_lowdata.METHODS["score_vi_prox"] == ("score_vi", {"solver": "closed_form"})
    assert {"ivon", "ivon_opt", "laplace"} <= set(bnn_lowdata.METHODS)
    hyper = bnn_lowdata.hyper_for("cnn", "csghmc", {})
    assert hyper["lr"] == 0.05 and "init_std" not in hyper
    assert bnn_lowdata.hyper_for("mlp", "advi", {"lr": 0.01})["init_std"] == \
        bnn_lowdata.INIT_STD


@pytest.mark.slow
def test_tiny_suite_end_to_end(tmp_path, monkeypatch):
    """Both protocols, the VI rows, the peers (run by their own libraries), convergence."""
    monkeypatch.setattr(bnn_lowdata, "warm_up", lambda: None)
    methods = ("map", "advi", "score_vi_prox", "ivon", "ivon_opt", "laplace")
    plan = bnn_lowdata.Plan(("mlp",), (60,), 1, 2, tune=True, methods=methods, test_size=100,
                            ood_points=50)
    rows = bnn_lowdata.run(tmp_path, plan=plan, echo=False)
    assert [(r["protocol"], r["method"]) for r in rows] == [(p, m) for p in "ab"
                                                             for m in methods]
    for r in rows:
        assert r["status"] == "ok" and r["seeds"] == 1 and 0 <= r["error"] <= 1, r
        assert 0 <= r["ood_auroc"] <= 1 and r["nll"] > 0 and "ece_std" not in r
    for r in (r for r in rows if r["method"] in bnn_lowdata.VI_ROWS):
        assert r["sigma_moved"] > 0 and 0 <= r["unconverged"] <= 1 and "/1" in r["converged"]
        assert r["nll_at_mean"] > 0
    assert rows[1]["chosen"]["lr"] in bnn_lowdata.LR_GRID
    assert rows[4]["chosen"] == rows[3]["chosen"]  # ivon_opt runs at ivon's point
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["suite"] == "bnn-lowdata" and "bnn-lowdata" in results["command"]
    assert len(results["tuning"]) == 2 * 4 * 3 and {r["phase"] for r in results["tuning"]} == \
        {"tune"}
    assert len(results["runs"]) == 12 and set(results["claims"]) == {"advi", "ivon"}
    for claims in results["claims"].values():  # one seed: no standard error
        assert {c["overall"] for c in claims.values()} == {"inconclusive"}
    text = (tmp_path / "results.md").read_text()
    for column in ("error (%)", "nll", "ece", "brier", "OOD AUROC", "seconds", "σ median",
                   "σ moved", "NLL at μ", "chosen", "## Claims (score_vi_prox against advi)",
                   "## Claims (score_vi_prox against ivon)", "unconverged", "laplace"):
        assert column in text
    # a rerun (after a crash, or after `--settings a` and `--settings b` in two processes
    # sharing the folder) takes every cell from cells/ and computes nothing
    monkeypatch.setattr(bnn_lowdata, "fit_and_score", lambda *a, **k: pytest.fail("rerun"))
    assert bnn_lowdata.run(tmp_path, plan=plan, echo=False) == rows
    assert bnn_lowdata.run(tmp_path, plan=plan, echo=False, only_settings=("b",)) == rows[6:]
    with pytest.raises(ValueError, match=r"unknown settings \['c'\].*valid: a, b"):
        bnn_lowdata.run(tmp_path, plan=plan, echo=False, only_settings=("c",))


@pytest.mark.slow  # 2 minutes on 2 cores: `make test-slow`
def test_a_last_layer_flow_row_reports_its_monte_carlo_sigma(tmp_path, monkeypatch):
    monkeypatch.setattr(bnn_lowdata, "warm_up", lambda: None)
    plan = bnn_lowdata.Plan(("mlp",), (60,), 1, 4, tune=False, protocols=("b",),
                            methods=("advi", "advi_flow"), test_size=100, ood_points=50)
    rows = bnn_lowdata.run(tmp_path, plan=plan, echo=False)
    diag, flow = rows
    assert flow["method"] == "advi_flow" and flow["status"] == "ok"
    # after 4 steps from σ₀ both families are still near σ₀ everywhere
    for r in rows:
        assert 0.5 < r["sigma_q10"] / bnn_lowdata.INIT_STD <= r["sigma_q90"] / \
            bnn_lowdata.INIT_STD < 1.5
    assert abs(flow["sigma_median"] - diag["sigma_median"]) < 0.2 * diag["sigma_median"]


def test_nll_at_the_mean_is_the_bma_of_a_q_whose_sigma_is_negligible():
    torch.manual_seed(0)
    x, y = torch.randn(40, 1, 28, 28), torch.randint(0, 10, (40,))
    problem = bnn_lowdata.make_problem("mlp", (x, y), 0, "b")
    mu = problem.init_params()

    def q(sigma):
        rho = {k: torch.full_like(v, math.log(sigma)) for k, v in mu.items()}
        return DiagGaussian(DiagGaussianParams(mu=mu, rho=rho))

    evals = {"x": x, "y": y}
    at_mean = bnn_lowdata.at_mean(problem, q(1.0), evals)["nll_at_mean"]

    def bma_nll(sigma):
        stacked = q(sigma).sample(64, generator=torch.Generator().manual_seed(0))
        draws = [{k: v[i] for k, v in stacked.items()} for i in range(64)]
        return bnn_lowdata.score(bma(problem, draws, x), evals, None)["nll"]

    assert abs(bma_nll(1e-7) - at_mean) < 1e-5 and abs(bma_nll(1.0) - at_mean) > 0.01
