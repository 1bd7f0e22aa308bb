"""The ``l2e`` suite: claims, chain diagnostics, summaries, the report, and a tiny run."""

import functools
import json
import math

import pytest
import torch

from bdlkit import bench
from bdlkit.bench import l2e, l2e_report
from bdlkit.runs import reference

TASKS = ("digits-hmc", "mnist-mlp", "cifar10")


def _rows(agree=(0.95, 0.90, 0.92), ess=(300.0, 100.0), step=(1.2, 1.0)):
    """Rows of a finished run: l2e, ensemble, csghmc agreement; l2e/csghmc ESS/s; l2e/sghmc
    ms per step; the same on every task."""
    rows = [{"task": "digits-hmc", "method": "hmc", "status": "reference", "accuracy": 0.97,
             "nll": 0.1, "ece": 0.01, "agreement": 1.0, "total_variation": 0.0}]
    for task in TASKS:
        for method in l2e.METHODS:
            row = {"task": task, "method": method, "status": "ok", "chains": 3, "draws": 100,
                   "accuracy": 0.9, "accuracy_std": 0.01, "nll": 0.3, "ece": 0.02,
                   "step_ms": {"l2e": step[0], "sghmc": step[1]}.get(method, 2.0)}
            if method == "ensemble":
                row["diagnostics"] = "n/a (no chain: independent ensemble members)"
            else:
                row.update(ess_per_s={"l2e": ess[0], "csghmc": ess[1]}.get(method, 50.0),
                           rhat_mean=1.05, **{"rhat_frac_below_1.1": 0.9})
            if task == "digits-hmc":
                row["agreement"] = dict(zip(("l2e", "ensemble", "csghmc"), agree)).get(
                    method, 0.8)
                row["total_variation"] = 0.1
            if task == "mnist-mlp":
                row.update(ood_auroc=0.8, corr_accuracy=0.7, corr_nll=0.9, corr_ece=0.1,
                           corruptions={"1": {"accuracy": 0.8, "nll": 0.5, "ece": 0.05}})
            rows.append(row)
    return rows


def test_claims_are_supported_when_the_numbers_say_so():
    claims = l2e.compute_claims(_rows())
    assert claims["a_agreement_with_hmc"]["supported"] is True
    assert claims["a_agreement_with_hmc"]["values"] == {"l2e": 0.95, "ensemble": 0.90,
                                                         "csghmc": 0.92}
    b, c = claims["b_ess_per_second_ratio"], claims["c_step_time_ratio"]
    assert b["supported"] is True and b["values"] == {t: pytest.approx(3.0) for t in TASKS}
    assert c["supported"] is True and c["values"]["cifar10"] == pytest.approx(1.2)
    assert c["threshold"] == 1.5 and b["paper_value"] == pytest.approx(1.466, abs=1e-3)


def test_claims_are_rejected_or_undetermined():
    claims = l2e.compute_claims(_rows(agree=(0.91, 0.90, 0.92), ess=(90.0, 100.0),
                                      step=(1.6, 1.0)))
    assert claims["a_agreement_with_hmc"]["supported"] is False  # below csghmc
    assert claims["b_ess_per_second_ratio"]["supported"] is False
    assert claims["c_step_time_ratio"]["supported"] is False
    # one task over the goal is enough to reject (c)
    rows = _rows()
    next(r for r in rows if r["task"] == "cifar10" and r["method"] == "l2e")["step_ms"] = 9.0
    assert l2e.compute_claims(rows)["c_step_time_ratio"]["supported"] is False
    # a failed method (no values) leaves the claim undetermined, not false
    rows = [r for r in _rows() if r["method"] not in ("csghmc", "sghmc")]
    claims = l2e.compute_claims(rows)
    assert all(c["supported"] is None for c in claims.values())
    rows = _rows()
    next(r for r in rows if r["method"] == "ensemble")["agreement"] = math.nan
    assert l2e.compute_claims(rows)["a_agreement_with_hmc"]["supported"] is None


def test_ess_ordering_claim_needs_every_task_in_order():
    claims = l2e.compute_claims(_rows())  # l2e 300 > csghmc 100 > meta_sgmcmc 50
    d = claims["d_ess_ordering"]
    assert d["supported"] is True and d["values"]["cifar10 meta_sgmcmc"] == 50.0
    assert len(d["values"]) == 3 * len(TASKS)
    rows = _rows()
    next(r for r in rows if r["task"] == "mnist-mlp" and r["method"] == "meta_sgmcmc")[
        "ess_per_s"] = 150.0  # above csghmc on one task
    assert l2e.compute_claims(rows)["d_ess_ordering"]["supported"] is False
    rows = [r for r in _rows() if r["method"] != "meta_sgmcmc"]
    assert l2e.compute_claims(rows)["d_ess_ordering"]["supported"] is None


