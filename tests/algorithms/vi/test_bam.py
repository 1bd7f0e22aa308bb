"""BaM (batch and match): the symmetric and low-rank Σ updates against the literal matrix
square-root formula, recovery of Gaussian targets, the diagonal fixed point on correlated
targets, rejected updates, networks and checkpointable states (``docs/vi.md``, BaM)."""

import numpy as np
import pytest
import scipy.linalg
import torch
from vi_helpers import (
    assert_recovers_full_gaussian,
    assert_restores,
    correlated_gaussian,
    run,
)

import bdlkit
from bdlkit.algorithms.vi import bam
from bdlkit.core.tree import tree_leaves
from bdlkit.families import full_gaussian
from bdlkit.families.diag_gaussian import DiagGaussianParams

F64 = torch.float64


def batch_moments(lam_value: float, seed: int = 3):
    target, *_ = correlated_gaussian()
    g = torch.Generator().manual_seed(seed)
    lam = full_gaussian.init(torch.zeros(5, dtype=F64), 1.0)
    thetas = full_gaussian.sample(lam, 16, g)
    scores = target.score(thetas)
    return bam.moments(lam.mean, full_gaussian.cov(lam), thetas, scores, lam_value)


@pytest.mark.parametrize("lam", [80.0, 1.0, 1e-3])
def test_symmetric_and_lowrank_cov_equal_the_literal_sqrtm_formula(lam):
    """Σ = 2·solve((I + sqrtm(I + 4UV))ᵀ, Vᵀ) (GSM-VI's code, with the factor 2) =
    2V(I + (I + 4UV)^{1/2})⁻¹ = the eigh form = the low-rank form, with U = QQᵀ exactly."""
    u, v, gc, gbar, _ = batch_moments(lam)
    eye = np.eye(5)
    un, vn = u.numpy(), v.numpy()
    root = scipy.linalg.sqrtm(eye + 4 * un @ vn)
    literal = 2 * np.linalg.solve((eye + root).T, vn.T)
    direct = 2 * vn @ np.linalg.inv(eye + root)
    factor = torch.cat([(lam / 16) ** 0.5 * gc.T, (lam / (1 + lam)) ** 0.5 * gbar[:, None]], 1)
    assert factor.shape == (5, 17)
    assert torch.allclose(factor @ factor.T, u, rtol=1e-13, atol=1e-13)
    sym = bam.match_cov(u, v)
    low = bam.lowrank_cov(v, factor)
    scale = float(sym.abs().max())
    assert np.abs(literal - direct).max() < 1e-11 * scale
    assert np.abs(sym.numpy() - literal).max() < 1e-11 * scale
    assert (low - sym).abs().max() < 1e-11 * scale
    assert torch.linalg.eigvalsh(sym).min() > 0


def test_match_cov_rejects_an_indefinite_u_or_v():
    u, v, _, _, _ = batch_moments(1.0)
    assert bam.match_cov(u, v) is not None
    assert bam.match_cov(u - 10 * torch.eye(5, dtype=F64), v) is None  # U clearly not PSD
    assert bam.match_cov(u, v - 100 * torch.eye(5, dtype=F64)) is None  # no Cholesky of V
    assert bam.match_cov(u * float("nan"), v) is None


def test_full_bam_recovers_a_correlated_gaussian():
    """Part E check 5: B = 16, λ_t = 16·d/(t+1)."""
    target, mean, cov, _ = correlated_gaussian()
    alg = bam.build(target)
    state, info = run(alg, 60, torch.zeros(5, dtype=F64))
    assert_recovers_full_gaussian(alg, state, info, mean, cov)


def test_lowrank_bam_equals_full_bam_step_by_step_and_recovers_the_target():
    target, mean, cov, _ = correlated_gaussian()
    full, low = bam.build(target), bam.build(target, covariance="lowrank")
    s_full = full.init(torch.zeros(5, dtype=F64), generator=torch.Generator().manual_seed(0))
    s_low = low.init(torch.zeros(5, dtype=F64), generator=torch.Generator().manual_seed(0))
    for _ in range(25):
        s_full, _ = full.step(s_full, None)
        s_low, _ = low.step(s_low, None)
        assert (s_low.lam.mean - s_full.lam.mean).abs().max() < 1e-10
        assert (full_gaussian.cov(s_low.lam) - full_gaussian.cov(s_full.lam)).abs().max() < 1e-10
    q = low.approximation(s_low)
    assert s_low.rejected == 0
    assert (q.mean - mean).abs().max() < 1e-6 and (q.cov - cov).abs().max() < 1e-6


