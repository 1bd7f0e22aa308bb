"""The posteriordb VI suite: the measurement, ``evaluate`` on a user Target, ``run`` (tiny)."""

import json
import math

import numpy as np
import pytest
import torch

from bdlkit.bench import posteriordb
from bdlkit.problems import Reference, Target

F64 = torch.float64
REQUIRED = {"posterior", "method", "hyper", "max_mean_error_sd", "std_ratio_min",
            "std_ratio_max", "neg_elbo", "seconds", "status", "grid", "runs"}


def gaussian_target(with_draws: bool = True) -> Target:
    """N(m, diag(s²)) in 3-D with 20 000 exact draws as the reference."""
    m = torch.tensor([1.0, -2.0, 0.5], dtype=F64)
    s = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    g = torch.Generator().manual_seed(1)
    draws = m + s * torch.randn(20_000, 3, generator=g, dtype=F64) if with_draws else None
    return Target(lambda th: -0.5 * (((th - m) / s) ** 2).sum(-1), dim=3, name="gauss3",
                  reference=Reference(draws=draws), dtype=F64)


def test_moment_errors_match_a_hand_computed_example():
    ref_mean, ref_std = np.array([0.0, 1.0]), np.array([2.0, 0.5])
    mean, var = np.array([0.5, 0.9]), np.array([1.0, 0.36])
    out = posteriordb.moment_errors(torch.tensor(mean), torch.tensor(var),
                                    torch.tensor(ref_mean), torch.tensor(ref_std))
    # |0.5 - 0| / 2 = 0.25, |0.9 - 1| / 0.5 = 0.2; σ/s = 1/2 = 0.5, 0.6/0.5 = 1.2
    assert out["max_mean_error_sd"] == pytest.approx(0.25)
    assert out["std_ratio_min"] == pytest.approx(0.5)
    assert out["std_ratio_max"] == pytest.approx(1.2)
    full = posteriordb.moment_errors(torch.tensor(mean), torch.tensor([[1.0, 0.3], [0.3, 0.36]]),
                                     torch.tensor(ref_mean), torch.tensor(ref_std))
    assert full == pytest.approx(out)


