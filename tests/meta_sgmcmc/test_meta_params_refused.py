"""Meta-SGMCMC's meta-parameters refused: bad tensors and constants (by the check, by save and
by load, naming the file and the fix), files without usable constants, and steps that turn
non-finite (split from test_dynamics.py, whose dynamics these guard)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from dynamics_helpers import F64, gaussian_target, random_meta, sghmc_meta

import bdlkit
from bdlkit.algorithms.sgmcmc import meta_sgmcmc
from bdlkit.core.errors import CorruptFileError, NonFiniteError
from bdlkit.core.serialization import save_tensors
from bdlkit.meta_sgmcmc import (
    Constants,
    Pretrained,
    init_meta_params,
    load_meta_params,
    save_meta_params,
)
from bdlkit.meta_sgmcmc import dynamics as dyn


# --------------------------------------------------------------------------- d. bad input
def _meta32():
    return init_meta_params(torch.Generator().manual_seed(0))


@pytest.mark.parametrize("edit, needle", [
    (lambda m: m.pop("d_b1"), "lack ['d_b1']"),
    (lambda m: m.update(q_w0=torch.zeros(3, dyn.HIDDEN)), "q_w0 has shape (3, 10)"),
    (lambda m: m.update(d_w1=torch.zeros(dyn.HIDDEN)), "d_w1 has shape (10,)"),
    (lambda m: m["q_b0"].__setitem__(2, float("nan")), "q_b0 is not finite"),
    (lambda m: m["d_w0"].__setitem__((0, 0), float("inf")), "d_w0 is not finite"),
])
def test_bad_meta_parameters_are_refused_by_check_save_and_load(tmp_path, edit, needle):
    meta = _meta32()
    edit(meta)
    with pytest.raises(ValueError) as info:
        dyn.check_meta_params(meta)
    assert needle in str(info.value)
    with pytest.raises(ValueError, match="meta-parameter"):
        save_meta_params(tmp_path / "refused.safetensors", meta, Constants())
    assert not (tmp_path / "refused.safetensors").exists()
    path = tmp_path / "bad.safetensors"
    save_tensors(path, meta, metadata={"constants": json.dumps(Constants().to_dict())})
    with pytest.raises(CorruptFileError) as info:
        load_meta_params(path)
    message = str(info.value)
    assert str(path) in message and needle in message
    assert "bdlkit meta-train meta-sgmcmc" in message


@pytest.mark.parametrize("metadata, needle", [
    ({}, "no 'constants' entry"),
    ({"format": "bdlkit-meta-sgmcmc-meta-params/1"}, "no 'constants' entry"),
    ({"constants": json.dumps({k: v for k, v in Constants().to_dict().items()
                               if k != "d_max"})}, "constants lack ['d_max']"),
    ({"constants": "{}"}, "constants lack"),
    ({"constants": json.dumps({**Constants().to_dict(), "d_scale": -1.0})},
     "d_scale must be a finite number > 0"),
    ({"constants": json.dumps({**Constants().to_dict(), "grad_mult": "70"})},
     "'grad_mult' must be a number"),
    ({"constants": "[1, 2]"}, "JSON list"),
])
def test_files_without_usable_constants_are_refused_naming_file_and_fix(tmp_path, metadata,
                                                                        needle):
    path = tmp_path / "meta.safetensors"
    save_tensors(path, _meta32(), metadata=metadata)
    with pytest.raises(CorruptFileError) as info:
        load_meta_params(path)
    message = str(info.value)
    assert str(path) in message and needle in message, message
    assert "Meta-SGMCMC meta-parameter file" in message
    assert "bdlkit meta-train meta-sgmcmc --out DIR" in message


def test_the_refusal_says_a_meta_sgmcmc_file(tmp_path):
    path = tmp_path / "meta.safetensors"
    save_tensors(path, _meta32(), metadata={})
    with pytest.raises(CorruptFileError, match="is not a Meta-SGMCMC meta-parameter file"):
        load_meta_params(path)


def test_a_missing_file_names_the_command():
    with pytest.raises(FileNotFoundError, match="bdlkit meta-train meta-sgmcmc"):
        load_meta_params("/nonexistent/meta.safetensors")


def test_save_then_load_round_trips_tensors_constants_and_info(tmp_path):
    meta = random_meta(4)
    constants = Constants(step_mult=0.01, q_clamp=3.0, d_scale=20.0, grad_mult=10.0,
                          d_max=500.0, d_q_mult=0.0)
    path = save_meta_params(tmp_path / "m.safetensors", meta, constants,
                            {"seed": 3, "command": "bdlkit meta-train meta-sgmcmc"})
    loaded = load_meta_params(path, dtype=F64)
    assert loaded.constants == constants and loaded.path == str(path)
    assert set(loaded.meta) == set(dyn.META_KEYS)
    assert all(torch.equal(loaded.meta[k], meta[k]) for k in meta)
    assert loaded.info["seed"] == "3" and loaded.info["command"].startswith("bdlkit")
    assert loaded.info["format"] == "bdlkit-meta-sgmcmc-meta-params/1"
    as32 = load_meta_params(path)
    assert all(as32.meta[k].dtype == torch.float32 for k in as32.meta)
    # the sampler takes its constants from the file, and a given one overrides
    target = gaussian_target()
    alg = meta_sgmcmc.build(target, meta_params=str(path))
    assert alg.constants == constants and alg.d_scale == 20.0
    alg = meta_sgmcmc.build(target, meta_params=str(path), d_max=7.0, eps=0.05)
    assert alg.constants.d_max == 7.0 and alg.constants.q_clamp == 3.0
    assert alg.scales == dyn.Scales(0.05, 0.0, 7.0)


@pytest.mark.parametrize("name", [f for f in Constants().to_dict()])
@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), True, "1"])
def test_constants_reject_negative_non_finite_and_non_numbers(name, value):
    with pytest.raises(ValueError, match=f"constant {name} must be a finite number"):
        Constants(**{name: value})


def test_constants_zero_only_for_d_q_mult_and_scales_follow_n():
    assert Constants(d_q_mult=0.0).d_q_mult == 0.0
    for name in ("step_mult", "q_clamp", "d_scale", "grad_mult", "d_max"):
        with pytest.raises(ValueError, match=f"{name} must be a finite number > 0"):
            Constants(**{name: 0.0})
    c = Constants()
    s = c.scales(60_000)
    assert s.eps == pytest.approx(math.sqrt(0.007 / 60_000))
    assert s.c_d == pytest.approx(0.01 / s.eps) and s.d_max == 1000.0  # 1/ε > d_max
    assert c.scales(1).d_max == pytest.approx(1 / math.sqrt(0.007))  # 1/ε < d_max
    for eps in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="step eps"):
            c.scales(10, eps)


# --------------------------------------------------------------------------- e. non-finite
@pytest.mark.parametrize("gamma", ["autograd", "finite_difference"])
def test_a_pretrained_with_nan_weights_is_refused_at_build(gamma):
    """A Pretrained built by hand is checked like a file: a NaN weight of f_D is refused
    before any step, naming the tensor."""
    meta = sghmc_meta(0.02)
    meta["d_b1"] = torch.tensor([float("nan")], dtype=F64)
    with pytest.raises(ValueError, match="d_b1 is not finite"):
        meta_sgmcmc.build(gaussian_target(), meta_params=Pretrained(meta, Constants()),
                          gamma=gamma)
    meta = sghmc_meta(0.02)
    meta["q_w0"] = meta["q_w0"][:, :4]
    with pytest.raises(ValueError, match="q_w0 has shape"):
        bdlkit.infer(gaussian_target(), "meta_sgmcmc", steps=3, gamma=gamma,
                     meta_params=Pretrained(meta, Constants()))


@pytest.mark.parametrize("gamma", ["autograd", "finite_difference"])
def test_huge_meta_parameters_stop_at_step_0(gamma):
    """Weights of 1e200 overflow the networks (±inf hidden sums meet: NaN), which stops the
    first step rather than returning non-finite θ or p."""
    meta = {k: v * 1e200 if "_w" in k else v for k, v in random_meta(0).items()}
    alg = meta_sgmcmc.build(gaussian_target(), meta_params=Pretrained(meta, Constants()),
                            gamma=gamma)
    state = alg.init(generator=torch.Generator().manual_seed(0))
    with pytest.raises(NonFiniteError, match="at step 0"):
        alg.step(state, None)


def test_a_non_finite_finite_difference_quotient_stops_naming_its_step(monkeypatch):
    """Γ_p by finite differences turning infinite at the third step (step index 2; step 0 is
    by autograd) stops the run there, before a non-finite θ or p is returned."""
    inner = dyn.momentum_terms_fd
    calls = []

    def patched(*args, **kwargs):
        terms = inner(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            return terms._replace(gamma_p=terms.gamma_p.clone().fill_(float("inf")))
        return terms

    monkeypatch.setattr(dyn, "momentum_terms_fd", patched)
    alg = meta_sgmcmc.build(gaussian_target(), meta_params=Pretrained(random_meta(0),
                                                                       Constants()))
    state = alg.init(generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        state, _ = alg.step(state, None)
    with pytest.raises(NonFiniteError, match="at step 2 .*try gamma='autograd'"):
        alg.step(state, None)


def test_unknown_gamma_and_meta_params_are_refused():
    target = gaussian_target()
    pre = Pretrained(random_meta(0), Constants())
    with pytest.raises(ValueError, match="gamma must be one of .*'exact'"):
        meta_sgmcmc.build(target, meta_params=pre, gamma="exact")
    with pytest.raises(TypeError, match="meta_params must be 'pretrained', a path"):
        meta_sgmcmc.build(target, meta_params=3)
    with pytest.raises(ValueError, match="step eps"):
        meta_sgmcmc.build(target, meta_params=pre, eps=-0.1)
