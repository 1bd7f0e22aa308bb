"""Mixed precision (``precision=`` / ``--precision``): autocast for the network's forward
pass, log-likelihoods and scores in float32, fp32 exactly as before."""

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit.problems.precision import autocast_call
from bdlkit.runs.config import ConfigValueError, RunConfig


def _digits_model(precision, oracle="functional"):
    ds = bdlkit.data.load("digits")
    torch.manual_seed(0)
    net = bdlkit.models.MLP(ds.input_shape, ds.num_classes, hidden=(32,))
    return bdlkit.BayesianModel(net, "categorical", num_data=ds.num_train,
                                precision=precision, oracle=oracle), ds


@pytest.mark.parametrize("precision", ["bf16", "fp16"])  # fp16 autocast works on CPU (torch 2.13)
def test_a_low_precision_run_on_digits_trains(precision):
    model, ds = _digits_model(precision)
    res = bdlkit.infer(model, "map", data=ds, epochs=5, lr=1e-2, seed=0)
    probs = res.predict(ds.x_test)
    majority = torch.bincount(ds.y_test).max() / len(ds.y_test)
    assert torch.isfinite(probs).all() and probs.dtype == torch.float32
    assert (probs.argmax(1) == ds.y_test).float().mean() > max(0.8, float(majority))
    assert all(torch.isfinite(v).all() and v.dtype == torch.float32
               for v in res.state.params.values())


def test_under_bf16_the_network_runs_in_bf16_and_the_likelihood_in_float32():
    model, ds = _digits_model("bf16")
    x, y = ds.x_train[:64], ds.y_train[:64]
    inner = []
    model.module.register_forward_hook(lambda m, i, out: inner.append(out.dtype))
    loglik = model.log_likelihood(model.init_params(), (x, y))
    assert inner == [torch.bfloat16] and loglik.dtype == torch.float32
    value, score = model.value_and_score(model.init_params(), (x, y))
    assert value.dtype == torch.float32
    assert all(s.dtype == torch.float32 for s in score.values())
    exact = _digits_model("fp32")[0].log_likelihood(model.init_params(), (x, y))
    assert not torch.equal(loglik, exact)  # it did run in bf16 ...
    torch.testing.assert_close(loglik, exact, atol=0.05, rtol=0.05)  # ... close to fp32


def test_the_module_oracle_autocasts_too():
    functional, ds = _digits_model("bf16")
    module = _digits_model("bf16", oracle="module")[0]
    batch = ds.x_train[:64], ds.y_train[:64]
    v1, s1 = functional.value_and_score(functional.init_params(), batch)
    v2, s2 = module.value_and_score(module.init_params(), batch)
    torch.testing.assert_close(v1, v2, rtol=1e-3, atol=1e-3)
    assert all(s2[k].dtype == torch.float32 for k in s2)
    assert not torch.equal(v2, _digits_model("fp32", oracle="module")[0].value_and_score(
        module.init_params(), batch)[0])


def test_fp32_is_bit_identical_to_the_plain_network_call():
    model, ds = _digits_model("fp32")
    x = ds.x_test[:50]
    assert torch.equal(model.forward(model.init_params(), x), model.module(x))
    a = bdlkit.infer(model, "sgld", data=ds, steps=20, seed=3).samples
    torch.manual_seed(0)
    plain = bdlkit.BayesianModel(bdlkit.models.MLP(ds.input_shape, ds.num_classes,
                                                   hidden=(32,)), "categorical",
                                 num_data=ds.num_train)
    b = bdlkit.infer(plain, "sgld", data=ds, steps=20, seed=3).samples
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert "precision" not in repr(model)  # checkpoints of fp32 runs are unchanged
    assert "precision=bf16" in repr(_digits_model("bf16")[0])


def test_autocast_call_casts_outputs_to_the_parameters_dtype():
    net = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    out = autocast_call(lambda: net(x), "bf16", "cpu", torch.float32)
    assert out.dtype == torch.float32
    assert autocast_call(lambda: net(x), "fp32", "cpu", torch.float64).dtype == torch.float32


def test_bad_precisions_are_refused():
    with pytest.raises(ValueError, match="fp32, bf16, fp16"):
        bdlkit.BayesianModel(nn.Linear(2, 2), num_data=1, precision="half")
    with pytest.raises(ConfigValueError, match="precision must be one of fp32, bf16, fp16"):
        RunConfig(method="map", precision="fp8")
    with pytest.raises(ConfigValueError, match="dtype float64 use precision fp32"):
        RunConfig(method="map", precision="bf16", dtype="float64")
    assert RunConfig(method="map").to_dict()["precision"] == "fp32"  # recorded
