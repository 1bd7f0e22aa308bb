"""The Pyro NUTS adapter: exact sampling of Gaussians, reproducible and resumable states."""

import sys

import pytest
import torch
from sampler_helpers import (
    assert_marginals_preserved,
    assert_recovers,
    correlated_target,
    exact_draws,
)

import bdlkit
from bdlkit.algorithms.mcmc import nuts
from bdlkit.core.serialization import state_from_tensors, state_to_tensors
from bdlkit.engine.collect.store import MemoryStore
from bdlkit.engine.runner import Runner

pytest.importorskip("pyro")
F64 = torch.float64


def run(alg, steps, burnin, data=None, **kwargs):
    return Runner(alg, data, store=MemoryStore(burnin=burnin), **kwargs).fit(steps)


@pytest.mark.slow
def test_recovers_correlated_gaussian():
    target, mean, cov = correlated_target(3)
    res = run(nuts.build(target, warmup=100), steps=400, burnin=100, seed=0, chains=4)
    draws = res.sample(res.num_kept)
    assert draws.shape == (4 * 300, 3)
    start = torch.randn(2000, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    assert_recovers(draws, start, mean, cov)  # start: the N(0, I) the chains start from
    after = [h["accept_prob"] for h in res.history[100:]]
    assert 0.6 < sum(after) / len(after) <= 1.0


def test_preserves_exact_draws_with_a_fixed_step_size():
    target, mean, cov = correlated_target(3)
    start = exact_draws(mean, cov, 100, seed=5)
    res = run(nuts.build(target, step_size=0.5, warmup=0), steps=3, burnin=2, seed=0, init=start)
    last = res.sample(100)
    assert not torch.equal(last, start)
    assert res.history[-1]["step_size"] == 0.5  # no adaptation
    assert_marginals_preserved(last, mean, cov)


def test_same_seed_same_draws():
    target, _, _ = correlated_target(3)
    draws = [run(nuts.build(target, warmup=10), steps=20, burnin=10, seed=s, chains=2).samples
             for s in (3, 3, 4)]
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])


def steps(alg, state, n):
    for _ in range(n):
        state, info = alg.step(state, None)
    return state, info


def assert_same_state(a, b):
    for key in ("params", "rng_state", "step_size", "inverse_mass"):
        assert torch.equal(getattr(a, key), getattr(b, key)), key
    assert a.step == b.step


def test_state_round_trip_after_warmup_continues_identically():
    target, _, _ = correlated_target(3)
    alg = nuts.build(target, warmup=40)  # >= 20: Pyro adapts the mass matrix in one window
    init = target.init_params(torch.Generator().manual_seed(0), chains=2)
    s0 = alg.init(init, generator=torch.Generator().manual_seed(1))
    assert s0.step_size.shape == (2,) and s0.inverse_mass.shape == (2, 3)
    s20, _ = steps(alg, s0, 20)
    s45, _ = steps(alg, s20, 25)
    s50, info = steps(alg, s45, 5)  # uninterrupted, cached kernels
    assert {"log_prob", "accept_prob", "step_size", "tree_depth", "num_grads"} <= set(info)
    assert not torch.equal(s45.inverse_mass, torch.ones(2, 3, dtype=F64))  # adapted
    assert torch.equal(s45.step_size, s50.step_size)  # frozen after warm-up
    fresh = nuts.build(target, warmup=40)  # a new process: no cached kernels
    template = fresh.init(init, generator=torch.Generator().manual_seed(1))
    loaded = state_from_tensors(template, state_to_tensors(s45))
    assert_same_state(steps(fresh, loaded, 5)[0], s50)
    assert_same_state(steps(alg, s45, 5)[0], s50)  # stepping an old state again
    mid, _ = steps(nuts.build(target, warmup=40), s20, 25)  # a resume inside warm-up restarts
    assert mid.step == 45 and torch.isfinite(mid.params).all()  # adaptation: valid, not equal


def test_no_mass_adaptation_keeps_unit_mass():
    target, _, _ = correlated_target(3)
    alg = nuts.build(target, warmup=40, adapt_mass_matrix=False)
    s = alg.init(generator=torch.Generator().manual_seed(0))
    s, _ = steps(alg, s, 41)
    assert torch.equal(s.inverse_mass, torch.ones(3, dtype=F64)) and s.step_size.shape == ()


@pytest.mark.slow
def test_blr_posterior_full_batch(blr):
    model, data, mean, cov = blr
    init = {"weight": torch.zeros(1, 3, dtype=F64)}  # the fixture's module is not seeded
    res = run(nuts.build(model, warmup=100), steps=800, burnin=100, data=data, seed=0,
              batch_size=len(data[0]), init=init)
    w = res.samples["weight"].reshape(-1, 3)
    std = cov.diagonal().sqrt()
    assert len(w) == 700 and res.state.inverse_mass.shape == (3,)
    assert ((w.mean(0) - mean) / std).abs().max() < 0.15
    assert torch.allclose(w.std(0), std, rtol=0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_refuses_cuda_params():
    target, _, _ = correlated_target(3)
    alg = nuts.build(target)
    with pytest.raises(ValueError, match="hmc"):
        alg.init(torch.zeros(3, dtype=F64, device="cuda"), generator=torch.Generator())


def test_refuses_non_cpu_params_everywhere():  # the same check, on a device every machine has
    target, _, _ = correlated_target(3)
    with pytest.raises(ValueError, match="CPU only"):
        nuts.build(target).init(torch.zeros(3, device="meta"), generator=torch.Generator())


@pytest.mark.parametrize("hyper", [
    {"step_size": 0.0}, {"step_size": float("inf")}, {"step_size": "big"},
    {"max_tree_depth": 0}, {"max_tree_depth": 2.5}, {"max_tree_depth": 31},
    {"warmup": -1}, {"warmup": True}, {"target_accept": 1.0}, {"target_accept": 0.0},
    {"adapt_mass_matrix": "yes"},
])
def test_invalid_hyperparameters(hyper):
    target, _, _ = correlated_target(3)
    with pytest.raises(ValueError, match=next(iter(hyper))):
        nuts.build(target, **hyper)


def test_unsupported_problem_and_missing_pyro(monkeypatch):
    with pytest.raises(TypeError, match="Target"):
        nuts.build(object())
    target, _, _ = correlated_target(3)
    monkeypatch.setitem(sys.modules, "pyro.infer.mcmc", None)
    with pytest.raises(ImportError, match=r"bdlkit\[reference\]"):
        nuts.build(target)


def test_default_warmup_is_half_the_run_at_most_200():
    target = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=2, dtype=torch.float64)
    alg = nuts.build(target)
    assert alg.warmup_steps == 200
    assert alg.for_run(30).warmup == 15
    assert alg.for_run(1000).warmup == 200


def test_a_large_network_warns_before_the_run_that_nuts_is_costly():
    import warnings

    from torch import nn

    from bdlkit.core.errors import DefaultsWarning

    net = nn.Linear(1000, 10)  # 10 010 parameters
    big = bdlkit.BayesianModel(net, likelihood="categorical", prior=1.0, num_data=20_000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nuts.build(big).for_run(30)  # the run's copy does not say it again
    costly = [w for w in caught if issubclass(w.category, DefaultsWarning)]
    assert len(costly) == 1 and "10010 parameters and 20000 training rows" in str(costly[0].message)
    small = bdlkit.BayesianModel(nn.Linear(4, 2), likelihood="categorical", prior=1.0,
                                 num_data=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DefaultsWarning)
        nuts.build(small)
