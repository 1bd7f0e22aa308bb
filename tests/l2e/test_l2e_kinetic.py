"""L2E's features, normalisation, MLP and update against naive per-element references."""

import math

import pytest
import torch

from bdlkit.l2e import kinetic as K

F64 = torch.float64


def _leaves(seed=0, shapes=((3, 4), (5,), (2, 2, 3))):
    g = torch.Generator().manual_seed(seed)

    def r(*s):
        return torch.randn(*s, generator=g, dtype=F64)

    grad = [r(*s) for s in shapes]
    params = [r(*s) for s in shapes]
    mom = [3.0 * r(*s) for s in shapes]
    moments = [r(len(K.DECAYS), *s) for s in shapes]
    return grad, params, mom, moments


def _naive_features(grad, params, mom, moments):
    """Per element and per feature with Python loops: x / sqrt(mean over the tensor of x² + 1e-5)."""
    rows = []
    for g, p, r, m in zip(grad, params, mom, moments):
        cols = [g.reshape(-1).tolist(), p.reshape(-1).tolist(), r.reshape(-1).tolist()]
        cols += [m[j].reshape(-1).tolist() for j in range(len(K.DECAYS))]
        normed = []
        for col in cols:
            rms = math.sqrt(sum(v * v for v in col) / len(col) + 1e-5)
            normed.append([v / rms for v in col])
        for i in range(len(cols[0])):
            rows.append([normed[f][i] for f in range(9)])
    return torch.tensor(rows, dtype=F64)


def test_features_match_naive_per_element_reference():
    grad, params, mom, moments = _leaves()
    x = K.features(grad, params, mom, moments)
    assert x.shape == (sum(p.numel() for p in params), 9)
    torch.testing.assert_close(x, _naive_features(grad, params, mom, moments),
                               rtol=1e-12, atol=1e-12)


def test_normalisation_is_per_tensor_and_per_feature():
    """Scaling one tensor's gradient changes nothing (up to the 1e-5) but that tensor's g
    column, which it leaves unchanged too: each feature is normalised on its own."""
    grad, params, mom, moments = _leaves()
    x = K.features(grad, params, mom, moments)
    grad2 = [grad[0] * 1e3] + grad[1:]
    x2 = K.features(grad2, params, mom, moments)
    torch.testing.assert_close(x2, x, rtol=1e-4, atol=1e-4)
    params3 = [params[0], params[1] * 50, params[2]]  # a theta column of leaf 1 only
    x3 = K.features(grad, params3, mom, moments)
    torch.testing.assert_close(x3, x, rtol=1e-4, atol=1e-4)


def test_rolling_moments_follow_the_recursion_without_bias_correction():
    grad, _, _, _ = _leaves()
    moments = [torch.zeros(len(K.DECAYS), *g.shape, dtype=F64) for g in grad]
    seq = [[gg * (t + 1) for gg in grad] for t in range(4)]
    for gs in seq:
        moments = K.update_moments(moments, gs)
    for j, b in enumerate(K.DECAYS):
        want = torch.zeros_like(grad[1])
        for gs in seq:
            want = b * want + (1 - b) * gs[1]
        torch.testing.assert_close(moments[1][j], want)


def test_meta_params_init_is_haiku_truncated_normal():
    meta = K.init_meta_params(torch.Generator().manual_seed(0), hidden=256)
    K.check_meta_params(meta)
    w = meta["w1"]  # fan_in 256: s = 1/16
    s = 1 / 16
    assert w.abs().max() <= 2 * s + 1e-7
    # N(0, s²) truncated at ±2s has std ≈ 0.8796 s
    assert abs(w.std().item() / s - 0.8796) < 0.01
    assert all((meta[b] == 0).all() for b in ("b0", "b1", "b2"))
    assert K.num_meta_params(K.init_meta_params(torch.Generator().manual_seed(0))) == 1442


def test_check_meta_params_names_the_problem():
    meta = K.init_meta_params(torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="lack"):
        K.check_meta_params({k: v for k, v in meta.items() if k != "w2"})
    bad = dict(meta, w0=torch.zeros(8, 32))
    with pytest.raises(ValueError, match="w0 has shape"):
        K.check_meta_params(bad)
    bad = dict(meta, b1=torch.full((32,), float("nan")))
    with pytest.raises(ValueError, match="not finite"):
        K.check_meta_params(bad)


def test_learned_update_matches_a_naive_two_call_step():
    """Items 1-5 of the code form, written out per element with the naive features."""
    grad, params, mom, moments = _leaves(1)
    meta = {k: v.double() for k, v in K.init_meta_params(torch.Generator().manual_seed(3)).items()}
    c = K.Constants(precond_mult=0.5, exp_mult=0.2)
    noise = _leaves(2)[0]
    kin = K.LearnedKinetic(meta, c.exp_mult, c.precond_mult)
    th, r, m = K.l2e_update(kin, c, params, mom, moments, grad, noise, temperature=0.5)

    m_ref = K.update_moments(moments, grad)
    out = K.mlp(meta, _naive_features(grad, params, mom, m_ref))
    sd = math.sqrt(2 * c.friction * c.noise_mult * 0.5)
    flat = lambda ts: torch.cat([t.reshape(-1) for t in ts])  # noqa: E731
    r_ref = flat(mom) - c.eps * (c.grad_scale * flat(grad) + c.exp_mult * out[:, 0]
                                 + c.friction * c.precond_mult * out[:, 1]) + sd * flat(noise)
    sizes = [p.numel() for p in params]
    r_leaves = [v.reshape(p.shape) for v, p in zip(r_ref.split(sizes), params)]
    out2 = K.mlp(meta, _naive_features(grad, params, r_leaves, m_ref))
    th_ref = flat(params) + c.eps * c.precond_mult * out2[:, 1]
    torch.testing.assert_close(flat(r), r_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(flat(th), th_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(flat(m), flat(m_ref))


def test_noise_modes_and_constants_validation():
    code = K.Constants()
    assert code.noise_variance() == pytest.approx(2 * 0.1 * 1e-3)
    paper = K.Constants(noise_mode="paper")
    assert paper.noise_variance(0.5) == pytest.approx(2 * 0.1 * paper.eps * 0.5)
    assert code.eps == pytest.approx(math.sqrt(0.5 / 50_000))
    with pytest.raises(ValueError, match="noise_mode"):
        K.Constants(noise_mode="both")
    with pytest.raises(ValueError, match="eps"):
        K.Constants(eps=0.0)
    with pytest.raises(ValueError, match="friction"):
        K.Constants(friction=-1.0)
