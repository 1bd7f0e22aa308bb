"""Result.predict(return_samples=True), Result.intervals (the BMA mixture's central
interval) and Result.to_arviz."""

import math

import pytest
import torch
from torch import nn

import bdlkit


def classifier():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    return bdlkit.BayesianModel(net, "categorical", num_data=40)


def regression_result(num_draws: int = 6, noise: float = 0.5, seed: int = 0):
    """A Result of a linear Gaussian model whose draws are given: means x·w_s + b_s with
    spread comparable to the noise, so the mixture is visibly non-Gaussian."""
    g = torch.Generator().manual_seed(seed)
    model = bdlkit.BayesianModel(nn.Linear(2, 1).double(), bdlkit.problems.Gaussian(noise=noise),
                                 prior=1.0, num_data=10)
    draws = {"weight": 2 * torch.randn(num_draws, 1, 2, generator=g, dtype=torch.float64),
             "bias": torch.randn(num_draws, 1, generator=g, dtype=torch.float64)}
    res = bdlkit.Result(model, None, None, draws, [], {"method": "sgld", "kind": "sampler"})
    return res, draws


def test_classification_samples_are_per_draw_probabilities_averaging_to_the_bma():
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    res = bdlkit.infer(classifier(), "sgld", data=(x, y), steps=40, seed=1, batch_size=10)
    pred, samples = res.predict(x, return_samples=True, chunk_size=16)
    assert torch.equal(pred, res.predict(x, chunk_size=16))  # as without samples
    assert samples.probs.shape == (res.num_kept, 40, 3) and samples.mean is None
    assert samples.num_samples == res.num_kept
    assert torch.allclose(samples.probs.sum(-1), torch.ones(res.num_kept, 40), atol=1e-5)
    assert torch.allclose(samples.probs.mean(0), pred, atol=1e-6)
    first = next(iter(res.iter_draws()))
    assert torch.allclose(samples.probs[0], res.problem.predictive(first, x), atol=1e-6)


@pytest.mark.filterwarnings("ignore::UserWarning")  # a 5-step advi: σ has not moved
def test_vi_samples_use_num_samples_draws():
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    res = bdlkit.infer(classifier(), "advi", data=(x, y), steps=5, seed=0, batch_size=10)
    pred, samples = res.predict(x, num_samples=7, return_samples=True)
    assert samples.probs.shape == (7, 40, 3)
    assert torch.equal(pred, res.predict(x, num_samples=7))


def test_regression_samples_are_per_draw_means_and_stds():
    res, draws = regression_result()
    x = torch.randn(5, 2, dtype=torch.float64)
    pred, samples = res.predict(x, return_samples=True)
    plain = res.predict(x)
    assert torch.equal(pred.mean, plain.mean) and torch.equal(pred.var, plain.var)
    means = torch.stack([x @ draws["weight"][s].T + draws["bias"][s] for s in range(6)])[..., 0]
    assert samples.probs is None and samples.mean.shape == samples.std.shape == (6, 5)
    assert samples.mean.dtype == x.dtype
    assert torch.allclose(samples.mean, means, atol=1e-5)
    assert torch.allclose(samples.std, torch.full((6, 5), 0.5, dtype=x.dtype))
    total = samples.std.pow(2).mean(0) + samples.mean.var(0, correction=0)
    assert torch.allclose(pred.var, total, rtol=1e-5)


def test_one_draw_interval_is_the_gaussian_interval():
    res, _ = regression_result(num_draws=1, noise=0.7)
    x = torch.randn(8, 2, dtype=torch.float64)
    lower, upper = res.intervals(x, level=0.8)
    mean = res.predict(x).mean
    z = float(torch.special.ndtri(torch.tensor(0.9, dtype=torch.float64)))
    assert lower.shape == upper.shape == mean.shape == (8,)
    assert torch.allclose(lower, mean - z * 0.7, atol=1e-9)
    assert torch.allclose(upper, mean + z * 0.7, atol=1e-9)


