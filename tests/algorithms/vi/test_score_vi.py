"""SSM-prox (score_vi): its relation to ADVI (exact), the closed-form proximal solver
(centred curvature, robustness to a tiny σ₀, the guard), the natural-gradient K-step route,
and bad input."""

import math
import warnings

import pytest
import torch

import bdlkit
from bdlkit.algorithms.vi import advi, score_vi
from bdlkit.algorithms.vi import score_vi_closed_form as closed_form
from bdlkit.core.errors import NonFiniteError
from bdlkit.core.tree import tree_leaves
from bdlkit.families import diag_gaussian as family

F64 = torch.float64


def gaussian_target(lam, m):
    return bdlkit.Target(lambda th: -0.5 * (((th - m) @ lam) * (th - m)).sum(-1), dim=len(m),
                         dtype=F64)


def correlated(d=4, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=F64)
    lam = a @ a.T / d + torch.eye(d, dtype=F64)
    return lam, scale * torch.randn(d, generator=g, dtype=F64)


def excess_kl(q, lam, m):
    """KL(q ‖ N(m, Λ⁻¹)) minus that of the mean-field optimum N(m, diag(1/Λ_ii))."""
    var, diag = q.std**2, torch.diagonal(lam)
    dm = q.mean - m
    return float(0.5 * ((diag * var).sum() + dm @ lam @ dm - len(m) - var.log().sum()
                        - diag.log().sum()))


#: the closed form without momentum, schedule or averaging: each step the damped argmin
RAW = {"momentum": 0.0, "schedule": "constant", "average": 0.0}


def prox(problem, **kw):
    return score_vi.build(problem, solver="closed_form", **kw)


def run(alg, steps, init, seed=1, batch=None):
    alg = alg.for_run(steps) if hasattr(alg, "for_run") else alg
    state = alg.init(init, generator=torch.Generator().manual_seed(seed))
    info = {}
    for _ in range(steps):
        state, info = alg.step(state, batch)
    return alg, state, info


def mlp_model(seed=0):
    ds = bdlkit.data.load("digits")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        net = bdlkit.models.MLP(ds.input_shape, ds.num_classes, hidden=(20,))
    return ds, bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=ds.num_train)


# ------------------------------------------------------------------ relation to ADVI
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_gradient_solver_with_one_inner_step_is_advi_on_a_target(optimizer):
    lam, m = correlated()
    target = gaussian_target(lam, m)
    kw = {"lr": 0.01, "num_samples": 3, "init_std": 0.5, "optimizer": optimizer}
    _, a, _ = run(score_vi.build(target, solver="gradient", **kw), 300, torch.zeros(4, dtype=F64))
    _, b, _ = run(advi.build(target, **kw), 300, torch.zeros(4, dtype=F64))
    assert torch.allclose(a.lam.mu, b.lam.mu, rtol=0, atol=1e-12)
    assert torch.allclose(a.lam.rho, b.lam.rho, rtol=0, atol=1e-12)
    assert not torch.equal(a.lam.mu, torch.zeros(4, dtype=F64))  # it moved


@pytest.mark.parametrize("loss,stl", [("rb", False), ("mc", True)])
def test_gradient_solver_is_advi_on_a_network(loss, stl):
    """Same gradients, so under Adam (default ε) the iterates agree to float rounding; the
    Monte Carlo loss at K = 1 is ADVI with sticking-the-landing gradients."""
    ds, model = mlp_model()
    batches = [(ds.x_train[i:i + 64], ds.y_train[i:i + 64]) for i in range(0, 640, 64)]
    states = []
    for alg in (score_vi.build(model, solver="gradient", loss=loss, lr=3e-3),
                advi.build(model, lr=3e-3, stl=stl)):
        state = alg.init(generator=torch.Generator().manual_seed(0))
        for t in range(60):
            state, _ = alg.step(state, batches[t % len(batches)])
        states.append(state.lam)
    for a, b in zip(tree_leaves(states[0]), tree_leaves(states[1]), strict=True):
        assert (a - b).abs().max() < 1e-5
    init = score_vi.build(model, solver="gradient").init(generator=torch.Generator().manual_seed(0))
    moved = max(float((a - b).abs().max()) for a, b in zip(tree_leaves(states[0]),
                                                            tree_leaves(init.lam)))
    assert moved > 0.05  # a real run, not two frozen states


