"""GSM (Gaussian score matching): the closed-form update matches the score at the draw,
recovery of Gaussian targets (full and diagonal), rejected updates, networks and
checkpointable states (``docs/vi.md``, GSM)."""

import pytest
import torch
from vi_helpers import (
    assert_recovers_full_gaussian,
    assert_restores,
    correlated_gaussian,
    run,
)
from vi_helpers import diag_gaussian as diag_gaussian_target

import bdlkit
from bdlkit.algorithms.vi import gsm
from bdlkit.core import rng
from bdlkit.core.tree import tree_leaves
from bdlkit.families import diag_gaussian, full_gaussian
from bdlkit.families.diag_gaussian import DiagGaussianParams
from bdlkit.families.full_gaussian import FullGaussianParams

F64 = torch.float64


def banana(d: int = 4):
    """A non-Gaussian target (curved, heavy-ish tails)."""
    def log_prob(th):
        return (-0.5 * th[:, 0] ** 2 - 0.5 * ((th[:, 1:] - th[:, :1] ** 2) ** 2).sum(-1)
                - torch.log1p(th**2).sum(-1))
    return bdlkit.Target(log_prob, dim=d, dtype=F64)


def test_full_update_matches_the_score_at_the_draw_for_any_score():
    """Part E check 4: −Σ'⁻¹(x − μ') = g for B = 1, whatever g is, and Σ' stays PD."""
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        mean = torch.randn(6, generator=g, dtype=F64)
        a = torch.randn(6, 6, generator=g, dtype=F64)
        cov = a @ a.T + 0.1 * torch.eye(6, dtype=F64)
        x = mean + 2 * torch.randn(1, 6, generator=g, dtype=F64)
        score = 3 * torch.randn(1, 6, generator=g, dtype=F64)
        new = full_gaussian.from_cov(*gsm.full_update(mean, cov, x, score))
        assert new is not None  # positive definite
        assert torch.allclose(full_gaussian.score(new, x), score, rtol=0, atol=1e-10)


def test_full_update_equals_the_per_sample_formula_averaged():
    """The vectorised batch update = the literal B.8.2 formula per sample, increments averaged."""
    g = torch.Generator().manual_seed(1)
    mean = torch.randn(4, generator=g, dtype=F64)
    a = torch.randn(4, 4, generator=g, dtype=F64)
    cov = a @ a.T + torch.eye(4, dtype=F64)
    xs, gs = torch.randn(3, 4, generator=g, dtype=F64), torch.randn(3, 4, generator=g, dtype=F64)
    d_mu, d_cov = [], []
    for x, s in zip(xs, gs):
        rho = 0.5 * torch.sqrt(1 + 4 * (s @ cov @ s + ((mean - x) @ s) ** 2)) - 0.5
        eps0 = cov @ s - mean + x
        proj = torch.eye(4, dtype=F64) - torch.outer(mean - x, s) / (1 + rho + (mean - x) @ s)
        new_mean = mean + proj @ eps0 / (1 + rho)
        d_mu.append(new_mean - mean)
        d_cov.append(torch.outer(mean - x, mean - x) - torch.outer(new_mean - x, new_mean - x))
    mu, sigma = gsm.full_update(mean, cov, xs, gs)
    assert torch.allclose(mu, mean + torch.stack(d_mu).mean(0), rtol=0, atol=1e-12)
    assert torch.allclose(sigma, cov + torch.stack(d_cov).mean(0), rtol=0, atol=1e-12)


def test_one_full_step_matches_the_target_score_at_its_draw():
    target, *_ = correlated_gaussian()
    alg = gsm.build(target, num_samples=1)
    state = alg.init(torch.zeros(5, dtype=F64), generator=torch.Generator().manual_seed(0))
    x = full_gaussian.sample(state.lam, 1, rng.from_state(state.rng_state))  # the step's draw
    new, info = alg.step(state, None)
    assert info["accepted"] == 1.0 and info["rejected"] == 0
    assert torch.allclose(full_gaussian.score(new.lam, x), target.score(x), rtol=0, atol=1e-10)