def _ar1_chain(gen, draws=60, rho=0.7):
    shapes = {"fc.weight": (4, 3), "fc.bias": (3,)}
    out = {}
    for name, shape in shapes.items():
        x = torch.zeros(draws, *shape)
        for t in range(1, draws):
            x[t] = rho * x[t - 1] + torch.randn(shape, generator=gen)
        out[name] = x
    return out


def test_chain_diagnostics_on_synthetic_chains():
    gen = torch.Generator().manual_seed(0)
    chains = [_ar1_chain(gen) for _ in range(3)]
    ess = l2e.weight_ess(chains[0])
    assert ess.shape == (15,) and torch.isfinite(ess).all() and (ess > 0).all()
    diag = l2e.chain_diagnostics(chains, [2.0, 2.0, 4.0])
    assert len(diag["ess_per_s_chains"]) == 3
    assert all(math.isfinite(v) and v > 0 for v in diag["ess_per_s_chains"])
    # an AR(1) chain with rho 0.7 has ESS/N near (1 - rho) / (1 + rho) ~ 0.18
    assert 0.05 < diag["ess_frac"] < 0.6
    assert diag["ess_per_s_chains"][2] < max(diag["ess_per_s_chains"][:2])  # slower chain
    assert diag["rhat_coords"] == 15 and set(diag["rhat_layers"]) == {"fc.weight", "fc.bias"}
    assert 0.9 < diag["rhat_mean"] < 1.5 and 0 <= diag["rhat_frac_below_1.1"] <= 1
    # unequal draw counts: ESS still per chain, R-hat left out
    short = {k: v[:30] for k, v in chains[2].items()}
    diag = l2e.chain_diagnostics([chains[0], short], [1.0, 1.0])
    assert "rhat_mean" not in diag and math.isfinite(diag["ess_per_s"])
    with pytest.raises(ValueError):
        l2e.chain_diagnostics(chains, [1.0])


def test_function_ess_uses_the_true_class_probability():
    gen = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(40, 7, 3, generator=gen, dtype=torch.float64), -1)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    ess = l2e.function_ess(probs, labels)
    assert ess.shape == (7,) and torch.isfinite(ess).all()
    direct = l2e.ess_tfp_single_chain(probs[:, 4, 1][:, None])
    assert ess[4] == pytest.approx(float(direct[0]))


def test_summaries_keep_failures_and_ratios():
    chains = [{"accuracy": 0.8, "nll": 0.5, "ece": 0.1, "train_s": 2.0, "step_ms": 4.0,
               "draws": 10},
              {"accuracy": 0.6, "nll": 0.7, "ece": 0.3, "train_s": 4.0, "step_ms": 8.0,
               "draws": 10}]
    row = l2e.summarize_chains("t", "l2e", chains, [])
    assert row["status"] == "ok" and row["accuracy"] == pytest.approx(0.7)
    assert row["accuracy_std"] == pytest.approx(0.1414, abs=1e-4) and "agreement" not in row
    part = l2e.summarize_chains("t", "l2e", chains[:1], ["seed 2: NonFiniteError: nan"])
    assert part["status"].startswith("partial (1/2 chains)") and "accuracy_std" not in part
    failed = l2e.summarize_chains("t", "csghmc", [], ["seed 0: boom"])
    assert failed["status"] == "error: seed 0: boom" and "accuracy" not in failed
    rows = [row, {"method": "sghmc", "step_ms": 3.0}, failed]
    l2e.add_step_ratios(rows)
    assert rows[0]["step_ratio"] == pytest.approx(2.0) and rows[1]["step_ratio"] == 1.0
    assert "step_ratio" not in failed


def test_report_has_every_task_method_and_claim(tmp_path):
    rows = _rows()
    rows[3]["status"] = "error: seed 0: NonFiniteError: log density NaN"
    claims = l2e.compute_claims(rows)
    settings = {"quick": True, "seed": 0, "chains": 3, "device": "cpu",
                "methods": l2e.METHODS, "wall_s": 12.0, "task_notes": {},
                "meta_params": {"l2e": {"path": "x.safetensors", "sha256": "ab" * 32,
                                        "info": {}},
                                "meta_sgmcmc": {"error": "FileNotFoundError: gone"}}}
    text = l2e_report.write_report(tmp_path, rows, claims, l2e.tasks(True), settings,
                                   "bdlkit bench l2e --quick --out X", {"cpus": 2})
    assert (tmp_path / "report.md").read_text() == text
    for name in (*TASKS, *l2e.METHODS, "hmc", "## Claims", "## Failures", "NonFiniteError",
                 "l2e meta-parameters: `x.safetensors`",
                 "meta_sgmcmc meta-parameters: FileNotFoundError: gone", "(d) L2E's ESS"):
        assert name in text
    assert "| n/a |" in text  # ensemble ESS / R-hat
    assert "**supported**" in text and "0.9000 ± 0.0100" in text
    assert "acc. s1" in text  # corruptions by severity for mnist
    summary = l2e_report.summary_table(rows)
    assert len(summary) == len(rows) and {r["task"] for r in summary} == set(TASKS)
    assert "not supported" in l2e_report.claims_markdown(
        l2e.compute_claims(_rows(agree=(0.1, 0.9, 0.9))))


