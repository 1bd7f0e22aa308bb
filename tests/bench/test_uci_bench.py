"""The ``uci`` suite: its plan, the verdict rules, a tiny run end to end, and bad input."""

from __future__ import annotations

import json
import math

import pytest
import torch

from bdlkit import bench
from bdlkit.bench import uci, uci_report
from bdlkit.cli import main
from bdlkit.core.errors import InputError
from bdlkit.data.uci import UCI_FOLDERS, published_mc_dropout
from bdlkit.evaluation.predictive import RegressionBMA


def test_plans_follow_the_protocol():
    quick, full = uci.make_plan(True), uci.make_plan(False)
    assert len(quick.datasets) == 3 and quick.splits == 3
    assert full.datasets == tuple(UCI_FOLDERS) and full.splits is None
    assert uci.hidden_units("protein") == 100 and uci.hidden_units("yacht") == 50
    assert bench.SUITES["uci"] is uci.run and "uci" in bench.SETTINGS_SUITES
    assert {"map", "mc_dropout", "advi", "score_vi", "score_vi_prox", "ivon", "sghmc",
            "csghmc", "ensemble"} == set(uci.METHODS)
    assert uci.METHODS["ensemble"][1]["members"] == 5
    assert [p["rate"] for p in uci.GRIDS["mc_dropout"]] == [0.005, 0.01, 0.05, 0.1]


def test_the_gal_budget_control_counts_epochs():
    plan = uci.make_gal_budget_plan(False)
    assert plan.methods == ("mc_dropout",) and plan.datasets == ("yacht", "boston")
    assert plan.steps_for(277) == uci.GAL_EPOCHS * 3  # ceil(277 / 128) batches per epoch
    assert uci.make_plan(False).steps_for(277) == 1000
    assert uci.epochs_of(plan.steps_for(277), 277) == uci.GAL_EPOCHS  # the last batch short
    assert uci.epochs_of(1000, 277) == pytest.approx(333.3, abs=0.1)
    assert bench.SUITES["uci-gal-budget"] is uci.run_gal_budget
    grid = plan.grid("yacht", "mc_dropout")  # Gal's rates x his τ grid of the set
    assert len(grid) == 4 * 3 and {p["tau"] for p in grid} == {0.25, 0.5, 0.75}
    assert uci.make_plan(False).grid("yacht", "mc_dropout") == uci.GRIDS["mc_dropout"]


def test_the_published_mc_dropout_files_are_read_per_split():
    pub = published_mc_dropout("protein")
    assert len(pub["ll"]) == len(pub["rmse"]) == 5
    yacht = published_mc_dropout("yacht")
    assert len(yacht["ll"]) == 20
    assert yacht["rmse"].mean() < 0.8  # the MC mean's RMSE (one random mask's is 1.23)


def test_scores_are_in_original_units():
    y = torch.tensor([0.0, 1.0, -1.0, 2.0], dtype=torch.float64)
    mean, var = torch.tensor([0.5, 1.0, -2.0, 2.0], dtype=torch.float64), torch.full((4,), 0.25)
    log_density = -0.5 * (math.log(2 * math.pi) + var.log() + (y - mean) ** 2 / var)
    bma = RegressionBMA(mean, var, 1, log_density)
    got = uci_report.score(bma, y, y_std=2.0)
    assert got["rmse"] == pytest.approx(2.0 * math.sqrt((0.25 + 0 + 1 + 0) / 4))
    x_orig, m_orig = 2.0 * y + 7.0, 2.0 * mean + 7.0  # the same densities in original units
    direct = -0.5 * (math.log(2 * math.pi) + (4 * var).log() + (x_orig - m_orig) ** 2 / (4 * var))
    assert got["ll"] == pytest.approx(float(direct.mean()))


def _records(name, label, lls):
    return {i: {"ll": ll, "rmse": 1.0, "train_s": 0.1, "point": {}} for i, ll in enumerate(lls)}


