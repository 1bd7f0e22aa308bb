"""The ``meta_sgmcmc`` sampler through ``bdlkit.infer`` and the runner: finite draws with the
shipped meta-parameters, bit-exact resumption after a crash, and checkpoints tied to their
meta-parameters."""

import pytest
import torch
from sampler_helpers import correlated_target, small_classifier

import bdlkit
from bdlkit.algorithms import METHODS, get_method
from bdlkit.core.serialization import state_to_tensors
from bdlkit.engine.checkpoint import latest_checkpoint, load_checkpoint
from bdlkit.engine.collect import DiskStore
from bdlkit.engine.runner import Runner
from bdlkit.meta_sgmcmc import Constants, Pretrained, init_meta_params, load_pretrained
from bdlkit.meta_sgmcmc import dynamics as dyn

GAMMAS = ["finite_difference", "autograd"]
STEPS = 60


def test_registered_and_shipped():
    assert "meta_sgmcmc" in METHODS and get_method("meta_sgmcmc").KIND == "sampler"
    pre = load_pretrained()
    assert set(pre.meta) == set(dyn.META_KEYS)
    assert sum(v.numel() for v in pre.meta.values()) == 92
    assert all(torch.isfinite(v).all() for v in pre.meta.values())
    assert pre.constants == Constants()
    assert pre.info.get("command", "").startswith("bdlkit meta-train meta-sgmcmc")


@pytest.mark.parametrize("gamma", GAMMAS)
def test_infer_on_a_target_gives_finite_moving_draws(gamma):
    """The shipped meta-parameters on a 3-D Gaussian Target, 4 chains of 200 steps."""
    target, mean, cov = correlated_target(3)
    res = bdlkit.infer(target, "meta_sgmcmc", steps=200, seed=0, chains=4, gamma=gamma)
    draws = res.sample(40)
    assert draws.shape == (40, 3) and draws.dtype == torch.float64
    assert torch.isfinite(draws).all()
    assert (draws.std(0) > 0.05).all()  # the chains move


@pytest.mark.parametrize("gamma", GAMMAS)
def test_infer_on_a_small_network_gives_finite_moving_draws(gamma):
    model, (x, y) = small_classifier()
    res = bdlkit.infer(model, "meta_sgmcmc", data=(x, y), steps=STEPS, batch_size=16, seed=0,
                       gamma=gamma)
    draws = res.sample(5)
    assert set(draws) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert all(torch.isfinite(v).all() for v in draws.values())
    assert max(v.std(0).max().item() for v in draws.values()) > 0


def test_infer_is_reproducible_and_passes_options():
    model, (x, y) = small_classifier()
    runs = [bdlkit.infer(model, "meta_sgmcmc", data=(x, y), steps=20, batch_size=16, seed=3,
                         gamma="autograd", eps=0.01) for _ in range(2)]
    a, b = (r.sample(3) for r in runs)
    assert all(torch.equal(a[k], b[k]) for k in a)
    other = bdlkit.infer(model, "meta_sgmcmc", data=(x, y), steps=20, batch_size=16, seed=3,
                         gamma="autograd").sample(3)  # the default ε = sqrt(0.007/64)
    assert not torch.equal(other["0.weight"], a["0.weight"])


# --------------------------------------------------------------------------- resume
def _algorithm(model, gamma, meta_seed=None):
    meta = None if meta_seed is None else Pretrained(
        init_meta_params(torch.Generator().manual_seed(meta_seed), torch.float64), Constants())
    kw = {} if meta is None else {"meta_params": meta}
    return get_method("meta_sgmcmc").build(model, gamma=gamma, **kw)


def _runner(blr, run_dir, gamma, meta_seed=None):
    model, data, _, _ = blr
    runner = Runner(_algorithm(model, gamma, meta_seed), data, seed=0, batch_size=16,
                    run_dir=run_dir, checkpoint_every=25, log_every=5)
    runner.store = DiskStore(run_dir / "samples", burnin=30, thin=3, max_samples=12,
                             shard_size=4, exist_ok=True)
    return runner


def _same(a, b):
    sa, sb = state_to_tensors(a.state), state_to_tensors(b.state)
    assert set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
    la, lb = a.store.load(), b.store.load()
    assert all(torch.equal(la[k], lb[k]) for k in la)
    strip = [{k: v for k, v in e.items() if k != "time_s"} for e in a.history]
    assert strip == [{k: v for k, v in e.items() if k != "time_s"} for e in b.history]


