"""The ``l2e`` sampler: its SGHMC limit, chain stacks, options and bad input."""

import pytest
import torch
from sampler_helpers import correlated_target
from torch import nn

import bdlkit
from bdlkit.algorithms import l2e, sghmc
from bdlkit.l2e import Constants, Pretrained, init_meta_params, save_meta_params
from bdlkit.serialization import CorruptFileError


def _model_and_data(temperature=1.0):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g, dtype=torch.float64)
    y = (x[:, 0] > 0).long()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).double()
    model = bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=64,
                                 temperature=temperature)
    return model, (x, y)


@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_identity_kinetic_is_sghmc(temperature):
    """α = 0, β = r, paper noise, grad_scale = N: SGHMC with lr = ε²N and friction εC, the
    same draws of noise, step after step (float64 rounding)."""
    model, (x, y) = _model_and_data(temperature)
    eps, c, n = 0.02, 0.5, model.num_data
    ref = sghmc.build(model, lr=eps**2 * n, alpha=eps * c)
    alg = l2e.build(model, kinetic="identity", eps=eps, grad_scale=float(n), friction=c,
                    noise_mode="paper")
    s_ref = ref.init(generator=torch.Generator().manual_seed(5))
    s = alg.init(generator=torch.Generator().manual_seed(5))
    for t in range(25):
        batch = (x[t % 4 * 16:(t % 4 + 1) * 16], y[t % 4 * 16:(t % 4 + 1) * 16])
        s_ref, _ = ref.step(s_ref, batch)
        s, _ = alg.step(s, batch)
    for k in s.params:
        torch.testing.assert_close(s.params[k], s_ref.params[k], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(eps * s.momentum[k], s_ref.momentum[k], rtol=1e-9,
                                   atol=1e-12)
    moved = max((s.params[k] - model.init_params()[k]).abs().max().item() for k in s.params)
    assert moved > 1e-3  # the comparison is not between two frozen chains


def _pretrained(seed=0, **constants):
    meta = {k: v.double() for k, v in init_meta_params(torch.Generator().manual_seed(seed)).items()}
    return Pretrained(meta, Constants(**constants))


def test_chain_stack_of_a_target_is_normalised_per_chain():
    """Chains stacked as (c, d) on a Target evolve exactly as each chain alone (noise off,
    so the chains see the same update): the features are normalised per chain."""
    target, _, _ = correlated_target(3)
    pre = _pretrained(precond_mult=1.0, eps=0.01, grad_scale=1.0)
    alg = l2e.build(target, meta_params=pre, noise_mult=0.0)
    start = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def run(init):
        state = alg.init(init, generator=torch.Generator().manual_seed(1))
        for _ in range(10):
            state, _ = alg.step(state, None)
        return state.params

    stacked = run(start)
    torch.testing.assert_close(stacked, torch.stack([run(start[i]) for i in range(4)]),
                               rtol=1e-10, atol=1e-12)
    assert (stacked - start).abs().max() > 1e-4


def test_constants_come_from_the_meta_parameter_file(tmp_path):
    model, _ = _model_and_data()
    path = save_meta_params(tmp_path / "m.safetensors",
                            init_meta_params(torch.Generator().manual_seed(0)),
                            Constants(eps=0.004, precond_mult=0.7), {"seed": 3})
    alg = l2e.build(model, meta_params=str(path))
    assert alg.constants.eps == 0.004 and alg.constants.precond_mult == 0.7
    alg = l2e.build(model, meta_params=str(path), eps=0.001, noise_mode="paper")
    assert alg.constants.eps == 0.001 and alg.constants.noise_mode == "paper"
    assert alg.constants.precond_mult == 0.7


def test_bad_meta_parameter_files_fail_clearly(tmp_path):
    model, _ = _model_and_data()
    with pytest.raises(FileNotFoundError, match="meta-train l2e"):
        l2e.build(model, meta_params=str(tmp_path / "missing.safetensors"))
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(CorruptFileError):
        l2e.build(model, meta_params=str(junk))
    with pytest.raises(ValueError, match="kinetic"):
        l2e.build(model, kinetic="quadratic")
    with pytest.raises(ValueError, match="noise_mode"):
        l2e.build(model, kinetic="identity", noise_mode="loud")


def test_shipped_meta_parameters_load():
    pre = bdlkit.l2e.load_pretrained()
    assert sum(v.numel() for v in pre.meta.values()) == 1442
    assert all(torch.isfinite(v).all() for v in pre.meta.values())
    assert pre.constants.eps > 0 and pre.info.get("command", "").startswith("bdlkit meta-train")


def test_fit_l2e_on_a_small_model_runs_and_moves():
    model, (x, y) = _model_and_data()
    res = bdlkit.infer(model, "l2e", data=(x, y), steps=60, batch_size=16, seed=0)
    draws = res.sample(5)
    assert all(torch.isfinite(v).all() for v in draws.values())
    spread = max(v.std(0).max().item() for v in draws.values())
    assert spread > 0  # distinct draws: the chain moves