def test_interval_matches_monte_carlo_quantiles_of_the_mixture():
    """Draw N values per input from the mixture (component s uniform, y ~ N(μ_s, σ_s²)) and
    compare the empirical quantiles: the standard error of the empirical τ-quantile is
    sqrt(τ(1 − τ)/N)/p(q), p the mixture density at q; allow 5 standard errors (one
    assertion per input and end, 20 in all: a false failure has probability ~1e-5)."""
    res, draws = regression_result(num_draws=6, noise=0.5)
    x = torch.randn(10, 2, dtype=torch.float64)
    level, n = 0.9, 400_000
    lower, upper = res.intervals(x, level=level, num_samples=6)
    _, samples = res.predict(x, return_samples=True)
    mu, sd = samples.mean, samples.std  # (S, 10)
    # the mixture is far from its moment-matched Gaussian here: the test has teeth
    pred = res.predict(x)
    z = float(torch.special.ndtri(torch.tensor(0.95, dtype=torch.float64)))
    assert (upper - (pred.mean + z * pred.var.sqrt())).abs().max() > 0.05
    g = torch.Generator().manual_seed(1)
    comp = torch.randint(0, 6, (n, 10), generator=g)
    y = mu.gather(0, comp) + sd.gather(0, comp) * torch.randn(n, 10, generator=g, dtype=mu.dtype)
    for tau, q in (((1 - level) / 2, lower), ((1 + level) / 2, upper)):
        empirical = torch.quantile(y, tau, dim=0)
        density = (torch.exp(-0.5 * ((q - mu) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))).mean(0)
        se = math.sqrt(tau * (1 - tau) / n) / density
        assert ((empirical - q).abs() < 5 * se).all(), (empirical - q) / se


def test_intervals_of_a_classifier_are_refused():
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    res = bdlkit.infer(classifier(), "map", data=(x, y), steps=3, batch_size=10)
    with pytest.raises(ValueError, match="intervals.*regression.*predict"):
        res.intervals(x)
    with pytest.raises(ValueError, match="level"):
        regression_result()[0].intervals(x[:, :2], level=1.5)


# ---------------------------------------------------------------------------- to_arviz
def test_to_arviz_of_a_four_chain_target_run_gives_bdlkits_rhat():
    az = pytest.importorskip("arviz")
    from bdlkit.diagnostics import rhat_vehtari21

    t = bdlkit.Target(lambda th: -0.5 * (th**2 * torch.tensor([1.0, 4.0, 0.25])).sum(-1), dim=3)
    res = bdlkit.infer(t, "sgld", chains=4, steps=400, seed=0)
    idata = res.to_arviz()
    theta = idata.posterior["theta"]
    assert theta.dims[:2] == ("chain", "draw") and theta.shape == (4, 200, 3)
    ours = rhat_vehtari21(res)  # the Result itself: (chains, draws, d) inside
    assert torch.equal(ours, rhat_vehtari21(res.chains_first()))
    assert torch.equal(res.chains_first(), res.samples.transpose(0, 1))
    theirs = torch.from_numpy(az.rhat(idata)["theta"].values)
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-6)
    lp = torch.from_numpy(idata.sample_stats["lp"].values)
    assert lp.shape == (4, 200)
    direct = t.log_prob(res.samples.transpose(0, 1).reshape(-1, 3)).reshape(4, 200)
    assert torch.allclose(lp, direct.double(), atol=1e-5)
    assert "posterior_predictive" not in idata.groups()


def test_to_arviz_of_a_model_sampler_with_posterior_predictive():
    pytest.importorskip("arviz")
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    res = bdlkit.infer(classifier(), "sgld", data=(x, y), steps=40, seed=1, batch_size=10)
    idata = res.to_arviz(x=x[:7])
    post = idata.posterior
    assert set(post.data_vars) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert post["0.weight"].shape == (1, res.num_kept, 8, 4)
    assert torch.allclose(torch.from_numpy(post["2.bias"].values[0]).float(),
                          res.samples["2.bias"])
    probs = idata.posterior_predictive["probs"]
    assert probs.shape == (1, res.num_kept, 7, 3)
    _, samples = res.predict(x[:7], return_samples=True)
    assert torch.allclose(torch.from_numpy(probs.values[0]).float(), samples.probs, atol=1e-6)
    assert "sample_stats" not in idata.groups()


