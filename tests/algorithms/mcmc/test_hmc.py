"""Full-batch HMC: moment recovery and preservation on a correlated Gaussian, dual averaging,
the Metropolis–Hastings correction, the exact BLR posterior, agreement with Pyro NUTS on a
Bayesian logistic regression, and checkpointable, pure steps."""

import math

import pytest
import torch
from sampler_helpers import (
    assert_marginals_preserved,
    assert_recovers,
    correlated_target,
    exact_draws,
)

import bdlkit
from bdlkit.algorithms.mcmc import hmc
from bdlkit.core.serialization import state_from_tensors, state_to_tensors
from bdlkit.core.tree import tree_leaves
from bdlkit.diagnostics.vehtari import ess_bulk_vehtari21
from bdlkit.engine.collect import MemoryStore
from bdlkit.engine.runner import Runner

F64 = torch.float64


def run(alg, steps, data=None, *, init=None, seed=0, burnin=0, thin=1, batch_size=128):
    store = MemoryStore(burnin=burnin, thin=thin)
    return Runner(alg, data, seed=seed, init=init, batch_size=batch_size, store=store,
                  log_every=1).fit(steps)


def normal_start(chains, d=3, seed=0):
    return torch.randn(chains, d, generator=torch.Generator().manual_seed(seed), dtype=F64)


def assert_same(a, b):
    for x, y in zip(tree_leaves(a), tree_leaves(b), strict=True):
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y


def test_recovers_a_correlated_gaussian_from_far_away():
    target, mean, cov = correlated_target()
    start = normal_start(100)
    # L = 3 with the adapted ε ≈ 0.85: no leapfrog resonance (ε·ω = √2 with L = 2 would map
    # x ↦ −x along the narrowest axis every iteration and never mix that direction)
    alg = hmc.build(target, step_size=0.3, num_leapfrog=3, adapt_steps=100)
    res = run(alg, 300, init=start, burnin=100)
    assert_recovers(res.sample(res.num_kept), start, mean, cov)
    assert res.samples.shape == (200, 100, 3)


def test_preserves_the_target_from_exact_draws():
    target, mean, cov = correlated_target()
    chains, steps = 400, 10
    start = exact_draws(mean, cov, chains, seed=100)
    alg = hmc.build(target, step_size=0.6, num_leapfrog=3, adapt_steps=0)
    res = run(alg, steps, init=start, burnin=steps - 1)
    last = res.sample(chains)
    assert_marginals_preserved(last, mean, cov)
    # accept/reject per chain: with one joint test over 400 chains almost nothing would move
    acc = sum(h["accept_prob"] for h in res.history) / steps
    assert acc > 0.8
    assert (last != start).any(-1).float().mean() > 0.95


def test_dual_averaging_hits_the_target_acceptance_then_fixes_the_step_size():
    target, _, _ = correlated_target()
    # a few hundred adaptation steps: after only ~100 the averaged log ε is still pulled
    # down by the early iterates and the acceptance lands 0.1-0.3 above target (low d)
    adapt, target_accept = 400, 0.7
    alg = hmc.build(target, step_size=0.05, num_leapfrog=4, adapt_steps=adapt,
                    target_accept=target_accept)
    res = run(alg, adapt + 150, init=normal_start(20), burnin=adapt + 149)
    during, after = res.history[:adapt], res.history[adapt:]
    assert len({h["step_size"] for h in during}) > 100
    sizes = {h["step_size"] for h in after}
    assert len(sizes) == 1  # fixed at exp(averaged log ε)
    assert all(h["num_leapfrog"] == 4 for h in after)
    acc = sum(h["accept_prob"] for h in after) / len(after)
    assert abs(acc - target_accept) < 0.1, acc
    assert alg.step_size_now(res.state) == sizes.pop()


def test_trajectory_length_sets_the_number_of_leapfrog_steps():
    target, _, _ = correlated_target()
    alg = hmc.build(target, step_size=0.3, trajectory_length=1.0, adapt_steps=0)
    assert alg.leapfrog_steps(0.3) == 4 and alg.leapfrog_steps(1e-9) == 1000
    res = run(alg, 3, init=normal_start(4))
    assert [h["num_leapfrog"] for h in res.history] == [4, 4, 4]