def test_alpha_cannot_act_at_one_inner_step_and_setting_it_warns():
    lam, m = correlated()
    target = gaussian_target(lam, m)
    with pytest.warns(UserWarning, match="alpha_max.*cannot act"):
        a = score_vi.build(target, solver="gradient", alpha_max=0.9)
    b = score_vi.build(target, solver="gradient")
    sa, sb = (run(alg, 50, torch.zeros(4, dtype=F64))[1].lam for alg in (a, b))
    assert torch.equal(sa.mu, sb.mu) and torch.equal(sa.rho, sb.rho)
    with pytest.warns(UserWarning, match="lr cannot act"):
        score_vi.build(target, solver="closed_form", lr=0.1)
    with pytest.warns(UserWarning, match="omega"):
        score_vi.build(target, solver="gradient", omega=0.5)


def test_minibatch_gradients_average_to_the_full_batch_gradient(blr):
    """The loss is linear in the score: averaging over a partition of the data into
    minibatches gives the full-batch gradient, with the centred cross term too."""
    model, (x, y), _, _ = blr
    lam = score_vi.build(model).init(generator=torch.Generator().manual_seed(0)).lam
    thetas = family.sample(lam, 3, torch.Generator().manual_seed(1))
    for grads in (score_vi.rb_gradients, score_vi.mc_gradients,
                  lambda *a: score_vi.rb_gradients(*a, centred=True)):
        _, full = score_vi.minibatch_scores(model, thetas, (x, y))
        want = grads(lam, lam, thetas, full, 0.3)
        parts = [score_vi.minibatch_scores(model, thetas, (x[i:i + 20], y[i:i + 20]))[1]
                 for i in range(0, 100, 20)]
        got = [grads(lam, lam, thetas, s, 0.3) for s in parts]
        for name in want.mu:
            assert torch.allclose(sum(g.mu[name] for g in got) / 5, want.mu[name])
            assert torch.allclose(sum(g.rho[name] for g in got) / 5, want.rho[name])


# ------------------------------------------------------------------ the closed form
@pytest.mark.parametrize("antithetic,samples", [(True, 2), (False, 4)])
@pytest.mark.slow
def test_centred_curvature_is_unbiased_and_blind_to_the_distance_from_the_mode(antithetic,
                                                                            samples):
    """E[â_i] = Λ_ii on N(m, Λ⁻¹) (Stein), and its spread does not grow with |μ_t − m|/σ_t:
    the uncentred estimate's does."""
    lam, m = correlated(d=3)
    target = gaussian_target(lam, m)
    stats = {}
    for far in (0.0, 50.0):
        anchor = family.init(m + far, 0.1)
        draws = score_vi.ScoreVI(target, num_samples=samples, antithetic=antithetic).anchor_draws
        a_hats, raw = [], []
        gen = torch.Generator().manual_seed(0)
        for _ in range(4000):
            theta = draws(anchor, gen)
            s = target.value_and_score(theta, None)[1]
            estimator = "pair" if antithetic else "centred"
            a_hats.append(closed_form.curvature(anchor, theta, s, "rb", estimator)[0])
            raw.append(-((theta - anchor.mu) * s).mean(0) / 0.01)
        a_hats, raw = torch.stack(a_hats), torch.stack(raw)
        stats[far] = (a_hats.mean(0), a_hats.std(0), raw.std(0))
        se = a_hats.std(0) / math.sqrt(len(a_hats))
        assert ((a_hats.mean(0) - torch.diagonal(lam)).abs() < 4 * se + 1e-9).all()
    assert torch.allclose(stats[0.0][1], stats[50.0][1], rtol=0.1)  # centred: same spread
    if not antithetic:
        assert (stats[50.0][2] > 20 * stats[0.0][2]).all()  # uncentred: blown up