@pytest.mark.filterwarnings("ignore::UserWarning")  # a 5-step advi: σ has not moved
def test_to_arviz_of_vi_draws_num_samples_as_one_chain_and_regression_predictive():
    pytest.importorskip("arviz")
    res, _ = regression_result()
    x = torch.randn(5, 2, dtype=torch.float64)
    idata = res.to_arviz(x=x)
    assert idata.posterior["weight"].shape == (1, 6, 1, 2)
    assert idata.posterior_predictive["mean"].shape == (1, 6, 5)
    assert idata.posterior_predictive["std"].shape == (1, 6, 5)
    xc, yc = torch.randn(40, 4), torch.randint(0, 3, (40,))
    vi = bdlkit.infer(classifier(), "advi", data=(xc, yc), steps=5, seed=0, batch_size=10)
    idata = vi.to_arviz(num_samples=9)
    assert idata.posterior["0.bias"].shape == (1, 9, 8)
    assert torch.allclose(torch.from_numpy(idata.posterior["0.bias"].values[0]).float(),
                          vi.sample(9)["0.bias"])


def test_to_arviz_refuses_a_point_estimate_and_names_the_extra_without_arviz(monkeypatch):
    import builtins

    t = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=2)
    with pytest.raises(ValueError, match="no posterior draws"):
        bdlkit.infer(t, "map", steps=5).to_arviz()
    real = builtins.__import__

    def no_arviz(name, *args, **kwargs):
        if name == "arviz":
            raise ImportError("No module named 'arviz'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_arviz)
    with pytest.raises(ImportError, match=r"bdlkit\[diagnostics\]"):
        bdlkit.infer(t, "sgld", steps=20).to_arviz()


def test_to_arviz_of_an_ensemble_holds_its_members_as_draws():
    pytest.importorskip("arviz")
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    res = bdlkit.infer(classifier(), "ensemble", data=(x, y), steps=10, batch_size=10,
                       members=3)
    idata = res.to_arviz(x=x)
    assert idata.posterior["0.bias"].shape == (1, 3, 8)
    probs = torch.from_numpy(idata.posterior_predictive["probs"].values[0]).float()
    assert torch.allclose(probs.mean(0), res.predict(x), atol=1e-6)


def test_diagnostics_take_a_result_and_warn_on_its_draws_first_samples():
    """Result.samples is (draws, chains, d), the diagnostics (chains, draws, d): passing
    the samples unchanged warns with the fix, the Result itself is read right."""
    from bdlkit.diagnostics import ess_bulk_vehtari21, ess_tfp_single_chain, rhat_vehtari21

    t = bdlkit.Target(lambda th: -0.5 * (th ** 2).sum(-1), dim=2)
    res = bdlkit.infer(t, "sgld", chains=3, steps=40, seed=0)
    assert res.samples.shape == (20, 3, 2)
    with (pytest.warns(UserWarning, match=r"20 chains of 3 draws.*pass the Result itself"),
          pytest.raises(ValueError, match="at least 4 draws per chain, got 3")):
        rhat_vehtari21(res.samples)
    assert rhat_vehtari21(res).shape == (2,)
    assert torch.equal(ess_bulk_vehtari21(res), ess_bulk_vehtari21(res.chains_first()))
    with pytest.raises(ValueError, match="takes one chain, this result has 3"):
        ess_tfp_single_chain(res)
    one = bdlkit.infer(t, "sgld", chains=1, steps=40, seed=0)
    assert one.chains_first().shape == (1, 20, 2)
    assert torch.equal(ess_tfp_single_chain(one), ess_tfp_single_chain(one.samples[:, 0]))
    net = bdlkit.infer(classifier(), "sgld", data=(torch.randn(40, 4),
                                                   torch.randint(0, 3, (40,))),
                       steps=8, batch_size=10, seed=0)
    name = next(iter(net.samples))
    assert net.chains_first(name).shape == (1, *net.samples[name].shape)
    with pytest.raises(ValueError, match="named tensors.*chains_first\\(name\\)"):
        rhat_vehtari21(net)
    vi = bdlkit.infer(t, "advi", steps=5, seed=0)
    with pytest.raises(ValueError, match="only a sampler's kept draws"):
        vi.chains_first()


def test_chains_first_of_a_run_from_a_one_dimensional_init_is_one_chain():
    """A 1-D init stores samples as (draws, d): one chain of all the draws, not draws
    chains of one draw each (which left ess_bulk_vehtari21 with 1 draw per chain)."""
    from bdlkit.diagnostics import ess_bulk_vehtari21, ess_tfp_single_chain

    t = bdlkit.Target(lambda th: -0.5 * (th ** 2).sum(-1), dim=3)
    res = bdlkit.infer(t, "sgld", steps=40, seed=0, init=torch.zeros(3))
    assert res.samples.shape == (20, 3)
    assert torch.equal(res.chains_first(), res.samples[None])
    assert ess_bulk_vehtari21(res).shape == (3,)
    assert torch.isfinite(ess_bulk_vehtari21(res)).all()
    assert torch.equal(ess_tfp_single_chain(res), ess_tfp_single_chain(res.samples))


def test_predictives_share_one_vocabulary_mean_var_std():
    """The BMA gave .var and the per-draw samples .std; both now give both."""
    res = regression_result()[0]
    x = torch.randn(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    pred, samples = res.predict(x, return_samples=True)
    torch.testing.assert_close(pred.std, pred.var.sqrt())
    torch.testing.assert_close(samples.var, samples.std ** 2)
    bma = res.predictive(x)
    torch.testing.assert_close(bma.std, bma.var.sqrt())


def _noise_draws(dtype):
    model = bdlkit.BayesianModel(nn.Linear(2, 1).to(dtype),
                                 bdlkit.problems.Gaussian(learn_noise=True), num_data=10)
    draws = {"weight": torch.zeros(2, 1, 2, dtype=dtype), "bias": torch.zeros(2, 1, dtype=dtype),
             "likelihood.log_noise": torch.tensor([0.0, 60.0], dtype=dtype)}  # σ = e^60
    res = bdlkit.Result(model, None, None, draws, [], {"method": "sgld"}, kind="sampler")
    return res, torch.ones(3, 2, dtype=dtype)


def test_a_sampled_noise_sigma_that_overflows_float32_is_an_error_not_a_silent_nan():
    from bdlkit.core.errors import NonFiniteError

    res, x = _noise_draws(torch.float32)
    with pytest.raises(NonFiniteError, match=r"draw 2.*overflowed.*log σ above 44.*float64"):
        res.predict(x)
    with pytest.raises(NonFiniteError, match="overflowed"):
        res.intervals(x)
    res, x = _noise_draws(torch.float64)  # the fix the message names: the same draws in float64
    var = res.predict(x).var
    assert torch.isfinite(var).all() and float(var[0]) == pytest.approx(math.exp(120) / 2,
                                                                       rel=1e-6)


def test_an_average_too_large_for_float32_names_the_same_fix_as_a_draw_that_overflows():
    """Each draw fits float32 but their means differ by 2e20: the BMA variance (float64)
    does not fit x's float32. Its fix is check_finite's, word for word, and it works."""
    from bdlkit.core.errors import NonFiniteError
    from bdlkit.evaluation.predictive import NONFINITE_FIX

    res, x = _noise_draws(torch.float32)
    with pytest.raises(NonFiniteError) as per_draw:
        res.predict(x)
    for dtype in (torch.float32, torch.float64):
        res, x = _noise_draws(dtype)
        res.samples.update({"bias": torch.tensor([[1e20], [-1e20]], dtype=dtype),
                            "likelihood.log_noise": torch.zeros(2, dtype=dtype)})
        if dtype == torch.float32:
            with pytest.raises(NonFiniteError, match="does not fit torch.float32") as average:
                res.predict(x)
            assert torch.isfinite(res.predictive(x).var).all()  # the float64 average
        else:  # the fix: inferred and predicted in float64
            assert float(res.predict(x).var[0]) == pytest.approx(1e40, rel=1e-6)
    for error in (per_draw, average):
        assert str(error.value).endswith(NONFINITE_FIX)
    assert "net.double()" in NONFINITE_FIX and "x.double()" in NONFINITE_FIX


def test_a_forecast_mixture_speaks_the_same_vocabulary():
    from bdlkit.metrics.forecasting import GaussianMixture

    g = torch.Generator().manual_seed(0)
    mixture = GaussianMixture(torch.randn(3, 4, generator=g, dtype=torch.float64),
                              torch.rand(3, 4, generator=g, dtype=torch.float64) + 0.5)
    torch.testing.assert_close(mixture.std, mixture.var.sqrt())