@pytest.mark.parametrize("gamma", GAMMAS)
def test_resume_after_a_crash_is_bit_exact(blr, tmp_path, monkeypatch, gamma):
    """A crash at step 57 (after the checkpoint of step 50, during sampling) and a resumed
    run give the uninterrupted run's state, draws and history bit for bit; with finite
    differences the state carries the previous step's u, p and Q_f values, and they are
    checkpointed too."""
    full = _runner(blr, tmp_path / "full", gamma).fit(STEPS)
    if gamma == "finite_difference":
        assert {"prev_energy", "prev_q", "prev_q_next"} <= {
            k.split(".")[0] for k in state_to_tensors(full.state)}
    cls = type(_algorithm(blr[0], gamma))
    inner = cls.step

    def step(self, state, batch):
        if state.step == 57:
            raise RuntimeError("simulated crash")
        return inner(self, state, batch)

    with monkeypatch.context() as patch:
        patch.setattr(cls, "step", step)
        with pytest.raises(RuntimeError, match="simulated crash"):
            _runner(blr, tmp_path / "cut", gamma).fit(STEPS)
    assert load_checkpoint(latest_checkpoint(tmp_path / "cut" / "checkpoints")).step == 50
    resumed = _runner(blr, tmp_path / "cut", gamma).fit(STEPS, resume=True)
    _same(full, resumed)
    assert resumed.num_kept == 10


def test_a_checkpoint_of_other_meta_parameters_is_not_resumed(blr, tmp_path):
    """The update rule's VERSION carries the meta-parameters' digest."""
    _runner(blr, tmp_path, "autograd", meta_seed=0).fit(25)
    with pytest.raises(ValueError, match="update rule differs"):
        _runner(blr, tmp_path, "autograd", meta_seed=1).fit(25, resume=True)
    a = _algorithm(blr[0], "autograd", 0)
    assert a.VERSION == _algorithm(blr[0], "finite_difference", 0).VERSION
    assert a.VERSION != _algorithm(blr[0], "autograd", 1).VERSION


@pytest.mark.parametrize("temperature, prior_mean", [(1.0, None), (0.5, None), (1.0, "init")])
def test_the_networks_read_the_energy_meta_training_feeds_them(temperature, prior_mean):
    """u = mean NLL + ‖θ − m‖²/(2Nσ₀²): no prior normalising constant (d·log(2πσ₀²)/(2N)),
    untempered, whatever T and the prior's mean (docs/meta_sgmcmc.md, Notation)."""
    from torch.func import functional_call
    from torch.nn import functional as F

    model, (x, y) = small_classifier(temperature)
    prior = bdlkit.IsotropicGaussian(1.5, mean=prior_mean)
    model = bdlkit.BayesianModel(model.module, "categorical", prior=prior, num_data=64,
                                 temperature=temperature)
    alg = get_method("meta_sgmcmc").build(model)
    state = alg.init(generator=torch.Generator().manual_seed(0))
    params = {k: v + 0.3 for k, v in state.params.items()}  # away from the prior's mean
    value, _ = model.value_and_score(params, (x, y))
    u = alg._mean_energy(params, value)
    means = model.prior.means
    sq = sum(((v - means.get(k, 0.0)) ** 2).sum() for k, v in params.items())
    ce = F.cross_entropy(functional_call(model.module, params, (x,)), y)
    torch.testing.assert_close(u, ce + sq / (2 * 64 * 1.5**2), rtol=1e-12, atol=1e-12)


def test_a_nan_stop_names_eps_as_the_step_size():
    """The runner's NaN advice and `--resume ... --eps` rebuild name the option that exists."""
    assert get_method("meta_sgmcmc").ALGORITHM.step_size_param == "eps"
    alg = get_method("meta_sgmcmc").build(correlated_target(2)[0])
    assert "eps" in type(alg).__dataclass_fields__


def test_another_learners_meta_parameters_are_refused():
    from bdlkit.l2e import load_pretrained as l2e_pretrained

    with pytest.raises(ValueError, match="Meta-SGMCMC meta-parameters lack"):
        get_method("meta_sgmcmc").build(correlated_target(2)[0], meta_params=l2e_pretrained())
    target = correlated_target(2)[0]
    with pytest.raises(TypeError, match="l2e needs L2E meta-parameters"):
        get_method("l2e").build(target, meta_params=Pretrained(
            init_meta_params(torch.Generator().manual_seed(0)), Constants()))
