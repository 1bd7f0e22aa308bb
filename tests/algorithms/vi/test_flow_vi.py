"""score_vi and advi with family="flow" on Targets (networks: test_flow_network.py): advi recovers a correlated Gaussian,
both resume bit-exactly, the Laplace start maps a flow exactly, bad options fail early."""

import warnings

import pytest
import torch
from vi_helpers import crash_then_resume

import bdlkit
from bdlkit.algorithms.vi import advi, laplace, score_vi
from bdlkit.families.flow import FlowFamily

F64 = torch.float64
MEAN = torch.tensor([1.0, -1.0], dtype=F64)
COV = torch.tensor([[1.0, 0.6], [0.6, 0.8]], dtype=F64)


def _gaussian():
    prec = torch.linalg.inv(COV)
    return bdlkit.Target(lambda x: -0.5 * (((x - MEAN) @ prec) * (x - MEAN)).sum(-1), dim=2,
                         dtype=F64)


@pytest.mark.slow
def test_advi_with_a_flow_recovers_a_correlated_gaussian_from_a_standard_normal():
    result = bdlkit.infer(_gaussian(), "advi", family="flow", steps=600, lr=2e-2,
                          num_samples=16, start="init", init_std=1.0, seed=0, stl=True)
    draws = result.sample(40000, generator=torch.Generator().manual_seed(0))
    cov = torch.cov(draws.T)
    assert (draws.mean(0) - MEAN).abs().max() < 0.15  # measured 0.09
    assert ((cov - COV).abs() / COV.abs().max()).max() < 0.12  # measured 0.08
    assert cov[0, 1] > 0.4  # the correlation a diagonal family cannot hold
    assert result.sigma_summary() is None  # not a diagonal Gaussian


@pytest.mark.parametrize("method", ["advi", "score_vi"])
@pytest.mark.slow
def test_a_flow_run_resumes_bit_exactly_after_a_crash(method, tmp_path, monkeypatch):
    target = _gaussian()
    module = advi if method == "advi" else score_vi

    def runner(run_dir):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # score_vi's flow is experimental
            alg = module.build(target, family="flow", lr=1e-2, num_samples=4, init_std=1.0)
        return bdlkit.Runner(alg, steps=30, seed=1, run_dir=run_dir, checkpoint_every=10,
                             init=torch.zeros(2, dtype=F64))

    full, resumed = crash_then_resume(module, runner, tmp_path, monkeypatch)
    assert [e["log_prob"] for e in full.history] == [e["log_prob"] for e in resumed.history]


def test_a_laplace_start_maps_the_flow_exactly():
    family = FlowFamily(2, dtype=F64)
    gen = torch.Generator().manual_seed(0)
    lam = family.init(torch.tensor([0.3, -0.2], dtype=F64), 0.7, gen)
    lam = {k: v + 0.2 * torch.randn(v.shape, generator=gen, dtype=F64)
           if k.startswith("flow.") else v for k, v in lam.items()}
    start = laplace.LaplaceStart(shift=torch.tensor([5.0, -3.0], dtype=F64),
                                 scale=torch.tensor([2.0, 0.1], dtype=F64), message="test")
    on_theta = laplace.flow_to_theta(lam, start)
    z = torch.randn(6, 2, dtype=F64, generator=gen)
    theta = start.to_theta(z)
    expected = family.log_prob(lam, z) - start.scale.log().sum()  # change of variables
    assert torch.allclose(family.log_prob(on_theta, theta), expected, atol=1e-10)
    draws_z = family.sample(lam, 5, torch.Generator().manual_seed(1))
    draws_theta = family.sample(on_theta, 5, torch.Generator().manual_seed(1))
    assert torch.allclose(start.to_theta(draws_z), draws_theta, atol=1e-12)


def test_the_default_start_of_a_flow_on_a_target_is_laplace_and_its_result_is_in_theta():
    result = bdlkit.infer(_gaussian(), "advi", family="flow", steps=40, lr=1e-2,
                          num_samples=8, seed=0, stl=True)
    assert result.config["start"] == "laplace"
    draws = result.sample(20000, generator=torch.Generator().manual_seed(0))
    assert (draws.mean(0) - MEAN).abs().max() < 0.1  # q₀ is the Laplace fit: near already
    one = bdlkit.infer(_gaussian(), "advi", family="flow", steps=1, lr=1e-2, num_samples=8,
                       seed=0, stl=True).sample(20000, generator=torch.Generator().manual_seed(0))
    laplace_sd = torch.linalg.inv(COV).diag().rsqrt()  # the start's σ (0.74, 0.66) in θ
    assert torch.allclose(one.std(0), laplace_sd, rtol=0.05)  # not the z run's unit σ
    true_sd = COV.diag().sqrt()  # after 40 steps the flow is on its way to (1.0, 0.89)
    assert ((draws.std(0) - true_sd).abs() < (laplace_sd - true_sd).abs()).all()


def test_a_diagonal_run_records_no_flow_options():
    """The checkpoint record of score_vi/advi with the diagonal family is what it was
    before flows existed, so their checkpoints still resume."""
    for module in (advi, score_vi):
        record = module.build(_gaussian()).record()
        assert not {"family", "flow_transforms", "flow_bins", "flow_hidden"} & set(record)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            flow = module.build(_gaussian(), family="flow").record()
        assert flow["family"] == "flow" and flow["flow_bins"] == 8
        assert "flow_on" not in flow  # it selects network tensors: inert on a Target