def test_one_diag_step_matches_the_score_per_coordinate_on_any_target():
    """Diagonal GSM: −(x_i − μ'_i)/σ'_i² = g_i exactly, also on a non-Gaussian target."""
    target = banana()
    alg = gsm.build(target, num_samples=1, covariance="diag")
    state = alg.init(torch.full((4,), 0.3, dtype=F64), generator=torch.Generator().manual_seed(2))
    for _ in range(3):
        x = diag_gaussian.sample(state.lam, 1, rng.from_state(state.rng_state))
        state, info = alg.step(state, None)
        assert info["accepted"] == 1.0
        assert torch.allclose(diag_gaussian.score(state.lam, x), target.score(x), rtol=0,
                              atol=1e-10)


def test_full_gsm_recovers_a_correlated_gaussian():
    target, mean, cov, _ = correlated_gaussian()
    alg = gsm.build(target)  # B = 2
    state, info = run(alg, 150, torch.zeros(5, dtype=F64))
    assert_recovers_full_gaussian(alg, state, info, mean, cov)


def test_diag_gsm_recovers_a_diagonal_gaussian():
    std = torch.logspace(-1, 1, 6, dtype=F64)
    target, mean = diag_gaussian_target(std)
    alg = gsm.build(target, covariance="diag")
    state, _ = run(alg, 80, torch.zeros(6, dtype=F64))
    q = alg.approximation(state)
    assert isinstance(state.lam, DiagGaussianParams)
    assert ((q.mean - mean).abs() / std).max() < 1e-6
    assert ((q.std**2 - std**2).abs() / std**2).max() < 1e-6


def nan_on_calls(calls: set[int], d: int = 3):
    """A standard normal target whose log density (and score) is NaN on the given calls."""
    count = [0]

    def log_prob(th):
        value = -0.5 * (th**2).sum(-1)
        count[0] += 1
        return value * float("nan") if count[0] - 1 in calls else value

    return bdlkit.Target(log_prob, dim=d, dtype=F64)


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_a_nan_score_is_rejected_and_the_run_recovers(covariance):
    alg = gsm.build(nan_on_calls({1, 2}), covariance=covariance, patience=3)
    state = alg.init(torch.zeros(3, dtype=F64), generator=torch.Generator().manual_seed(0))
    state, info = alg.step(state, None)
    assert info["accepted"] == 1.0
    for k in (1, 2):
        before = state
        state, info = alg.step(state, None)
        assert info["accepted"] == 0.0 and info["rejected"] == k
        assert state.rejected == k and state.streak == k and state.step == k + 1
        for a, b in zip(tree_leaves(before.lam), tree_leaves(state.lam)):
            assert torch.equal(a, b)
        assert alg.status(state) == "ok"
    state, info = alg.step(state, None)
    assert info["accepted"] == 1.0 and state.rejected == 2 and state.streak == 0


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_patience_rejections_in_a_row_mean_numerical_failure(covariance):
    alg = gsm.build(nan_on_calls(set(range(100))), covariance=covariance, patience=4)
    state = alg.init(torch.zeros(3, dtype=F64), generator=torch.Generator().manual_seed(0))
    lam0 = state.lam
    for k in range(1, 5):
        state, info = alg.step(state, None)  # does not raise
        assert info["accepted"] == 0.0 and info["rejected"] == k
        assert alg.status(state) == ("numerical_failure" if k == 4 else "ok")
    assert all(torch.equal(a, b) for a, b in zip(tree_leaves(lam0), tree_leaves(state.lam)))


def test_an_indefinite_covariance_is_rejected(monkeypatch):
    """A Σ' without a Cholesky factor (forced) is rejected, not raised."""
    target, *_ = correlated_gaussian()
    alg = gsm.build(target)

    def indefinite(mean, cov, thetas, scores):
        return mean, cov - 100 * torch.eye(cov.shape[0], dtype=cov.dtype)

    monkeypatch.setattr(gsm, "full_update", indefinite)
    state = alg.init(torch.zeros(5, dtype=F64), generator=torch.Generator().manual_seed(0))
    new, info = alg.step(state, None)
    assert info["accepted"] == 0.0 and new.rejected == 1
    assert torch.equal(new.lam.chol, state.lam.chol) and torch.equal(new.lam.mean,
                                                                       state.lam.mean)


def test_full_covariance_needs_a_target(blr):
    model, _, _, _ = blr
    with pytest.raises(ValueError, match="covariance='diag'"):
        gsm.build(model, covariance="full")