def test_neg_elbo_matches_numpy_and_the_exact_kl():
    target = gaussian_target()
    m, s = np.array([1.0, -2.0, 0.5]), np.array([0.5, 1.0, 2.0])
    eps = torch.randn(4000, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    # q = p: E_q[log q - log π] = -log Z = -log((2π)^{3/2} Π s)
    log_z = 1.5 * math.log(2 * math.pi) + np.log(s).sum()
    diag = posteriordb.neg_elbo(target, torch.tensor(m), torch.tensor(s**2), eps)
    assert diag == pytest.approx(-log_z, abs=1e-9)
    # a full covariance, against a naive numpy computation with the same draws
    mu, cov = np.array([0.8, -1.5, 0.0]), np.array([[0.3, 0.1, 0.0], [0.1, 0.8, 0.2],
                                                     [0.0, 0.2, 2.5]])
    e = eps.numpy()
    x = mu + e @ np.linalg.cholesky(cov).T
    diff = x - mu
    log_q = (-0.5 * np.einsum("ni,ij,nj->n", diff, np.linalg.inv(cov), diff)
             - 0.5 * np.linalg.slogdet(cov)[1] - 1.5 * math.log(2 * math.pi))
    log_p = -0.5 * (((x - m) / s) ** 2).sum(1)
    full = posteriordb.neg_elbo(target, torch.tensor(mu), torch.tensor(cov), eps)
    assert full == pytest.approx(float((log_q - log_p).mean()), rel=1e-10)
    bad = torch.tensor([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=F64)
    assert math.isnan(posteriordb.neg_elbo(target, torch.tensor(mu), bad, eps))


def test_evaluate_on_a_user_target():
    target = gaussian_target()
    recs = posteriordb.evaluate(target, methods=["advi", "score_vi"], budget=1200,
                                time_limit=30.0, num_points=4)
    assert [r["method"] for r in recs] == ["start", "advi", "score_vi"]
    ref = target.reference.draws
    start = recs[0]  # the diagonal Laplace approximation of a diagonal Gaussian is exact
    assert start["hyper"] == "diagonal Laplace" and start["max_mean_error_sd"] < 0.05
    assert 0.97 < start["std_ratio_min"] <= start["std_ratio_max"] < 1.03
    assert np.allclose(start["std"], [0.5, 1.0, 2.0]) and np.allclose(start["mean"],
                                                                        [1.0, -2.0, 0.5])
    for r in recs[1:]:
        assert REQUIRED <= set(r) and r["posterior"] == "gauss3" and r["status"] == "ok"
        assert len(r["grid"]) == 3 and len(r["runs"]) == 1
        assert all(math.isfinite(r[k]) for k in posteriordb.METRICS)
        run = r["runs"][0]
        naive = np.max(np.abs(np.array(run["mean"]) - ref.mean(0).numpy()) / ref.std(0).numpy())
        assert r["max_mean_error_sd"] == pytest.approx(naive)
        assert r["max_mean_error_sd"] < 0.2 and 0.7 < r["std_ratio_min"] <= r["std_ratio_max"] < 1.3
        assert r["neg_elbo"] == min(g["neg_elbo"] for g in r["grid"])
        log_z = 1.5 * math.log(2 * math.pi) + math.log(0.5 * 1.0 * 2.0)
        assert r["ref_neg_elbo"] == pytest.approx(-log_z, abs=0.02)  # q ≈ p: -log Z


def test_evaluate_from_zero_and_a_bad_start():
    # q₀ = N(0, I) is 2 reference stds off; the methods must move the mean there
    recs = posteriordb.evaluate(gaussian_target(), methods=["bam_full", "advi"], budget=1200,
                                time_limit=30.0, num_points=3, start="zero")
    assert [r["method"] for r in recs] == ["bam_full", "advi"]
    assert recs[0]["max_mean_error_sd"] < 0.05 and recs[1]["max_mean_error_sd"] < 0.2
    with pytest.raises(ValueError, match="start must be one of"):
        posteriordb.evaluate(gaussian_target(), methods=["advi"], start="map")


def test_evaluate_without_reference_draws_is_a_clear_error():
    with pytest.raises(ValueError, match="no reference draws"):
        posteriordb.evaluate(gaussian_target(with_draws=False), methods=["advi"])
    with pytest.raises(ValueError, match="shape"):
        posteriordb.evaluate(gaussian_target(), torch.zeros(10, 2), methods=["advi"])


def test_run_writes_records_and_report(tmp_path):
    settings = {"budget": 400, "time_limit": 10.0, "num_seeds": 1, "num_points": 3}
    no_ref = gaussian_target(with_draws=False)
    no_ref.name = "no_ref"
    recs = posteriordb.run(tmp_path, quick=True, echo=False, settings=settings,
                           posteriors=[gaussian_target(), no_ref, "wells_data-wells_dist"],
                           methods=["advi", "score_vi", "gsm_full"])
    result = json.loads((tmp_path / "results.json").read_text())
    assert len(result["records"]) == len(recs) == 4  # the start and three methods
    assert all(REQUIRED <= set(r) for r in result["records"])
    assert result["settings"]["budget"] == 400 and result["command"].startswith("bdlkit bench")
    assert set(result["skipped"]) == {"no_ref", "wells_data-wells_dist"}
    assert result["records"][1]["runs"][0]["curve"] and result["records"][0]["method"] == "start"
    text = (tmp_path / "report.md").read_text()
    assert (tmp_path / "results.md").read_text() == text
    assert "| posterior | method |" in text and "score_vi: " in text
    assert "within 0.2 reference stds" in text and "wells_data" in text


def test_a_flow_row_is_measured_by_its_own_draws():
    """The flow rows' ELBO is the flow's own (not its moment-matched Gaussian's): on the
    3-D Gaussian, from the exact Laplace start, it stays near −log Z, and its Monte Carlo
    mean and std match the reference."""
    target = gaussian_target()
    recs = posteriordb.evaluate(target, methods=["advi_flow"], budget=800, time_limit=60.0,
                                num_points=2)
    flow = recs[1]
    assert flow["method"] == "advi_flow" and flow["status"] == "ok"
    assert flow["max_mean_error_sd"] < 0.2 and 0.8 < flow["std_ratio_min"]
    assert flow["std_ratio_max"] < 1.2
    log_z = 1.5 * math.log(2 * math.pi) + math.log(0.5 * 1.0 * 2.0)
    assert flow["neg_elbo"] == pytest.approx(-log_z, abs=0.05)
    assert posteriordb.DEFAULT_ROWS[-2:] == ("score_vi_flow", "advi_flow")


def test_a_bent_flows_elbo_is_its_own_not_its_moment_matched_gaussians():
    from bdlkit.families.flow import FlowApproximation, FlowFamily

    target = gaussian_target()
    family = FlowFamily(3, transforms=2, bins=6, hidden=8, dtype=F64)
    gen = torch.Generator().manual_seed(0)
    lam = family.init(torch.tensor([1.0, -2.0, 0.5], dtype=F64), 1.0, gen)
    lam = {k: v + 0.6 * torch.randn(v.shape, generator=gen, dtype=F64)
           if k.startswith("flow.") else v for k, v in lam.items()}
    q = FlowApproximation(family, lam)
    eps = torch.randn(2000, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    ref = target.reference.draws
    measure, _ = posteriordb.make_measure(target, ref.mean(0), ref.std(0), eps)
    mean, var = q.mean, q.std**2
    own = measure(mean, var, q)["neg_elbo"]
    draws = q.sample(20000, torch.Generator().manual_seed(2))
    assert own == pytest.approx(float((q.log_prob(draws) - target.log_prob(draws)).mean()),
                                abs=0.05)
    gaussian = measure(mean, var, None)["neg_elbo"]
    assert gaussian < own - 0.1  # the bent flow is no Gaussian: its ELBO is worse
