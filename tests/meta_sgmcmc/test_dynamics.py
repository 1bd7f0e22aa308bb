"""Meta-SGMCMC's dynamics: the SGHMC limit, Γ by autograd against numerical derivatives, Γ by
finite differences in time against autograd (meta-parameter files, bad meta-parameters and
non-finite steps: test_meta_params_refused.py)."""

from __future__ import annotations

import pytest
import torch
from dynamics_helpers import F64, gaussian_target, random_meta, sghmc_meta
from torch import nn

import bdlkit
from bdlkit.algorithms.sgmcmc import meta_sgmcmc, sghmc
from bdlkit.meta_sgmcmc import Constants, Pretrained
from bdlkit.meta_sgmcmc import dynamics as dyn

H = 1e-6  # the step of the central differences


# --------------------------------------------------------------------------- helpers
def _classifier(temperature: float):
    """A float64 4-8-2 tanh classifier on 64 points and its data."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g, dtype=F64)
    y = (x[:, 0] > 0).long()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).double()
    model = bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=64,
                                 temperature=temperature)
    return model, (x, y)


def _inputs(seed: int, u_shape: tuple[int, ...] = (1,)):
    gen = torch.Generator().manual_seed(100 + seed)
    u = torch.randn(u_shape, generator=gen, dtype=F64)
    p = torch.randn(50, generator=gen, dtype=F64)
    g = 0.01 * torch.randn(50, generator=gen, dtype=F64)  # 70·g ~ 0.7: f_D's third input
    return u, p, g


# --------------------------------------------------------------------------- a. SGHMC limit
@pytest.mark.parametrize("gamma", ["autograd", "finite_difference"])
@pytest.mark.parametrize("problem", ["target", "classifier"])
def test_constant_curl_and_diffusion_is_sghmc(problem, gamma):
    """With Q_f ≡ 1 and D_f ≡ D (d_w1 = 0, d_b1 = b: D = d_scale·|b| + c_D·1, below the clamp
    min(d_max, 1/ε)) both Γ vanish, and with v = ε·p::

        v' = (1 − ε·D)·v − ε²·N·g + ε·sqrt(2ε·T·D)·ξ,    θ' = θ + v'

    which is bdlkit's SGHMC with lr = ε²·N and alpha = ε·D (its noise variance 2·lr·α·T/N =
    2ε³·D·T). Same seed, same noise stream: after 20 steps θ and ε·p equal SGHMC's θ and v
    to float64 rounding (measured: relative differences at most 4.7e-15 for θ, 4.2e-14 for
    ε·p). On a Target (N = T = 1, 4 chains stacked as (4, 3), so u is per chain) and on a
    4-8-2 classifier (N = 64, minibatches of 16, T = 0.3)."""
    if problem == "target":
        target = gaussian_target()
        b, batches = 0.02, [None] * 20
        start = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    else:
        target, (x, y) = _classifier(temperature=0.3)
        b = 0.2
        batches = [(x[t % 4 * 16:(t % 4 + 1) * 16], y[t % 4 * 16:(t % 4 + 1) * 16])
                   for t in range(20)]
        start = None
    constants = Constants()
    alg = meta_sgmcmc.build(target, meta_params=Pretrained(sghmc_meta(b), constants),
                            gamma=gamma)
    s = alg.scales
    d = constants.d_scale * abs(b) + s.c_d
    assert d < s.d_max and s.d_max == min(constants.d_max, 1 / s.eps)  # no clamp
    assert 0 < s.eps * d < 1
    ref = sghmc.build(target, lr=s.eps**2 * target.num_data, alpha=s.eps * d)
    state = alg.init(start, generator=torch.Generator().manual_seed(5))
    state_ref = ref.init(start, generator=torch.Generator().manual_seed(5))
    for batch in batches:
        state, _ = alg.step(state, batch)
        state_ref, _ = ref.step(state_ref, batch)
    theta, v = state.params, state.momentum
    theta_ref, v_ref = state_ref.params, state_ref.momentum
    if problem == "target":
        theta, v, theta_ref, v_ref = ({"x": t} for t in (theta, v, theta_ref, v_ref))
    for k in theta:
        torch.testing.assert_close(theta[k], theta_ref[k], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(s.eps * v[k], v_ref[k], rtol=1e-12, atol=1e-14)
    init = start if start is not None else target.init_params()
    init = {"x": init} if problem == "target" else init
    moved = max((theta[k] - init[k]).abs().max().item() for k in theta)
    assert moved > 1e-2  # the chains moved: not a comparison of two frozen states


# --------------------------------------------------------------------------- b. Γ by autograd
def _central(f, x, h=H):
    return (f(x + h) - f(x - h)) / (2 * h), (f(x + h) - f(x)) / h, (f(x) - f(x - h)) / h


def _smooth(central, forward, backward):
    """Coordinates where the one-sided differences agree with each other: no ReLU, |·| or
    clamp kink within ±H (the check is then meaningful there)."""
    return (forward - backward).abs() <= 1e-4 * (central.abs() + 1e-3)


@pytest.mark.parametrize("u_shape", [(), (1,)], ids=["u-scalar", "u-1"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("num_data", [1000, 60_000])
def test_autograd_gamma_matches_central_differences(seed, u_shape, num_data):
    """Γ_p = ∂Q_f/∂u·g + dD_f/dp (total, through Q_f) and Γ_θ = −∂Q_f/∂p by autograd equal
    central differences (step 1e-6) of q_value and of D_f = diffusion(d_part, q_value) in u
    and in p (each coordinate of Q_f and D_f depends on its own p_i only, so one shifted
    vector gives every diagonal derivative). Relative tolerance 1e-6 (measured over these
    12 cases: at most 2.3e-8 for Γ_p, 5.7e-9 for Γ_θ;
    the scale of Γ_p is |∂Q_f/∂u·g| + |dD_f/dp|). Coordinates with a kink within the step
    (one-sided differences disagreeing) are skipped; at these seeds there are none, and the
    test asserts that at least 45 of the 50 are compared."""
    c = Constants()
    s = c.scales(num_data)
    meta = random_meta(seed)
    u, p, g = _inputs(seed, u_shape)

    def q(uu, pp):
        return dyn.q_value(meta, c, uu, pp)

    def d(uu, pp):
        return dyn.diffusion(dyn.d_part(meta, c, uu, pp, g), q(uu, pp), s)

    mom = dyn.momentum_terms(meta, c, s, u, p, g)
    pos = dyn.position_terms(meta, c, u, p)
    assert mom.d.max() < s.d_max and mom.q.abs().max() < c.q_clamp  # the smooth regime

    dq_du = _central(lambda uu: q(uu, p), u)
    dd_dp = _central(lambda pp: d(u, pp), p)
    dq_dp = _central(lambda pp: q(u, pp), p)
    smooth = _smooth(*dq_du) & _smooth(*dd_dp) & _smooth(*dq_dp)
    assert int(smooth.sum()) >= 45

    numeric_p = dq_du[0] * g + dd_dp[0]
    scale = (dq_du[0] * g).abs() + dd_dp[0].abs()
    err_p = ((mom.gamma_p - numeric_p).abs() / scale)[smooth]
    assert err_p.max() < 1e-6, err_p.max()
    err_theta = ((pos.gamma_theta + dq_dp[0]).abs() / dq_dp[0].abs())[smooth]
    assert err_theta.max() < 1e-6, err_theta.max()
    # the values themselves are those of the networks
    torch.testing.assert_close(mom.q, q(u, p), rtol=0, atol=0)
    torch.testing.assert_close(mom.d, d(u, p), rtol=0, atol=0)
    torch.testing.assert_close(pos.q, q(u, p), rtol=0, atol=0)


def test_autograd_gamma_of_a_chain_stack_is_per_chain():
    """u of shape (chains, 1) with p of shape (chains, d): each chain's Γ is what it would
    be alone."""
    c = Constants()
    s = c.scales(1000)
    meta = random_meta(0)
    gen = torch.Generator().manual_seed(7)
    u = torch.randn(3, 1, generator=gen, dtype=F64)
    p = torch.randn(3, 5, generator=gen, dtype=F64)
    g = 0.01 * torch.randn(3, 5, generator=gen, dtype=F64)
    stacked = dyn.momentum_terms(meta, c, s, u, p, g)
    pos = dyn.position_terms(meta, c, u, p)
    for i in range(3):
        alone = dyn.momentum_terms(meta, c, s, u[i, 0], p[i], g[i])
        torch.testing.assert_close(stacked.gamma_p[i], alone.gamma_p, rtol=1e-14, atol=1e-14)
        torch.testing.assert_close(pos.gamma_theta[i],
                                   dyn.position_terms(meta, c, u[i, 0], p[i]).gamma_theta,
                                   rtol=1e-14, atol=1e-14)


# --------------------------------------------------------------------------- c. Γ in time
def _components(meta, c, s, u, p, g):
    """∂Q_f/∂u·g, ∂(d_scale·|f_D|)/∂p, ∂Q_f/∂p and Q_f by autograd, separately."""
    u_in = u.expand_as(p).clone().requires_grad_()
    p_in = p.clone().requires_grad_()
    q = dyn.q_value(meta, c, u_in, p_in)
    dq_du, dq_dp = torch.autograd.grad(q.sum(), (u_in, p_in))
    p_in = p.clone().requires_grad_()
    dpart_dp, = torch.autograd.grad(dyn.d_part(meta, c, u, p_in, g).sum(), p_in)
    return dq_du * g, dpart_dp, dq_dp, q.detach()


def _fd_terms(meta, c, s, u0, p0, u1, p1, g):
    memory = dyn.Memory(u0, p0, dyn.q_value(meta, c, u0, p0), dyn.q_value(meta, c, u0, p1))
    return dyn.momentum_terms_fd(meta, c, s, u1, p1, g, memory)


def _guard(den, tiny):
    return den / (den + torch.where(den < 0, -tiny, tiny))


@pytest.mark.parametrize("seed", [0, 1])
def test_finite_difference_gamma_converges_to_autograd(seed):
    """States u_t = u_{t−1} + δ and p_t = p_{t−1} ± δ (alternating signs). The networks are
    piecewise linear, so within one linear piece each difference quotient is the exact
    derivative times δ/(δ + guard) (guard 1e-7 for Q_f, 1e-10 for f_D, with δ's sign):

    * for δ = 1e-7 ... 1e-4 the finite-difference Γ_p equals that guard-weighted sum of the
      autograd derivatives to 1e-6 relative (measured: at most 3.2e-8);
    * so it converges to the autograd Γ_p as δ grows past the guard: the error, relative to
      |∂Q_f/∂u·g| + |∂D_f/∂p|, is at most ~1e-7/δ (measured 0.13-0.30 at δ = 1e-7,
      0.023-0.055 at δ = 1e-6, 2.5e-4-6.1e-4 at δ = 1e-4; it is 0.5 for Q_f's quotients at δ = 1e-7 itself, where the
      guard equals the difference);
    * Γ_θ's error is exactly 1e-7/(δ + 1e-7);
    * Q_f and D_f themselves are identical in both modes.

    Coordinates whose derivatives differ between the two states (a kink crossed) are left
    out; at δ <= 1e-4 there are none here (asserted: all 50 compared)."""
    c = Constants()
    s = c.scales(1000)
    meta = random_meta(seed)
    u0, p0, g = _inputs(seed)
    sign = torch.where(torch.arange(50) % 2 == 0, 1.0, -1.0).to(F64)
    errors = []
    for delta in (1e-7, 1e-6, 1e-5, 1e-4):
        u1, p1 = u0 + delta, p0 + delta * sign
        fd = _fd_terms(meta, c, s, u0, p0, u1, p1, g)
        ag = dyn.momentum_terms(meta, c, s, u1, p1, g)
        assert ag.d.max() < s.d_max  # D_f not clamped (the clamped case: test below)
        a, b, dq_dp, q = _components(meta, c, s, u1, p1, g)
        a0, b0, dq_dp0, _ = _components(meta, c, s, u0, p0, g)
        same_piece = ((a - a0).abs() <= 1e-9 * a.abs()) & ((b - b0).abs() <= 1e-9 * b.abs()) \
            & ((dq_dp - dq_dp0).abs() <= 1e-9 * dq_dp.abs())
        assert bool(same_piece.all())
        dp = p1 - p0
        cterm = 2 * s.c_d * q * dq_dp
        weighted = (a * _guard(u1 - u0, 1e-7) + b * _guard(dp, 1e-10)
                    + cterm * _guard(dp, 1e-7))
        scale = a.abs() + b.abs() + cterm.abs()
        torch.testing.assert_close(ag.gamma_p, a + b + cterm, rtol=1e-12, atol=1e-12)
        assert ((fd.gamma_p - weighted).abs() / scale).max() < 1e-6
        err = ((fd.gamma_p - ag.gamma_p).abs() / scale).max().item()
        assert err <= 1.01e-7 / delta
        errors.append(err)
        assert torch.equal(fd.q, ag.q) and torch.equal(fd.d, ag.d)

        pos_fd = dyn.position_terms_fd(meta, c, u1, p0, p1, dyn.q_value(meta, c, u1, p0))
        pos_ag = dyn.position_terms(meta, c, u1, p1)
        rel = (pos_fd.gamma_theta - pos_ag.gamma_theta).abs() / pos_ag.gamma_theta.abs()
        torch.testing.assert_close(rel, torch.full_like(rel, 1e-7 / (delta + 1e-7)),
                                   rtol=1e-6, atol=0)
        assert torch.equal(pos_fd.q, pos_ag.q)
    assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-3


def test_quotient_guard_does_not_divide_by_zero():
    """p unchanged (difference 0), u unchanged, and a difference of exactly −1e-7 (where a
    guard added without the difference's sign would give 0/0 or x/0): every term is finite;
    with p and u unchanged the quotients are 0 and Γ_p, Γ_θ are 0."""
    c = Constants()
    s = c.scales(1000)
    meta = random_meta(0)
    u, p, g = _inputs(0)
    fd = _fd_terms(meta, c, s, u, p, u, p, g)
    assert all(torch.isfinite(t).all() for t in fd)
    assert torch.equal(fd.gamma_p, torch.zeros_like(p))
    pos = dyn.position_terms_fd(meta, c, u, p, p, dyn.q_value(meta, c, u, p))
    assert torch.equal(pos.gamma_theta, torch.zeros_like(p))

    zero = torch.zeros(50, dtype=F64)
    minus = torch.full((50,), -1e-7, dtype=F64)
    assert torch.equal(minus - zero, minus)  # the difference is exactly −1e-7
    u0 = torch.zeros(1, dtype=F64)
    fd = _fd_terms(meta, c, s, u0, zero, u0 - 1e-7, minus, g)
    assert all(torch.isfinite(t).all() for t in fd)
    pos = dyn.position_terms_fd(meta, c, u0, zero, minus, dyn.q_value(meta, c, u0, zero))
    assert torch.isfinite(pos.gamma_theta).all()


def test_finite_difference_gamma_sees_the_diffusion_clamp():
    """Both states with D_f clamped at D_max = min(d_max, 1/ε), and within one linear piece:
    D_f does not change with p there, so ∂D_f/∂p = 0 (autograd's answer) and the two modes
    should agree up to the guard weights."""
    c = Constants()
    s = c.scales(1000)
    meta = random_meta(0)
    meta["d_b1"] = torch.full((1,), 20.0, dtype=F64)  # d_scale·|f_D| ≈ 1000 > D_max ≈ 378
    u0, p0, g = _inputs(0)
    u1, p1 = u0 + 1e-4, p0 + 1e-4
    fd = _fd_terms(meta, c, s, u0, p0, u1, p1, g)
    ag = dyn.momentum_terms(meta, c, s, u1, p1, g)
    assert torch.equal(ag.d, torch.full_like(ag.d, s.d_max))  # clamped everywhere
    a, _, _, _ = _components(meta, c, s, u1, p1, g)
    torch.testing.assert_close(ag.gamma_p, a, rtol=1e-12, atol=1e-12)  # only ∂Q_f/∂θ
    torch.testing.assert_close(fd.gamma_p, ag.gamma_p, rtol=2e-3, atol=1e-9)
