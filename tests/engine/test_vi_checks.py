"""The end-of-run VI checks: σ that never left init_std, and a final q that is not a
stationary point of the ELBO."""

import warnings

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit.algorithms.vi import advi
from bdlkit.core.errors import NotConvergedWarning, PointEstimateWarning, VIWarning
from bdlkit.engine.vi_checks import convergence_message, sigma_message, stationarity
from bdlkit.families.diag_gaussian import DiagGaussianParams

F64 = torch.float64


def gaussian(means, stds):
    return bdlkit.Target(lambda th: -0.5 * (((th - means) / stds) ** 2).sum(-1), len(means),
                         dtype=F64)


def classifier():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    return bdlkit.BayesianModel(net, "categorical", num_data=40)


def state_at(algorithm, mu, sigma):
    lam = DiagGaussianParams(mu=torch.as_tensor(mu, dtype=F64),
                             rho=torch.as_tensor(sigma, dtype=F64).log())
    return algorithm.init(lam, generator=torch.Generator().manual_seed(0))


def test_a_five_step_advi_run_warns_that_sigma_has_not_moved():
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    defaults = advi.build(classifier())
    with pytest.warns(PointEstimateWarning) as caught:
        bdlkit.infer(classifier(), "advi", data=(x, y), steps=5, batch_size=10)
    text = str(caught[0].message)
    for needle in ("median σ over all 67 coordinates is", f"init_std={defaults.init_std:g}",
                   "close to a point estimate", "more steps",
                   f"larger lr (now {defaults.lr:g})"):
        assert needle in text, needle
    with pytest.warns(PointEstimateWarning) as caught:  # on a network the closed form is
        bdlkit.infer(classifier(), "score_vi", data=(x, y), steps=5, batch_size=10,
                     solver="gradient")  # experimental: not suggested
    assert "closed_form" not in str(caught[0].message)
    target = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=3)
    with pytest.warns(PointEstimateWarning, match="score_vi solver='closed_form'"):
        bdlkit.infer(target, "score_vi", steps=5, start="init", init_std=1.0)


def test_a_warm_start_from_a_gaussian_is_not_checked_for_sigma():
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    model = classifier()
    lam = advi.build(model).init(generator=torch.Generator().manual_seed(0)).lam
    with warnings.catch_warnings():
        warnings.simplefilter("error", VIWarning)
        bdlkit.infer(model, "advi", data=(x, y), steps=5, batch_size=10, init=lam)


def test_long_enough_target_runs_do_not_warn():
    """σ grows from init_std 1e-3 to the target's 0.1 (start='init'), and the default
    Laplace start settles within its run: neither check fires."""
    target = gaussian(torch.tensor([1.0, -2.0, 0.5], dtype=F64),
                      torch.tensor([0.1, 0.1, 0.1], dtype=F64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", VIWarning)
        res = bdlkit.infer(target, "advi", steps=2000, start="init", num_samples=4,
                           lr=bdlkit.core.schedules.exponential(3e-2, 1e-4, 2000))
        bdlkit.infer(target, "advi", steps=400)
    assert (res.algorithm.approximation(res.state).std > 0.08).all()


def test_a_run_still_drifting_at_the_end_warns_that_it_has_not_converged():
    target = gaussian(torch.tensor([50.0], dtype=F64), torch.tensor([1.0], dtype=F64))
    with pytest.warns(NotConvergedWarning) as caught:  # μ crawls 0.01 per step towards 50
        bdlkit.infer(target, "advi", steps=400, start="init", init_std=1.0, lr=1e-2)
    text = next(str(w.message) for w in caught if w.category is NotConvergedWarning)
    for needle in ("has not converged", "1 of 1 coordinates", "in the mean (up to",
                   "run more steps (now 400)"):
        assert needle in text, needle


def test_the_thresholds():
    """On N(0, I): the exact q is stationary; a mean 0.6 σ off asks for a Newton step of 0.6
    (flagged), 0.4 σ off for 0.4 (not); σ = 1.6 asks for Δlog σ = (1 − 1.6²)/2 = −0.78
    (flagged), σ = 1.2 for −0.22 (not)."""
    algorithm = advi.build(gaussian(torch.zeros(3, dtype=F64), torch.ones(3, dtype=F64)),
                           init_std=1e-3)
    assert convergence_message(algorithm, state_at(algorithm, [0.0] * 3, [1.0] * 3), 100) is None
    assert convergence_message(algorithm, state_at(algorithm, [0.4, -0.4, 0.0],
                                                    [1.0, 1.2, 0.9]), 100) is None
    moved = convergence_message(algorithm, state_at(algorithm, [0.6, 0.0, 0.0],
                                                    [1.0, 1.0, 1.6]), 100)
    assert "2 of 3 coordinates" in moved and "up to 0.6" in moved and "log σ (up to 0.7" in moved
    q = algorithm.approximation(state_at(algorithm, [0.6, 0.0, 0.0], [1.0, 1.0, 1.6]))
    check = stationarity(algorithm.problem, q, draws=4096)
    torch.testing.assert_close(check.mean_step, torch.tensor([-0.6, 0, 0], dtype=F64),
                               atol=0.05, rtol=0)
    torch.testing.assert_close(check.log_sigma_step, torch.tensor([0, 0, -0.78], dtype=F64),
                               atol=0.05, rtol=0)
    assert sigma_message(algorithm, state_at(algorithm, [0.0] * 3, [1.4e-3, 1e-3, 1e-3]))
    assert sigma_message(algorithm, state_at(algorithm, [0.0] * 3, [1.6e-3, 1.6e-3, 1e-3])) \
        is None


def test_a_network_q_is_checked_with_the_full_data_score():
    """Five ADVI steps leave most weights far from stationary; a converged long run on the
    same 40 points leaves few (the fraction the benchmarks report)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 4, generator=g), torch.randint(0, 3, (40,), generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VIWarning)
        short = bdlkit.infer(classifier(), "advi", data=(x, y), steps=5, batch_size=40)
        long = bdlkit.infer(classifier(), "advi", data=(x, y), steps=1500, batch_size=40,
                            init_std=0.3, lr=3e-2, num_samples=4)
    fraction = {name: stationarity(r.problem, r.algorithm.approximation(r.state), (x, y),
                                   draws=64).summary()["unconverged"]
                for name, r in (("short", short), ("long", long))}
    assert fraction["short"] > 0.3 > 0.05 > fraction["long"], fraction