def test_verdicts_are_paired_over_splits():
    ref = {i: -1.0 + 0.1 * i for i in range(4)}  # spread between splits cancels in pairs
    ours = {"map": _records("s", "map", [r - 0.5 for r in ref.values()]),
            "mc_dropout": _records("s", "mc_dropout", [r + d for r, d in
                                                       zip(ref.values(), (0.01, -0.01, 0.02, 0.0))]),
            "advi": _records("s", "advi", [r + 0.2 for r in ref.values()]),
            "score_vi": _records("s", "score_vi", [r + 0.2 for r in ref.values()]),
            "score_vi_prox": _records("s", "score_vi_prox",
                                      [r + d for r, d in zip(ref.values(), (0.1, 0.12, 0.1, 0.11))])}
    val = {"map": -0.1, "mc_dropout": -0.3, "advi": -0.5, "score_vi": -0.6, "score_vi_prox": -0.2}
    v = uci_report._verdicts(ours, ref, val)
    assert v["reproduces"]["verdict"] == "reproduced"
    assert v["best"]["row"] == "score_vi_prox"  # by validation LL (map is the control)
    assert v["best"]["beats"] and v["best"]["significant"]
    assert uci_report._verdicts(ours, ref, {**val, "advi": 0.0})["best"]["row"] == "advi"
    assert v["best"]["map_d"] == pytest.approx(-0.5)
    assert v["score_vi_vs_advi"]["verdict"] == "identical (the same fit)"
    assert v["score_vi_prox_vs_advi"]["verdict"] == "worse"
    worse = {**ours, "mc_dropout": _records("s", "mc_dropout",
                                            [r - d for r, d in zip(ref.values(), (0.3, 0.31, 0.29, 0.3))])}
    assert uci_report._verdicts(worse, ref, val)["reproduces"]["verdict"] == "worse"
    one = uci_report._verdicts({"mc_dropout": _records("s", "m", [-1.0])}, {0: -1.2}, {})
    assert one["reproduces"]["verdict"] == "inconclusive"  # one split has no SE


def test_a_tiny_plan_runs_end_to_end(tmp_path):
    plan = uci.Plan(("yacht",), 2, 30, methods=("map", "mc_dropout", "advi", "score_vi"))
    rows = uci.run(tmp_path, plan=plan, echo=False)
    ours = [r for r in rows if r["row"] in plan.methods]
    assert [r["row"] for r in ours] == list(plan.methods)
    assert all(r["splits"] == 2 and r["ll"][1] is not None for r in ours)
    refs = {r["row"] for r in rows} - set(plan.methods)
    assert {"mc_dropout (published)", "pbp (published)", "deep_ensembles (published)"} <= refs
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["verdicts"]["yacht"]["score_vi_vs_advi"]["verdict"].startswith("identical")
    assert len(saved["tuning"]["yacht"]["tuning"]) == 3 + 4 + 3 + 3  # every grid point
    assert all(r["status"] == "ok" for r in saved["runs"])
    assert set(saved["tuning"]["yacht"]["val_ll"]) == set(plan.methods)
    assert saved["tuning"]["yacht"]["chosen"]["mc_dropout"]["lr"] == \
        saved["tuning"]["yacht"]["chosen"]["map"]["lr"]  # it inherits MAP's lr
    text = (tmp_path / "results.md").read_text()
    assert "## Verdicts" in text and "Hernández-Lobato" in text
    assert {r["epochs"] for r in saved["runs"]} == {10.0}  # 30 steps, 3 batches of 277 rows
    uci.render(tmp_path)  # the tables again from the stored records: the same text
    assert (tmp_path / "results.md").read_text().split("this invocation")[1].split("\n", 1)[1] \
        == text.split("this invocation")[1].split("\n", 1)[1]


def test_an_unknown_data_set_is_refused(tmp_path, capsys):
    with pytest.raises(InputError, match="valid: boston"):
        uci.run(tmp_path / "o", plan=uci.make_plan(True), only_settings=("bostn",))
    code = main(["bench", "uci", "--quick", "--settings", "bostn", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "bostn" in err and "yacht" in err and "Traceback" not in err
    code = main(["bench", "uci", "--quick", "--settings", "wine", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "without --quick" in err and "Traceback" not in err