def test_bad_flow_options_fail_before_any_step():
    with pytest.raises(ValueError, match="family='flow' uses the gradient solver"):
        score_vi.build(_gaussian(), family="flow", solver="closed_form")
    with pytest.raises(ValueError, match="flow bins must be an integer >= 2"):
        advi.build(_gaussian(), family="flow", flow_bins=1)
    with pytest.raises(ValueError, match="family must be one of"):
        advi.build(_gaussian(), family="maf")
    with pytest.warns(UserWarning, match="family='flow' is experimental"):
        score_vi.build(_gaussian(), family="flow")
    with pytest.warns(UserWarning, match="loss, max_step cannot act with family='flow'"):
        score_vi.build(_gaussian(), family="flow", loss="mc", max_step=3.0)
    with pytest.raises(ValueError, match="a flow starts at a point"):
        bdlkit.infer(_gaussian(), "advi", family="flow", steps=2, start="init",
                     init=advi.build(_gaussian()).init(generator=torch.Generator()).lam)


@pytest.mark.slow
def test_score_vi_with_a_flow_learns_the_correlations_the_laplace_start_lacks():
    """From the diagonal Laplace start (covariance error 38 %) to a 5-D correlated
    Gaussian: the flow holds the correlations (measured 4.3 % after 300 steps)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(5, 5, dtype=F64, generator=gen)
    cov = a @ a.T / 5 + 0.5 * torch.eye(5, dtype=F64)
    prec, mean = torch.linalg.inv(cov), torch.arange(5, dtype=F64)
    target = bdlkit.Target(lambda x: -0.5 * (((x - mean) @ prec) * (x - mean)).sum(-1),
                           dim=5, dtype=F64)
    with pytest.warns(UserWarning, match="experimental"):
        result = bdlkit.infer(target, "score_vi", family="flow", steps=300, num_samples=16)
    assert result.algorithm.lr == 3e-3  # the flow's default
    draws = result.sample(40000, generator=torch.Generator().manual_seed(0))
    err = ((torch.cov(draws.T) - cov).abs().max() / cov.abs().max()).item()
    assert err < 0.08 and (draws.mean(0) - mean).abs().max() < 0.1
    start = torch.diag(1 / prec.diag())  # the diagonal Laplace covariance
    assert (start - cov).abs().max() / cov.abs().max() > 0.3


@pytest.mark.slow
def test_on_two_modes_8_sd_apart_score_vi_keeps_both_unevenly_and_advi_with_stl_collapses():
    """All start at N((0.5, 0), I), between the modes at (±4, 0), with the same flow.
    Measured (1500 steps, S = 32, 4 couplings), mass on the left mode: score_vi 0.097
    (0.72 in an earlier version: the split is the trajectory's), advi with the
    sticking-the-landing estimator 0.00005 (collapsed onto the right mode), advi with the
    full estimator 0.452. So the ELBO's collapse here is the STL estimator's; score
    matching keeps both modes but is blind to their relative weights, hence its uneven
    split."""
    import math

    centres = torch.tensor([[-4.0, 0.0], [4.0, 0.0]], dtype=F64)

    def log_prob(x):
        return torch.logsumexp(-0.5 * ((x[..., None, :] - centres) ** 2).sum(-1), -1) \
            - math.log(2)

    target = bdlkit.Target(log_prob, dim=2, dtype=F64)
    left = {}
    for name, method, extra in (("score_vi", "score_vi", {"lr": 3e-3}),
                                ("advi_stl", "advi", {"lr": 1e-2, "stl": True}),
                                ("advi", "advi", {"lr": 1e-2})):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = bdlkit.infer(target, method, family="flow", steps=1500, num_samples=32,
                                  start="init", init_std=1.0, seed=0, flow_transforms=4,
                                  init=torch.tensor([0.5, 0.0], dtype=F64), **extra)
        draws = result.sample(20000, generator=torch.Generator().manual_seed(0))
        left[name] = float((draws[:, 0] < 0).double().mean())
    assert 0.05 < left["score_vi"] < 0.95  # both modes kept, unevenly (measured 0.097)
    assert left["advi_stl"] < 0.02  # collapsed onto the right mode (measured 0.00005)
    assert 0.2 < left["advi"] < 0.8  # the full estimator keeps both (measured 0.452)


@pytest.mark.slow
def test_on_a_banana_score_vi_with_a_flow_beats_the_diagonal_family_in_kl():
    """Banana: x₁ ~ N(0, 2²), x₂ − ¼(x₁² − 4) ~ N(0, 1), normalised, so KL(q‖π) is
    E_q[log q − log π]. Same steps, draws and (Laplace) start; measured at 300 steps:
    flow 0.22, diagonal 0.32 (0.08 for the flow at 1000 steps)."""
    import math

    def log_prob(x):
        x1, x2 = x[..., 0], x[..., 1]
        return (-0.5 * (x1 / 2.0) ** 2 - math.log(2.0) - 0.5 * (x2 - 0.25 * (x1**2 - 4)) ** 2
                - math.log(2 * math.pi))

    target = bdlkit.Target(log_prob, dim=2, dtype=F64)
    kl = {}
    for family in ("diag", "flow"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = bdlkit.infer(target, "score_vi", family=family, steps=300,
                                  num_samples=16, seed=0)
        q = result.algorithm.approximation(result.state)
        draws = q.sample(20000, torch.Generator().manual_seed(0))
        kl[family] = float((q.log_prob(draws) - log_prob(draws)).mean())
    assert kl["flow"] < 0.8 * kl["diag"], kl
