"""The ``synthetic`` suite: its KL against naive references, its records and its report."""

import json
import math

import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

from bdlkit.bench import synthetic, synthetic_report

F64 = torch.float64


def test_gaussian_kl_matches_torch_distributions_full_and_diagonal():
    target = synthetic.make_target(synthetic.Setting("ill", 6, 100.0), seed=1)
    m, cov_p = target.reference.mean, target.reference.cov
    logdet_p = target.params["eigenvalues"].log().sum()
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 6, generator=g, dtype=F64)
    cov_q, mean_q = a @ a.T + 0.3 * torch.eye(6, dtype=F64), torch.randn(6, generator=g,
                                                                         dtype=F64)
    p = MultivariateNormal(m, cov_p)
    ref_full = kl_divergence(MultivariateNormal(mean_q, cov_q), p)
    ref_diag = kl_divergence(MultivariateNormal(mean_q, torch.diag(cov_q.diagonal())), p)
    got_full = synthetic.gaussian_kl(mean_q, cov_q, m, target.precision, logdet_p)
    got_diag = synthetic.gaussian_kl(mean_q, cov_q.diagonal(), m, target.precision, logdet_p)
    assert abs(got_full - float(ref_full)) < 1e-9 and abs(got_diag - float(ref_diag)) < 1e-9
    bad = cov_q.clone()
    bad[0, 0] = -1.0
    assert math.isnan(synthetic.gaussian_kl(mean_q, bad, m, target.precision, logdet_p))


def test_excess_kl_is_zero_at_each_familys_optimum():
    target = synthetic.make_target(synthetic.Setting("ill", 8, 1e3), seed=0)
    m, prec = target.reference.mean, target.precision
    diag = synthetic.make_measure(target, "advi")(m, 1.0 / prec.diagonal())
    full = synthetic.make_measure(target, "bam_full")(m, target.reference.cov)
    assert abs(diag["excess_kl"]) < 1e-10 and diag["kl"] > 0.1  # mean-field KL floor
    assert abs(full["excess_kl"]) < 1e-10 and full["mean_err_sd"] < 1e-12
    assert abs(full["std_rel_err"]) < 1e-10
    off = synthetic.make_measure(target, "advi")(m + 0.1, 1.0 / prec.diagonal())
    assert off["excess_kl"] > 0


def test_mixture_kl_is_a_monte_carlo_estimate_of_a_nonnegative_divergence():
    target = synthetic.make_target(synthetic.Setting("mixture2", 3, components=2), seed=0)
    measure = synthetic.make_measure(target, "advi")
    ref = target.reference
    moment_matched = measure(ref.mean, ref.cov.diagonal(), None)
    far = measure(ref.mean + 5.0, ref.cov.diagonal(), None)
    assert 0 < moment_matched["kl"] < far["kl"]
    assert moment_matched["mean_err_sd"] < 1e-12 and moment_matched["std_rel_err"] < 1e-12
    # the same number from explicit draws: E_q[log q - log p]
    q = torch.distributions.Normal(ref.mean, ref.cov.diagonal().sqrt())
    with torch.random.fork_rng(devices=[]):  # its own draws, not the worker's global state
        torch.manual_seed(0)
        x = q.sample((200_000,))
    naive = float((q.log_prob(x).sum(-1) - target.log_prob(x)).mean())
    assert abs(moment_matched["kl"] - naive) < 0.05


def test_settings_cover_the_issue_grid():
    quick = synthetic.settings(quick=True)
    names = {s.name for s in quick}
    for d in (10, 100, 1000):
        assert {f"well-d{d}", f"ill-d{d}", f"tiny_init-d{d}"} <= names
    assert {"mixture2-d10", "mixture5-d10"} <= names
    full = {s.name for s in synthetic.settings(quick=False)}
    assert {"well-d10000", "ill-d10000"} <= full
    tiny = next(s for s in quick if s.group == "tiny_init")
    assert tiny.init_std**2 == 1e-4
    assert next(s for s in quick if s.group == "ill").condition == 1e3


def test_tiny_run_writes_records_report_and_plots(tmp_path):
    plan = synthetic.Plan(budget=160, time_limit=20.0, seeds=(0, 1), num_points=4)
    rows = ("score_vi", "advi", "bam_full", "gsm_diag")
    summary = synthetic.run(tmp_path / "out", rows=rows, plan_override=plan, echo=False,
                            only=lambda s: s.dim == 10 and s.group in ("well", "tiny_init"))
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text())
    assert results["suite"] == "synthetic" and results["rows"] == list(rows)
    recs = results["records"]
    assert len(recs) == 2 * (3 + 1) * len(rows)  # settings × (grid on seed 0 + best) × rows
    for r in recs:
        assert {"setting", "row", "seed", "hyper", "status", "curve", "final",
                "selected"} <= set(r)
        assert r["status"] == "ok" and r["final"]["score_evals"] <= 160
    for setting in ("well-d10", "tiny_init-d10"):
        for row in rows:
            sel = [r for r in recs if r["setting"] == setting and r["row"] == row
                   and r["selected"]]
            assert len(sel) == 2 and len({r["hyper"] for r in sel}) == 1
    assert len(summary) == 2 * len(rows)
    bam = next(s for s in summary if s["setting"] == "well-d10" and s["method"] == "bam_full")
    assert bam["excess_kl"] < 1e-3  # exact scores, family contains the target
    text = (out / "report.md").read_text()
    for heading in ("Faster convergence than ADVI", "tiny initial covariance",
                    "dimension grows", "### well-d10"):
        assert heading in text
    assert (out / "plots" / "well-d10.png").stat().st_size > 1000
    assert set(results["claims"]) == {"faster_than_advi", "tiny_init", "high_dim"}