def test_suite_is_registered_and_sizes_are_set():
    assert bench.SUITES["l2e"] is l2e.run and "L2E" in bench.DESCRIPTIONS["l2e"]
    quick, full = l2e.tasks(True), l2e.tasks(False)
    assert [t.name for t in quick] == [t.name for t in full] == list(TASKS)
    assert all(q.steps < f.steps for q, f in zip(quick, full))
    assert full[2].model == "resnet20_frn" and quick[2].model == "cnn"
    assert quick[1].data_kwargs == {"train_size": 5000, "seed": 0}


@pytest.mark.slow
def test_tiny_suite_end_to_end(tmp_path, monkeypatch):
    tiny = [
        l2e.Task("digits-hmc", "digits", "mlp", {"hidden": [4]}, 24, reference_chains=2,
                 reference_steps=8),
        l2e.Task("mnist-mlp", "mnist", "mlp", {"hidden": [6]}, 20,
                 {"train_size": 300, "test_size": 100, "seed": 0}, ood="notmnist",
                 ood_points=100, corruptions=("contrast", "gaussian_noise"),
                 severities=(1, 5), probe_points=16),
    ]
    monkeypatch.setattr(l2e, "tasks", lambda quick: tiny)
    monkeypatch.setattr(l2e, "CHAINS", 2)
    monkeypatch.setattr(l2e, "warm_up", lambda: None)
    # the reference's chains in this process, one thread (no worker start-up, no thread
    # oversubscription): the same files, faster
    monkeypatch.setattr(reference, "build", functools.partial(reference.build, workers=1))
    rows = l2e.run(tmp_path, quick=True, echo=False)
    assert [(r["task"], r["method"]) for r in rows] == [
        ("digits-hmc", "hmc"), *[(t.name, m) for t in tiny for m in l2e.METHODS]]
    for r in rows[1:]:
        assert r["chains"] == 2 or r["status"] != "ok", r["status"]
    ok = [r for r in rows[1:] if r["status"] == "ok"]
    assert {r["method"] for r in ok} >= {"l2e", "sghmc", "ensemble"}
    for r in ok:
        assert 0 <= r["accuracy"] <= 1 and r["step_ms"] > 0
        if r["task"] == "digits-hmc":
            assert 0 <= r["agreement"] <= 1
        else:
            assert 0 <= r["ood_auroc"] <= 1 and set(r["corruptions"]) == {"1", "5"}
        if r["method"] == "ensemble":
            assert "ess_per_s" not in r and "div_tv" not in r
        else:
            assert r["ess_per_s"] > 0 and r["rhat_coords"] > 0
            assert 0 <= r["div_tv"] <= 1 and 0 <= r["div_disagreement"] <= 1
    hmc = rows[0]  # the reference's own chains' diversity, per chain
    assert 0 < hmc["div_tv"] <= 1 and "div_tv_std" in hmc
    assert "within-chain TV" in (tmp_path / "results.md").read_text()
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["claims"]) == {"a_agreement_with_hmc", "b_ess_per_second_ratio",
                                      "c_step_time_ratio", "d_ess_ordering"}
    assert set(results["settings"]["meta_params"]) == {"l2e", "meta_sgmcmc"}
    assert results["settings"]["chains"] == 2 and results["suite"] == "l2e"
    assert (tmp_path / "runs" / "mnist-mlp" / "l2e-seed1" / "config.yaml").is_file()
    assert "## mnist-mlp" in (tmp_path / "report.md").read_text()
    stamp = (tmp_path / "runs" / "reference" / "probs.safetensors").stat().st_mtime_ns
    monkeypatch.setattr(l2e, "tasks", lambda quick: tiny[:1])
    monkeypatch.setattr(l2e, "METHODS", {"sghmc": l2e.METHODS["sghmc"]})
    l2e.run(tmp_path, quick=True, echo=False)  # the reference is reused, not rebuilt
    assert (tmp_path / "runs" / "reference" / "probs.safetensors").stat().st_mtime_ns == stamp