def test_defaults_follow_the_problem(blr):
    """covariance/init_std None: diag and 0.01 on a network, full and 1 on a Target."""
    from bdlkit.algorithms.vi import bam

    model, _, _, _ = blr
    for build in (gsm.build, bam.build):
        on_net = build(model)
        assert (on_net.covariance, on_net.init_std) == ("diag", 0.01)
        on_target = build(banana())
        assert (on_target.covariance, on_target.init_std) == ("full", 1.0)


def test_diag_gsm_runs_on_a_network(blr):
    model, (x, y), _, _ = blr
    alg = gsm.build(model, covariance="diag", init_std=0.1)
    state, info = run(alg, 5, None, batch=(x[:50], y[:50]))
    assert isinstance(alg.params(state), dict)
    assert all(torch.isfinite(t).all() for t in tree_leaves(state.lam))
    assert alg.approximation(state).sample(3, torch.Generator())["weight"].shape == (3, 1, 3)
    assert state.step == 5 and state.rejected == 0 and info["accepted"] == 1.0


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_state_round_trips_through_a_checkpoint_and_step_is_pure(covariance):
    target, *_ = correlated_gaussian()
    alg = gsm.build(target, covariance=covariance)
    state, _ = run(alg, 3, torch.zeros(5, dtype=F64))
    template = alg.init(torch.ones(5, dtype=F64), generator=torch.Generator().manual_seed(5))
    restored, s1 = assert_restores(alg, state, template)
    assert restored.step == 3 and isinstance(restored.rejected, int)
    s3, _ = alg.step(state, None)  # same state in, same state out
    assert all(torch.equal(a, b) for a, b in zip(tree_leaves(s1.lam), tree_leaves(s3.lam)))


def test_init_warm_starts_and_checks_the_starting_point():
    target, *_ = correlated_gaussian()
    gen = torch.Generator().manual_seed(0)
    alg = gsm.build(target, init_std=0.5)
    state = alg.init(generator=gen)  # the problem's random start, in its dtype
    assert state.lam.mean.dtype == F64
    assert torch.allclose(full_gaussian.cov(state.lam), 0.25 * torch.eye(5, dtype=F64))
    lam = FullGaussianParams(mean=torch.ones(5, dtype=F64), chol=2 * torch.eye(5, dtype=F64))
    warm = alg.init(lam, generator=gen)
    assert torch.equal(warm.lam.chol, lam.chol) and warm.lam.chol is not lam.chol
    with pytest.raises(ValueError, match="FullGaussianParams"):
        alg.init(DiagGaussianParams(mu=torch.zeros(5, dtype=F64),
                                    rho=torch.zeros(5, dtype=F64)), generator=gen)
    with pytest.raises(ValueError, match="one approximation"):
        gsm.build(target, covariance="diag").init(torch.zeros(2, 5, dtype=F64), generator=gen)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"num_samples": 0}, "num_samples"), ({"num_samples": 1.5}, "num_samples"),
     ({"covariance": "lowrank"}, "covariance"), ({"init_std": 0.0}, "init_std"),
     ({"init_std": float("inf")}, "init_std"), ({"patience": 0}, "patience")],
)
def test_build_rejects_bad_hyperparameters(kwargs, match):
    target, *_ = correlated_gaussian()
    with pytest.raises(ValueError, match=match):
        gsm.build(target, **kwargs)


@pytest.mark.parametrize("method,hyper", [("gsm", {}), ("bam", {"covariance": "lowrank"}),
                                          ("gsm", {"covariance": "diag"})])
def test_infer_runs_the_projection_methods_and_samples_their_approximation(method, hyper):
    target, mean, cov, _ = correlated_gaussian(d=3)
    res = bdlkit.infer(target, method, steps=150, seed=0, **hyper)
    q = res.algorithm.approximation(res.state)
    draws = res.sample(40_000)
    assert draws.shape == (40_000, 3)
    assert torch.allclose(draws.mean(0), q.mean, atol=0.05 * cov.diagonal().max() ** 0.5)
    if hyper.get("covariance") != "diag":  # full family: q is the target
        assert torch.allclose(q.mean, mean, atol=1e-6) and torch.allclose(q.cov, cov, atol=1e-6)
        assert torch.allclose(torch.cov(draws.T), cov, atol=0.1 * cov.diagonal().max())