def test_closed_form_reaches_the_mean_field_optimum_from_a_tiny_initial_sigma():
    """20-D correlated Gaussian (λ_max(D⁻¹Λ) = 2.2, so ω = 0.3 is stable), q₀ = N(0, 1e-12 I):
    by step 200 the closed form (one antithetic pair per step; its curvature average starts
    at hess_init = 1 whatever σ₀) is within 0.25 nat of the mean-field optimum (measured
    0.20). On a 20-D diagonal Gaussian with sds 0.1 to 10 and means −2 to 2, from σ₀ = 1e-6
    with 8 draws per step, it is within 2 nats after 300 steps (measured 0.026), where
    ADVI, whose log σ moves about lr per step, is more than 100 nats away (measured 256)."""
    lam, m = correlated(d=20, scale=3.0)
    lam_max = torch.linalg.eigvals(lam / torch.diagonal(lam)[:, None]).real.max().item()
    assert 0.3 * lam_max < 2
    target, start = gaussian_target(lam, m), torch.zeros(20, dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the guard must not need to act
        alg, state, info = run(prox(target, omega=0.3, init_std=1e-6), 200, start)
    assert excess_kl(alg.approximation(state), lam, m) < 0.25
    assert info["precision_clipped"] == 0 and info["curvature_nonfinite"] == 0
    sds = torch.logspace(-1, 1, 20, dtype=F64)
    diag = gaussian_target(torch.diag(sds**-2), torch.linspace(-2, 2, 20, dtype=F64))
    kl = {}
    for method, kw in (("advi", {}), ("score_vi", {"solver": "closed_form"})):
        res = bdlkit.infer(diag, method, steps=300, seed=0, start="init", init_std=1e-6,
                           num_samples=8, **kw)
        kl[method] = excess_kl(res.algorithm.approximation(res.state), torch.diag(sds**-2),
                               torch.linspace(-2, 2, 20, dtype=F64))
    assert kl["score_vi"] < 2.0 < 100.0 < kl["advi"]


@pytest.mark.slow
def test_closed_form_converges_when_the_stability_condition_holds():
    lam, m = correlated()
    lam_max = torch.linalg.eigvals(lam / torch.diagonal(lam)[:, None]).real.max().item()
    omega = 0.1
    assert omega * lam_max < 2  # B.4.5 with the warm-up's α = 0, stated before iterating
    alg, state, _ = run(prox(gaussian_target(lam, m), omega=omega, num_samples=8,
                                       curvature_decay=0.99, init_std=1.0), 3000,
                        torch.zeros(4, dtype=F64))
    q = alg.approximation(state)
    assert (q.mean - m).abs().max() < 1e-6  # antithetic pairs: the mean score is exact here
    assert (q.std * torch.diagonal(lam).sqrt() - 1).abs().max() < 0.05


def test_guard_catches_the_divergent_closed_form_and_recovers():
    """Equicorrelated precision, ρ = 0.5, d = 10: λ_max(D⁻¹Λ) = 5.5 ≥ 2(1 + α) at ω = 1."""
    d = 10
    lam = 0.5 * torch.ones(d, d, dtype=F64) + 0.5 * torch.eye(d, dtype=F64)
    target = gaussian_target(lam, torch.zeros(d, dtype=F64))
    with pytest.warns(UserWarning, match="halving omega"):
        alg, state, _ = run(prox(target, num_samples=10, omega=1.0, alpha_max=1.0,
                                 warmup=0, init_std=1.0, **RAW), 600,
                            torch.full((d,), 3.0, dtype=F64))
    q = alg.approximation(state)
    assert torch.isfinite(q.mean).all() and q.mean.abs().max() < 0.3


def test_guard_gives_up_with_a_clear_error(monkeypatch):
    monkeypatch.setattr(closed_form, "GUARD_MAX_HALVINGS", 0)
    d = 10
    lam = 0.5 * torch.ones(d, d, dtype=F64) + 0.5 * torch.eye(d, dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NonFiniteError, match="solver='gradient'"):
            run(prox(gaussian_target(lam, torch.zeros(d, dtype=F64)), num_samples=10,
                     omega=1.0, alpha_max=1.0, warmup=0, init_std=1.0, **RAW), 600,
                torch.full((d,), 3.0, dtype=F64))


def test_precision_floor_is_the_prior_precision_and_clipping_is_counted():
    """A prior-dominated coordinate cannot get wider than the prior; a curvature average
    pushed below the floor is clipped and counted in info."""
    ds, model = mlp_model()
    assert score_vi.precision_floor(model) == 1.0
    alg = prox(model, a_min=1e6, init_std=0.1)  # a floor above every a: all clipped
    state = alg.init(generator=torch.Generator().manual_seed(0))
    state, info = alg.step(state, (ds.x_train[:64], ds.y_train[:64]))
    size = sum(p.numel() for p in tree_leaves(state.lam.mu))
    assert info["precision_clipped"] == size
    assert all(torch.allclose(r, torch.full_like(r, -0.5 * math.log(1e6)))
               for r in tree_leaves(state.lam.rho))


@pytest.mark.slow
def test_digits_default_has_map_accuracy_and_a_real_sigma():
    """Default score_vi (gradient solver = ADVI), 1000 steps: accuracy within 2 points of
    MAP and a σ that left its initial value (not a point estimate). Its NLL is higher than
    MAP's here: the former defaults "won" on NLL only because σ stayed near 1e-3, a MAP in
    disguise, so no NLL win is asserted. The NLL of one run depends much on the noise
    stream: over seeds 0-5 it was 0.091, 0.163, 0.318, 0.272, 0.099, 0.096 before the flat
    storage (one noise draw per step for all tensors) and 0.156, 0.436, 0.356, 0.107,
    0.093, 0.252 after (MAP 0.069), so the former bound of 2x MAP's NLL held for 3 of 6
    seeds either way; the bound is now 0.6, far below the 2.30 of the uniform predictor and
    above what a σ that drowned the network gives."""
    from bdlkit.evaluation import classification_values

    ds = bdlkit.data.load("digits")
    values, sigma = {}, None
    for method in ("map", "score_vi"):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            net = bdlkit.models.MLP(ds.input_shape, ds.num_classes, hidden=(100,))
        model = bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=ds.num_train)
        res = bdlkit.infer(model, method, data=ds, steps=1000, seed=0)
        values[method] = classification_values(res.predictive(ds.x_test, ds.y_test),
                                               ds.y_test)
        if method == "score_vi":
            sigma = family.sigma_summary(res.state.lam)[-1]["median"]
    assert values["score_vi"]["accuracy"] >= values["map"]["accuracy"] - 0.02
    assert values["score_vi"]["nll"] < 0.6
    assert sigma > 10 * 1e-2  # init_std 1e-2: measured 0.67 (0.86 after 10 000 steps)