def test_claims_read_the_summary():
    def row(setting, method, excess, evals, status="ok"):
        group, d = setting.split("-d")
        return {"setting": setting, "group": group, "dim": int(d), "method": method,
                "excess_kl": excess, "evals_to_tau": evals, "status": status}

    summary = [row("well-d10", "advi", 0.01, 800.0), row("well-d10", "score_vi", 0.01, 400.0),
               row("well-d10", "score_vi_cf", 0.01, 820.0),
               row("tiny_init-d10", "advi", 5.0, math.inf),
               row("tiny_init-d10", "score_vi", 0.01, 400.0),
               row("tiny_init-d10", "score_vi_cf", 0.01, math.inf, "timeout"),
               row("well-d100", "bam_full", 0.0, 10.0, "timeout"),
               row("well-d10", "bam_full", 0.0, 10.0)]
    table, faster = synthetic_report.claim_faster(summary)
    assert "score_vi against ADVI over 2 Gaussian settings: 2 faster, 0 tied" in faster
    assert "score_vi_cf against ADVI over 2 Gaussian settings: 0 faster, 2 tied" in faster
    assert [t["score_vi_cf vs advi"] for t in table] == ["tie", "tie"]  # 820 vs 800; ∞ vs ∞
    table, tiny = synthetic_report.claim_tiny_init(summary)
    assert "robust at every d: score_vi;" in tiny and "not robust at some d: advi" in tiny
    assert "inconclusive elsewhere (timeouts): score_vi_cf" in tiny
    records = [{"group": "well", "row": "bam_full", "dim": 100, "status": "timeout",
                "message": "40 of 625 steps in 30 s"},
               {"group": "well", "row": "bam_full", "dim": 1000, "status": "timeout",
                "message": "skipped: one step predicted to take 99 s > 30 s"},
               {"group": "well", "row": "bam_full", "dim": 10, "status": "diverged",
                "message": "NaN"}]
    table, high = synthetic_report.claim_high_dim(summary, records)
    bam = next(t for t in table if t["method"] == "bam_full" and t["target"] == "well")
    assert bam["largest_d_ok"] == 10
    assert bam["failures (all grid points)"] == (
        "d=100: time ×1; d=1000: not run (predicted too slow) ×1; d=10: numerical ×1")
    assert "GSM/BaM rows with failures: bam_full" in high
    assert "numerical failures (diverged or stuck, not time or memory): bam_full" in high


def test_evals_to_tau_interpolates_between_curve_points():
    rec = {"curve": [{"score_evals": 0, "excess_kl": 100.0},
                     {"score_evals": 10, "excess_kl": 10.0},
                     {"score_evals": 1000, "excess_kl": 0.1}]}
    # log-log line through (10, 10) and (1000, 0.1): excess 1 at 100 evaluations
    assert math.isclose(synthetic_report._evals_to(rec, 1.0), 100.0, rel_tol=1e-12)
    assert synthetic_report._evals_to(rec, 1e-3) == math.inf
    assert synthetic_report._evals_to(rec, 200.0) == 0.0


def test_step_times_skip_a_predicted_overrun_of_the_first_step():
    times = synthetic.StepTimes()
    times.record("bam_full", 100, {"steps": 10, "seconds": 1.0})  # 0.1 s per step
    times.record("advi", 100, {"steps": 10, "seconds": 100.0})  # diagonal rows: not tracked
    assert times.too_slow("bam_full", 200, 45.0) is None  # 0.8 s
    msg = times.too_slow("bam_full", 1000, 45.0)
    assert msg.startswith("skipped: one step predicted to take 100 s > 45 s")
    assert times.too_slow("advi", 10**4, 45.0) is None
    assert times.too_slow("gsm_full", 10**4, 45.0) is None  # never measured: run it


def test_reuse_takes_unchanged_rows_and_refuses_changed_grids_or_plans(tmp_path):
    import json

    from bdlkit.bench import synthetic
    from bdlkit.bench.vi_methods import SPECS

    p = synthetic.plan(True, 0)
    chosen = [synthetic.settings(True)[0]]
    rec = {"row": "gsm_diag", "setting": chosen[0].name, "dim": chosen[0].dim}
    old = {"suite": "synthetic", "command": "bdlkit bench synthetic --quick --out X",
           "plan": p.__dict__ | {"seeds": list(p.seeds)},
           "settings": [s.__dict__ | {"name": s.name} for s in chosen],
           "grids": {k: [str(g) for g in SPECS[k].grid] for k in ("gsm_diag", "advi")},
           "records": [rec, {**rec, "row": "advi"}]}
    (tmp_path / "results.json").write_text(json.dumps(old))
    got, where = synthetic._reused_records(tmp_path, p, chosen, ("advi",), {chosen[0].name})
    assert [r["row"] for r in got] == ["gsm_diag"] and where["from_command"] == old["command"]
    got, _ = synthetic._reused_records(tmp_path, p, chosen, ("advi",), set())  # advi not rerun
    assert sorted(r["row"] for r in got) == ["advi", "gsm_diag"]
    old["grids"]["gsm_diag"] = ["{'num_samples': 99}"]
    (tmp_path / "results.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match="other grids"):
        synthetic._reused_records(tmp_path, p, chosen, ("advi",), {chosen[0].name})
    with pytest.raises(ValueError, match="plan"):
        synthetic._reused_records(tmp_path, synthetic.plan(False, 0), chosen, ("advi",), set())