def test_diag_bam_recovers_a_diagonal_gaussian():
    std = torch.logspace(-1, 1, 6, dtype=F64)
    mean = torch.randn(6, generator=torch.Generator().manual_seed(0), dtype=F64) * std
    target = bdlkit.Target(lambda th: -0.5 * (((th - mean) / std) ** 2).sum(-1), dim=6,
                           dtype=F64)
    alg = bam.build(target, covariance="diag")
    state, _ = run(alg, 30, torch.zeros(6, dtype=F64))
    q = alg.approximation(state)
    assert isinstance(state.lam, DiagGaussianParams)
    assert ((q.mean - mean).abs() / std).max() < 1e-6
    assert ((q.std**2 - std**2).abs() / std**2).max() < 1e-6


def diag_fixed_point(target, d: int, steps: int = 300, lam: float = 1e3) -> DiagGaussianParams:
    """Diagonal BaM with exact expectations: the 2d "sigma points" x = μ ± √d σ_i e_i have
    mean μ and 1/B covariance S = diag σ², and the Gaussian score is linear in x, so the batch
    moments are the population ones (x̄ = μ, C = S, ḡ = −Λ(μ − m), Γ = ΛSΛ). The fixed point
    does not depend on λ; a constant large λ converges fastest."""
    z = torch.cat([torch.eye(d, dtype=F64), -torch.eye(d, dtype=F64)]) * d**0.5
    alg = bam.build(target, covariance="diag")
    q = DiagGaussianParams(mu=torch.zeros(d, dtype=F64), rho=torch.zeros(d, dtype=F64))
    for _ in range(steps):
        thetas = q.mu + q.rho.exp() * z
        q = alg.update(q, thetas, target.score(thetas), lam)
    return q


def test_diag_bam_on_a_correlated_target_is_not_mean_field():
    """B.8.3 (correction 18): μ = m and 1/σ_i² = (ΛSΛ)_ii, S = diag σ², not Λ_ii."""
    target, mean, cov, prec = correlated_gaussian(d=3, seed=0)
    lam = diag_fixed_point(target, 3)
    var = (2 * lam.rho).exp()
    assert (lam.mu - mean).abs().max() < 1e-10
    assert ((1 / var) / (prec @ torch.diag(var) @ prec).diagonal() - 1).abs().max() < 1e-10
    assert ((1 / var) / prec.diagonal()).max() > 1.2  # far from the mean-field answer
    assert ((1 / var) / prec.diagonal()).min() >= 1 - 1e-12  # (ΛSΛ)_ii ≥ Λ_ii
    # the stochastic algorithm reaches the same fixed point up to Monte Carlo noise (B = 512,
    # λ_t = 20/(t+1): errors ≤ 0.025 over seeds 0-4)
    alg = bam.build(target, num_samples=512, covariance="diag", schedule=lambda t: 20 / (t + 1))
    state, _ = run(alg, 200, torch.zeros(3, dtype=F64))
    q = alg.approximation(state)
    assert ((q.mean - mean).abs() / cov.diagonal().sqrt()).max() < 0.06
    assert ((q.std**2 / var) - 1).abs().max() < 0.06
    assert (1 / q.std**2 / prec.diagonal()).max() > 1.2


def test_step_size_schedules():
    target, *_ = correlated_gaussian()
    assert bam.build(target).step_size(0, 5) == 16 * 5
    assert bam.build(target, num_samples=4, lam_scale=0.5).step_size(9, 5) == 0.5 * 4 * 5 / 10
    assert bam.build(target, schedule="constant").step_size(99, 5) == 16 * 5
    seen = []
    alg = bam.build(target, schedule=lambda t: seen.append(t) or 100 / (t + 2))
    run(alg, 3, torch.zeros(5, dtype=F64))
    assert seen == [0, 1, 2]  # t counts steps from 0: GSM-VI's example gives λ = 50 first
    with pytest.raises(ValueError, match="lam_scale"):
        bam.build(target, schedule=lambda t: 1.0, lam_scale=2.0)


def test_lam_scale_follows_the_problem(blr):
    """lam_scale None: 1 on a Target (λ₀ = B·d), 1/(4d) on a network (λ₀ = B/4)."""
    model, _, _, _ = blr
    d = sum(t.numel() for t in tree_leaves(model.init_params(torch.Generator())))
    on_net = bam.build(model, num_samples=4)
    assert on_net.lam_scale == 0.25 / d
    assert on_net.step_size(0, d) == pytest.approx(1.0)
    assert on_net.step_size(3, d) == pytest.approx(0.25)
    assert bam.build(model, lam_scale=0.5).lam_scale == 0.5  # a given value is kept
    assert bam.build(model, schedule=lambda t: 2.0).step_size(0, d) == 2.0
    target, *_ = correlated_gaussian()
    assert bam.build(target).lam_scale == 1.0