def test_huge_steps_are_all_rejected_and_nan_never_reaches_the_params():
    def log_prob(th):  # NaN outside the ball |θ| < 10
        r2 = th.square().sum(-1)
        return -0.5 * r2 + torch.log(1 - r2 / 100)

    target = bdlkit.Target(log_prob, dim=3, dtype=F64)
    start = normal_start(20)
    alg = hmc.build(target, step_size=1e3, num_leapfrog=3, adapt_steps=0)
    state = alg.init(start, generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        state, info = alg.step(state, None)
        assert torch.equal(state.params, start)
        assert info["accept_prob"] == 0 and info["divergent"] == 1
        assert torch.isfinite(info["log_prob"]) and torch.isfinite(state.score).all()
    assert torch.allclose(state.log_prob, target.log_prob(start))

    finite = hmc.build(correlated_target()[0], step_size=1e3, adapt_steps=0)  # huge energy error
    s, info = finite.step(finite.init(start, generator=torch.Generator().manual_seed(1)), None)
    assert torch.equal(s.params, start) and info["divergent"] == 1 and info["accept_prob"] == 0


def test_blr_posterior_full_batch(blr):
    model, data, mean, cov = blr
    # posterior stds ≈ 0.1: a trajectory of ≈ (π/2)·σ decorrelates; ≈ π·σ would only flip
    alg = hmc.build(model, step_size=0.05, trajectory_length=0.15, adapt_steps=100)
    res = run(alg, 800, data, burnin=200, batch_size=100)
    w = res.samples["weight"].reshape(-1, 3)
    std = cov.diagonal().sqrt()
    assert ((w.mean(0) - mean).abs() / std).max() < 0.15
    assert ((w.std(0) - std).abs() / std).max() < 0.1
    assert res.history[-1]["num_leapfrog"] == math.ceil(0.15 / res.history[-1]["step_size"])


def logistic_target(n=100, d=3, seed=0):
    """Bayesian logistic regression on synthetic data, N(0, I) prior, weights only."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    w = torch.tensor([1.5, -1.0, 0.5], dtype=F64)[:d]
    y = torch.bernoulli(torch.sigmoid(x @ w), generator=g)

    def log_prob(ws):
        logits = ws @ x.T  # (c, n)
        loglik = (y * logits - torch.nn.functional.softplus(logits)).sum(-1)
        return loglik - 0.5 * ws.square().sum(-1)

    return bdlkit.Target(log_prob, dim=d, name="logreg", dtype=F64)


def mean_and_mcse(draws):
    """Per-coordinate mean, std and Monte Carlo standard error of draws (chains, n, d)."""
    flat = draws.reshape(-1, draws.shape[-1])
    ess = ess_bulk_vehtari21(draws)
    return flat.mean(0), flat.std(0), flat.std(0) / ess.sqrt()


@pytest.mark.slow
def test_agrees_with_pyro_nuts_on_bayesian_logistic_regression():
    mcmc_mod = pytest.importorskip("pyro.infer.mcmc")
    pyro = pytest.importorskip("pyro")
    target = logistic_target()
    pyro.set_rng_seed(0)
    kernel = mcmc_mod.NUTS(potential_fn=lambda z: -target.log_prob(z["w"]))
    mcmc = mcmc_mod.MCMC(kernel, num_samples=1000, warmup_steps=200,
                         initial_params={"w": torch.zeros(3, dtype=F64)}, disable_progbar=True)
    mcmc.run()
    ref = mcmc.get_samples()["w"].unsqueeze(0)  # (1, n, d)
    m_ref, s_ref, e_ref = mean_and_mcse(ref)

    # posterior stds ≈ 0.27; with ε ≈ 0.21 two leapfrog steps turn by ≈ π/2, so both θ and θ²
    # decorrelate (ESS ≈ 3000 of 4000 draws); longer fixed trajectories nearly flip θ ↦ −θ,
    # great for the mean but slow for the std
    alg = hmc.build(target, step_size=0.1, trajectory_length=0.4, adapt_steps=100,
                    target_accept=0.9)
    res = run(alg, 300, init=normal_start(20), burnin=100)
    m, s, e = mean_and_mcse(res.samples.transpose(0, 1))  # (chains, draws, d)
    z = (m - m_ref).abs() / (e**2 + e_ref**2).sqrt()
    assert z.max() < 4, z
    assert ((s - s_ref).abs() / s_ref).max() < 0.1, (s, s_ref)


def test_state_round_trip_and_pure_steps(blr):
    target, _, _ = correlated_target()
    alg = hmc.build(target, step_size=0.3, num_leapfrog=3, adapt_steps=5)
    template = alg.init(normal_start(6), generator=torch.Generator().manual_seed(0))
    state = template
    for _ in range(3):
        state, _ = alg.step(state, None)
    assert state.cached and not template.cached and state.step == 3
    assert state.log_step_size.dtype == F64 and state.log_prob.shape == (6,)
    restored = state_from_tensors(template, state_to_tensors(state))
    assert_same(state, restored)
    a, info_a = alg.step(state, None)
    b, info_b = alg.step(restored, None)
    c, _ = alg.step(state, None)  # same state in, same state out
    assert_same(a, b)
    assert_same(a, c)
    assert info_a == info_b

    model, (x, y), _, _ = blr
    alg = hmc.build(model, step_size=0.05, num_leapfrog=2, adapt_steps=2)
    template = alg.init(generator=torch.Generator().manual_seed(0))
    state, _ = alg.step(template, (x, y))
    assert state.log_prob.shape == () and state.params["weight"].dtype == F64
    restored = state_from_tensors(template, state_to_tensors(state))
    assert_same(alg.step(state, (x, y))[0], alg.step(restored, (x, y))[0])


def test_runs_in_float32_when_the_params_are_float32():
    target, _, _ = correlated_target()
    alg = hmc.build(target, step_size=0.3, num_leapfrog=3, adapt_steps=0)
    state = alg.init(normal_start(4).float(), generator=torch.Generator().manual_seed(0))
    state, info = alg.step(state, None)
    assert state.params.dtype == torch.float32 and state.log_prob.dtype == F64


@pytest.mark.parametrize(
    "bad, name",
    [
        ({"step_size": 0.0}, "step_size"),
        ({"step_size": math.inf}, "step_size"),
        ({"num_leapfrog": 0}, "num_leapfrog"),
        ({"num_leapfrog": 2.5}, "num_leapfrog"),
        ({"trajectory_length": -1.0}, "trajectory_length"),
        ({"adapt_steps": -1}, "adapt_steps"),
        ({"target_accept": 1.0}, "target_accept"),
        ({"max_leapfrog": 0}, "max_leapfrog"),
    ],
)
def test_build_rejects_bad_hyperparameters(bad, name):
    with pytest.raises(ValueError, match=name):
        hmc.build(correlated_target()[0], **bad)


def test_protocol_attributes():
    alg = hmc.build(correlated_target()[0])
    assert (alg.name, alg.kind, hmc.KIND, hmc.HMC.full_batch) == ("hmc", "sampler", "sampler",
                                                                   True)


def test_default_burnin_covers_the_adaptation():
    """Draws taken while ε still adapts are never kept by default; a shorter user burn-in
    warns, and an adaptation as long as the run is refused."""
    target, _, _ = correlated_target()
    res = bdlkit.infer(target, "hmc", steps=60, adapt_steps=40, num_leapfrog=3, chains=2)
    assert res.store.burnin == 40
    with pytest.warns(UserWarning, match="still adapts"):
        bdlkit.infer(target, "hmc", steps=60, adapt_steps=40, num_leapfrog=3, chains=2,
                     burnin=10)
    with pytest.raises(ValueError, match="whole run"):
        bdlkit.infer(target, "hmc", steps=40, adapt_steps=40, num_leapfrog=3, chains=2)


def test_default_adaptation_is_half_the_run_at_most_100():
    """adapt_steps=None: half the run (a 30-iteration run adapts 15), capped at 100."""
    target = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=2, dtype=torch.float64)
    alg = hmc.build(target)
    assert alg.warmup_steps == 100  # stepped by hand: the cap
    assert alg.for_run(30).adapt_steps == 15
    assert alg.for_run(1000).adapt_steps == 100
    assert hmc.build(target, adapt_steps=7).for_run(30).adapt_steps == 7