def test_guard_window_restarts_after_a_back_off():
    """A back-off mid-window starts a new full window: the next comparison is not made on a
    partial sum divided by the window length."""
    lam, m = correlated()
    alg = prox(gaussian_target(lam, m), omega=0.3, init_std=1.0)
    state = alg.init(torch.zeros(4, dtype=F64), generator=torch.Generator().manual_seed(0))
    for _ in range(13):
        state, _ = alg.step(state, None)
    assert state.opt_state.window_steps == 3
    with pytest.warns(UserWarning, match="halving omega"):
        lam_b, backed = closed_form.back_off(state.opt_state, 13, "test")
    assert backed.window_steps == 0 and float(backed.omega) == 0.15
    assert torch.equal(backed.curvature, state.opt_state.curvature)  # the average is kept


def test_laplace_start_maps_the_closed_form_state_back_to_theta():
    """Via infer on a Target (Laplace start in standardised z), every Gaussian in the
    returned state, nested ones included, is in θ units."""
    m = torch.tensor([1000.0, -3.0], dtype=F64)
    target = gaussian_target(torch.diag(torch.tensor([1e-2, 1e4], dtype=F64)), m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bdlkit.infer(target, "score_vi", solver="closed_form", steps=40, seed=0)
    for lam in (res.state.lam, res.state.opt_state.saved_cur, res.state.opt_state.saved_prev):
        assert ((lam.mu - m).abs() / torch.tensor([10.0, 1e-2], dtype=F64)).max() < 1.0
    a_bar = res.state.opt_state.curvature / res.state.opt_state.weight
    ratio = a_bar / torch.tensor([1e-2, 1e4], dtype=F64)  # noisy (β 0.9), but in θ units
    assert ((ratio > 1 / 3) & (ratio < 3)).all(), ratio


# ------------------------------------------------------------------ K > 1 (generic route)
def test_natural_preconditioning_makes_more_inner_steps_help():
    """σ²-preconditioned Adam with K = 5 stalls from a small σ₀ (the restoring term swamps
    the data term); the natural preconditioner with SGD solves each anchor's problem, so
    K = 5 is at least as good as K = 1 at the same number of anchors."""
    lam, m = correlated(d=6, scale=2.0)
    target, start = gaussian_target(lam, m), torch.zeros(6, dtype=F64)
    kl = {}
    for label, k, kw in (("adam", 5, {}),
                         ("nat1", 1, {"precondition": "natural", "optimizer": "sgd"}),
                         ("nat5", 5, {"precondition": "natural", "optimizer": "sgd"})):
        alg = score_vi.build(target, solver="gradient", inner_steps=k, num_samples=4,
                             init_std=1e-2, lr=0.2 if label != "adam" else 3e-3,
                             **({"alpha_max": 0.5, "warmup": 0} if k > 1 else {}), **kw)
        a, s, _ = run(alg, 200 * k, start)
        kl[label] = excess_kl(a.approximation(s), lam, m)
    assert kl["nat5"] <= kl["nat1"] * 1.1 and kl["nat5"] < 1.0 < kl["adam"]


# ------------------------------------------------------------------ input and state
@pytest.mark.parametrize("kw,match", [
    ({"omega": 0.0}, "omega"), ({"omega": 1.5}, "omega"), ({"num_samples": 0}, "num_samples"),
    ({"num_samples": 1, "antithetic": False, "hess_init": "estimate"}, "Price estimate"),
    ({"hess_init": 0.0}, "hess_init"), ({"hess_init": "first"}, "hess_init"),
    ({"hess_init": "estimate", "curvature_update": "riemannian"}, "riemannian"),
    ({"curvature_update": "quadratic"}, "curvature_update"), ({"momentum": 1.0}, "momentum"),
    ({"num_samples": 3}, "even"), ({"curvature_decay": 1.0}, "curvature_decay"),
    ({"curvature_decay": -0.1}, "curvature_decay"), ({"warmup": -1}, "warmup"),
    ({"inner_steps": 3}, "inner_steps"), ({"solver": "newton"}, "solver"),
    ({"loss": "elbo"}, "loss"), ({"precondition": "adam"}, "precondition"),
])
def test_bad_hyperparameters_fail_before_any_step(kw, match):
    target = gaussian_target(torch.eye(2, dtype=F64), torch.zeros(2, dtype=F64))
    with pytest.raises(ValueError, match=match):
        score_vi.build(target, **{"solver": "closed_form", **kw})


def test_defaults_are_resolved_per_solver():
    target = gaussian_target(torch.eye(2, dtype=F64), torch.zeros(2, dtype=F64))
    grad, cf = score_vi.build(target), prox(target)
    assert (grad.solver, grad.num_samples, grad.antithetic, grad.lr, grad.warmup) == \
        ("gradient", 1, False, 1e-2, 0)
    assert (cf.num_samples, cf.antithetic, cf.warmup, cf.omega, cf.lr) == (2, True, None, 0.1,
                                                                         None)
    assert cf.for_run(1000).warmup == 100


@pytest.mark.parametrize("solver", ["closed_form", "gradient"])
def test_state_round_trips_through_a_checkpoint(solver):
    from vi_helpers import assert_restores

    lam, m = correlated()
    alg, state, _ = run(score_vi.build(gaussian_target(lam, m), solver=solver), 15,
                        torch.zeros(4, dtype=F64))
    template = alg.init(torch.zeros(4, dtype=F64), generator=torch.Generator().manual_seed(0))
    assert_restores(alg, state, template)


def test_closed_form_backs_off_on_non_finite_scores_and_then_stops_with_a_report():
    """A rejected step reports log_prob=None (nothing evaluated), which the runner accepts;
    after the guard's back-offs the run stops with NonFiniteError, not a TypeError."""
    def log_prob(t):
        return torch.where(t[..., 0] > 3.0, torch.nan, -0.5 * (t**2).sum(-1))

    target = bdlkit.Target(log_prob, dim=2, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NonFiniteError):
            bdlkit.infer(target, "score_vi", solver="closed_form", init_std=2.0, start="init",
                         steps=50, seed=0, hess_init="estimate")
        result = bdlkit.infer(target, "score_vi", solver="closed_form", init_std=0.5,
                              start="init", steps=50, seed=0,  # one rejection, recovered
                              hess_init="estimate")
    rejected = [e for e in result.history if "rejected" in e]
    assert len(rejected) == 1 and "log_prob" not in rejected[0]
    assert all(math.isfinite(e["log_prob"]) for e in result.history if "rejected" not in e)
