"""L2E's constrained "momentum" kinetic form (β = s·r, α = 0) and the ``num_data`` gradient
scale: the update against SGHMC where s is constant, s's independence of r and of the fast
features, and the constants' validation and file round trip."""

import math

import pytest
import torch

from bdlkit.l2e import kinetic as K
from bdlkit.l2e.pretrained import load_meta_params, save_meta_params

F64 = torch.float64


def _leaves(seed=0, shapes=((3, 4), (5,))):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    return ([r(*s) for s in shapes], [r(*s) for s in shapes], [3.0 * r(*s) for s in shapes],
            [r(len(K.DECAYS), *s) for s in shapes])


def _meta(seed=3):
    return {k: v.double() for k, v in K.init_meta_params(torch.Generator().manual_seed(seed)).items()}


def _constant_scale_meta(out1: float):
    """An MLP whose outputs are constant: zero weights, b2 = (0, out1)."""
    meta = {k: torch.zeros_like(v) for k, v in _meta().items()}
    meta["b2"] = torch.tensor([0.0, out1], dtype=F64)
    return meta


def test_constant_scale_momentum_form_is_sghmc_exactly():
    """s ≡ 1 (out₁ = 0, precond_mult 1): the update is the identity kinetic's, i.e. SGHMC."""
    grad, params, mom, moments = _leaves()
    noise = _leaves(1)[0]
    c = K.Constants(kinetic_form="momentum", precond_mult=1.0, noise_mode="paper",
                    grad_scale=100.0, friction=3.0)
    kin = K.learned_kinetic(_constant_scale_meta(0.0), c)
    assert isinstance(kin, K.MomentumKinetic)
    got = K.l2e_update(kin, c, params, mom, moments, grad, noise)
    want = K.l2e_update(K.IdentityKinetic(), c, params, mom, moments, grad, noise)
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)


def test_constant_scale_multiplies_the_momentum_in_both_steps():
    """s = 2·softplus(1)/ln 2: r' = r − ε(N g + C s r) + σξ, θ' = θ + ε s r'."""
    grad, params, mom, moments = _leaves()
    noise = _leaves(1)[0]
    c = K.Constants(kinetic_form="momentum", precond_mult=2.0, noise_mode="paper",
                    grad_scale=10.0, friction=0.5)
    s = 2.0 * math.log1p(math.e) / math.log(2.0)
    th, r, _ = K.l2e_update(K.learned_kinetic(_constant_scale_meta(1.0), c), c, params, mom,
                            moments, grad, noise)
    sd = math.sqrt(c.noise_variance())
    for p, r0, g, z, p1, r1 in zip(params, mom, grad, noise, th, r):
        r_ref = r0 - c.eps * (c.grad_scale * g + c.friction * s * r0) + sd * z
        torch.testing.assert_close(r1, r_ref, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(p1, p + c.eps * s * r_ref, rtol=1e-12, atol=1e-12)


def test_learned_scale_is_positive_and_ignores_r_and_the_fast_features():
    grad, params, mom, moments = _leaves()
    kin = K.MomentumKinetic(_meta(), precond_mult=1.0)
    s = kin.scale(grad, params, moments)
    assert all((x > 0).all() for x in s)
    alpha, beta = kin(grad, params, mom, moments)
    assert all((a == 0).all() for a in alpha)
    for b, k, r in zip(beta, s, mom):
        torch.testing.assert_close(b, k * r)
    # g, θ and the fast moments (decays 0.1 ... 0.99) change nothing; the slow ones do
    fast = [m.clone() for m in moments]
    for m in fast:
        m[:4] = torch.randn_like(m[:4])
    s2 = kin.scale([10 * g + 1 for g in grad], [p - 3 for p in params], fast)
    for a, b in zip(s, s2):
        torch.testing.assert_close(a, b)
    slow = [m.clone() for m in moments]
    for m in slow:
        m[4:] = torch.randn_like(m[4:])
    assert any(not torch.allclose(a, b) for a, b in zip(s, kin.scale(grad, params, slow)))


def test_kinetic_form_and_grad_scale_validation():
    with pytest.raises(ValueError, match="kinetic_form"):
        K.Constants(kinetic_form="hamiltonian")
    with pytest.raises(ValueError, match="grad_scale"):
        K.Constants(grad_scale="all")
    c = K.Constants(grad_scale="num_data")
    assert c.for_data(1234).grad_scale == 1234.0
    assert K.Constants(grad_scale=7.0).for_data(1234).grad_scale == 7.0


def test_momentum_constants_round_trip_and_old_files_mean_free(tmp_path):
    c = K.Constants(kinetic_form="momentum", grad_scale="num_data", noise_mode="paper",
                    friction=10.0)
    path = save_meta_params(tmp_path / "m.safetensors", _meta(), c)
    assert load_meta_params(path).constants == c
    # a file from before kinetic_form existed: its sampler was the free form
    import json

    from bdlkit.core.serialization import load_tensors_with_metadata, save_tensors
    tensors, metadata = load_tensors_with_metadata(path)
    raw = json.loads(metadata["constants"])
    del raw["kinetic_form"]
    raw["grad_scale"] = 50_000.0
    old = tmp_path / "old.safetensors"
    save_tensors(old, tensors, metadata={**metadata, "constants": json.dumps(raw)})
    assert load_meta_params(old).constants.kinetic_form == "free"


def test_files_digests_and_run_options_written_before_kinetic_form_still_match():
    """kinetic_form at its default ("free") is left out of what files, digests and
    meta-training options record: the shipped set's digest is the one it had before the
    option existed, and an interrupted run's checkpoint still resumes."""
    from bdlkit.algorithms.sgmcmc import l2e
    from bdlkit.bench.l2e_sampling import gaussian_target
    from bdlkit.l2e.meta_train import MetaTrainConfig

    assert l2e.build(gaussian_target()).meta_digest == "6516c16d07dc9d30"  # as in 078262c
    assert "kinetic_form" not in MetaTrainConfig().to_dict()["constants"]
    momentum = MetaTrainConfig(constants=K.Constants(kinetic_form="momentum"))
    assert momentum.to_dict()["constants"]["kinetic_form"] == "momentum"