def nan_on_calls(calls: set[int], d: int = 3):
    """A standard normal target whose log density (and score) is NaN on the given calls."""
    count = [0]

    def log_prob(th):
        value = -0.5 * (th**2).sum(-1)
        count[0] += 1
        return value * float("nan") if count[0] - 1 in calls else value

    return bdlkit.Target(log_prob, dim=d, dtype=F64)


@pytest.mark.parametrize("covariance", ["full", "lowrank", "diag"])
def test_a_nan_score_is_rejected_until_patience_runs_out(covariance):
    alg = bam.build(nan_on_calls({1, 2, 3, 4}), num_samples=4, covariance=covariance,
                    patience=3)
    state = alg.init(torch.zeros(3, dtype=F64), generator=torch.Generator().manual_seed(0))
    state, info = alg.step(state, None)
    assert info["accepted"] == 1.0
    for k in (1, 2, 3, 4):
        before = state
        state, info = alg.step(state, None)  # does not raise
        assert info["accepted"] == 0.0 and info["rejected"] == k and state.streak == k
        assert all(torch.equal(a, b) for a, b in zip(tree_leaves(before.lam),
                                                     tree_leaves(state.lam)))
        assert alg.status(state) == ("numerical_failure" if k >= 3 else "ok")
    state, info = alg.step(state, None)
    assert info["accepted"] == 1.0 and state.streak == 0 and alg.status(state) == "ok"


def test_an_indefinite_covariance_is_rejected(monkeypatch):
    target, *_ = correlated_gaussian()
    alg = bam.build(target)
    monkeypatch.setattr(bam, "match_cov", lambda u, v: -v)  # forced: no Cholesky factor
    state = alg.init(torch.zeros(5, dtype=F64), generator=torch.Generator().manual_seed(0))
    new, info = alg.step(state, None)
    assert info["accepted"] == 0.0 and new.rejected == 1
    assert torch.equal(new.lam.chol, state.lam.chol)


@pytest.mark.parametrize("covariance", ["full", "lowrank"])
def test_full_covariance_needs_a_target(blr, covariance):
    model, _, _, _ = blr
    with pytest.raises(ValueError, match="covariance='diag'"):
        bam.build(model, covariance=covariance)


def test_diag_bam_runs_on_a_network(blr):
    model, (x, y), _, _ = blr
    alg = bam.build(model, num_samples=4, covariance="diag", init_std=0.1)
    state, info = run(alg, 5, None, batch=(x[:50], y[:50]))
    assert isinstance(alg.params(state), dict)
    assert state.rejected == 0 and info["accepted"] == 1.0
    assert all(torch.isfinite(t).all() for t in tree_leaves(state.lam))
    assert alg.approximation(state).sample(3, torch.Generator())["weight"].shape == (3, 1, 3)


@pytest.mark.parametrize("covariance", ["full", "lowrank", "diag"])
def test_state_round_trips_through_a_checkpoint_and_step_is_pure(covariance):
    target, *_ = correlated_gaussian()
    alg = bam.build(target, covariance=covariance)
    state, _ = run(alg, 3, torch.zeros(5, dtype=F64))
    template = alg.init(torch.ones(5, dtype=F64), generator=torch.Generator().manual_seed(5))
    restored, s1 = assert_restores(alg, state, template)
    assert restored.step == 3
    s3, _ = alg.step(state, None)  # same state in, same state out
    assert all(torch.equal(a, b) for a, b in zip(tree_leaves(s1.lam), tree_leaves(s3.lam)))


@pytest.mark.parametrize(
    "kwargs, match",
    [({"num_samples": 0}, "num_samples"), ({"num_samples": True}, "num_samples"),
     ({"covariance": "kron"}, "covariance"), ({"init_std": -1.0}, "init_std"),
     ({"lam_scale": 0.0}, "lam_scale"), ({"lam_scale": float("nan")}, "lam_scale"),
     ({"schedule": "cosine"}, "schedule"), ({"patience": 0}, "patience")],
)
def test_build_rejects_bad_hyperparameters(kwargs, match):
    target, *_ = correlated_gaussian()
    with pytest.raises(ValueError, match=match):
        bam.build(target, **kwargs)


def test_an_eigendecomposition_that_does_not_converge_is_a_rejected_update(monkeypatch):
    target, *_ = correlated_gaussian()
    alg = bam.build(target, num_samples=8)
    state = alg.init(generator=torch.Generator().manual_seed(0))

    def no_convergence(m):
        raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge")

    monkeypatch.setattr(torch.linalg, "eigh", no_convergence)
    new, info = alg.step(state, None)
    assert info["accepted"] == 0 and new.rejected == 1
    assert torch.equal(new.lam.mean, state.lam.mean)
