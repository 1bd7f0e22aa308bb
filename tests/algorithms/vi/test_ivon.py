"""IVON: the same iterates as the ivon-opt package on an MLP (float64, the same noise), the
relation to score_vi's closed form, a Target through bdlkit.infer, options refused."""

import math
import re
from unittest import mock

import pytest
import torch
from torch.nn import functional as F
from vi_helpers import F64

import bdlkit
from bdlkit.algorithms.vi import ivon as ivon_method
from bdlkit.algorithms.vi import score_vi
from bdlkit.core import rng
from bdlkit.core.serialization import state_from_tensors, state_to_tensors
from bdlkit.core.tree import randn_like
from bdlkit.core.value_range import LOW

ivon_opt = pytest.importorskip("ivon", reason="ivon-opt is the reference (pip install ivon-opt)")

N, D_IN, STEPS, BATCH, PRIOR = 200, 6, 50, 32, 2.0


def mlp() -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Linear(D_IN, 8), torch.nn.Tanh(),
                                   torch.nn.Linear(8, 3)).to(F64)


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, D_IN, generator=g, dtype=F64)
    y = torch.randint(0, 3, (N,), generator=g)
    batches = [torch.randint(0, N, (BATCH,), generator=g) for _ in range(STEPS)]
    return x, y, batches


def flat(tree) -> torch.Tensor:
    """A dict of tensors (in its own order, the module's) or a list as one vector."""
    return torch.cat([t.reshape(-1) for t in (tree.values() if isinstance(tree, dict)
                                               else tree)])


def run_ours(alg, x, y, batches):
    """Our steps, and the standard normals each step drew (read off its generator)."""
    state = alg.init(generator=torch.Generator().manual_seed(3))
    normals = []
    for idx in batches:
        normals.append(flat(randn_like(state.mean, rng.from_state(state.rng_state), 1)))
        state, _ = alg.step(state, (x[idx], y[idx]))
    return state, normals


def run_ivon_opt(normals, x, y, batches, schedule, lr, hess_init, beta1, beta2):
    """ivon-opt's own loop on the same minibatches, its torch.randn fed our normals."""
    net = mlp()
    opt = ivon_opt.IVON(net.parameters(), lr=lr, ess=N, hess_init=hess_init, beta1=beta1,
                        beta2=beta2, weight_decay=1.0 / (N * PRIOR**2))
    for i, idx in enumerate(batches):
        if schedule == "cosine":
            for group in opt.param_groups:
                group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * i / STEPS))
        with mock.patch("torch.randn", lambda *a, i=i, **k: normals[i].clone()):
            with opt.sampled_params(train=True):
                opt.zero_grad()
                F.cross_entropy(net(x[idx]), y[idx]).backward()
        opt.step()
    return flat([p.detach() for p in net.parameters()]), opt.param_groups[0]["hess"]


@pytest.mark.parametrize("storage", ["flat", "tree"])
@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_iterates_equal_ivon_opt_on_an_mlp(storage, schedule):
    """50 steps, the per-datum loss mean CE, ess = N, weight decay 1/(N σ0²): mean and
    curvature equal ivon-opt's to 1e-6 (float64; measured: 2e-16)."""
    hyper = {"lr": 0.2, "hess_init": 0.5, "beta1": 0.9, "beta2": 0.99}
    x, y, batches = data()
    model = bdlkit.BayesianModel(mlp(), "categorical", prior=PRIOR, num_data=N)
    alg = ivon_method.build(model, schedule=schedule, storage=storage, **hyper).for_run(STEPS)
    state, normals = run_ours(alg, x, y, batches)
    mean, hess = run_ivon_opt(normals, x, y, batches, schedule, **hyper)
    initial = flat(model.init_params())
    assert (flat(state.mean) - initial).abs().max() > 0.05  # it moved
    assert (flat(state.hess) - hyper["hess_init"]).abs().max() > 1e-3
    torch.testing.assert_close(flat(state.mean), mean, rtol=0, atol=1e-6)
    torch.testing.assert_close(flat(state.hess), hess, rtol=0, atol=1e-6)


def test_the_closed_form_at_ivons_settings_takes_ivons_steps():
    """score_vi's closed form with α = 0, one draw and IVON's uncentred Price estimate,
    ω = lr·(h0 + δ), hess_init h0, β = β2, β1, the Riemannian average and no floor is IVON
    (docs/ivon.md): the same q after 50 steps on the MLP, from the same seed."""
    lr, h0, b1, b2 = 0.2, 0.5, 0.9, 0.99
    x, y, batches = data()
    model = bdlkit.BayesianModel(mlp(), "categorical", prior=PRIOR, num_data=N)
    ivon = ivon_method.build(model, lr=lr, hess_init=h0, beta1=b1, beta2=b2).for_run(STEPS)
    delta = ivon.weight_decay
    closed = score_vi.build(
        model, solver="closed_form", num_samples=1, antithetic=False, alpha_max=0.0,
        omega=lr * (h0 + delta), hess_init=h0, curvature_decay=b2, momentum=b1,
        curvature_update="riemannian", a_min=LOW).for_run(STEPS)  # the range's floor: none
    a = ivon.init(generator=torch.Generator().manual_seed(3))
    b = closed.init(generator=torch.Generator().manual_seed(3))
    for idx in batches:
        a, _ = ivon.step(a, (x[idx], y[idx]))
        b, _ = closed.step(b, (x[idx], y[idx]))
    qa, qb = ivon.approximation(a), closed.approximation(b)
    assert (flat(qa.mean) - flat(model.init_params())).abs().max() > 0.05
    torch.testing.assert_close(flat(qa.mean), flat(qb.mean), rtol=0, atol=1e-10)
    torch.testing.assert_close(flat(qa.std), flat(qb.std), rtol=1e-10, atol=0)


def test_a_target_through_infer_and_a_checkpoint_round_trip():
    """On a Target IVON runs on the Laplace-standardised coordinates from h0 = 1 (the
    Laplace approximation): σ stays right, the mean settles; the state survives a round
    trip."""
    sds = torch.tensor([0.1, 1.0, 10.0], dtype=F64)
    target = bdlkit.Target(lambda t: -0.5 * ((t - 1.0) / sds).square().sum(-1), 3, dtype=F64)
    res = bdlkit.infer(target, "ivon", steps=3000, seed=0)
    q = res.algorithm.approximation(res.state)
    assert ((q.mean - 1.0) / sds).abs().max() < 0.1
    assert (q.std / sds - 1).abs().max() < 0.02
    assert res.algorithm.run_steps == 3000 and res.state.average.count == 1500
    alg = ivon_method.build(target).for_run(10)
    state = alg.init(torch.zeros(3, dtype=F64), generator=torch.Generator().manual_seed(0))
    state, _ = alg.step(state, None)
    template = alg.init(torch.zeros(3, dtype=F64), generator=torch.Generator().manual_seed(1))
    restored = state_from_tensors(template, state_to_tensors(state))
    s1, _ = alg.step(state, None)
    s2, _ = alg.step(restored, None)
    assert torch.equal(s1.mean, s2.mean) and torch.equal(s1.hess, s2.hess)


@pytest.mark.parametrize(("option", "value", "words"), [
    ("hess_init", 0.0, "hess_init must be a finite number > 0"),
    ("hess_init", -1.0, "hess_init must be a finite number > 0"),
    ("ess", 0.0, "ess must be a finite number > 0"),
    ("ess", float("nan"), "ess must be a finite number"),  # (bdlkit's range: build's check)
    ("beta2", 1.5, "beta2 must be in [0, 1]"),
    ("beta1", 1.0, "beta1 must be in [0, 1)"),
    ("mc_samples", 0, "mc_samples must be an integer >= 1"),
    ("clip_radius", 0.0, "clip_radius must be > 0"),
    ("lr", -1.0, "lr must be a finite number > 0"),
])
def test_options_out_of_range_are_refused_by_name(option, value, words):
    target = bdlkit.Target(lambda t: -0.5 * t.square().sum(-1), 2)
    with pytest.raises(ValueError, match=re.escape(words)):
        ivon_method.build(target, **{option: value})


@pytest.mark.parametrize(("flag", "words"), [
    ("--hess-init=0", "hess_init must be a finite number > 0"),
    ("--hess-init=-1", "hess_init must be a finite number > 0"),
    ("--ess=0", "ess must be a finite number > 0"),
    ("--ess=-5", "ess must be a finite number > 0"),
])
def test_a_bad_option_on_the_command_line_is_one_line_and_writes_nothing(flag, words, tmp_path,
                                                                         capsys):
    from bdlkit.cli import main

    out = tmp_path / "run"
    assert main(["fit", "--method", "ivon", "--data", "digits", "--steps", "2", flag,
                 "--out", str(out), "--no-progress"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and words in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("target", [False, True])
def test_a_crashed_run_resumes_bit_exactly(target, tmp_path, monkeypatch):
    """Killed at step 17 of 30 and resumed from its checkpoint: the same final state as the
    uninterrupted run, on a network (flat storage) and on a Target (the tail average)."""
    from vi_helpers import crash_then_resume

    from bdlkit.engine.runner import Runner

    x, y, _ = data()
    if target:
        problem = bdlkit.Target(lambda t: -0.5 * (t - 1.0).square().sum(-1), 3, dtype=F64)
        init, batches = torch.zeros(3, dtype=F64), None
    else:
        problem = bdlkit.BayesianModel(mlp(), "categorical", prior=PRIOR, num_data=N)
        init, batches = None, (x, y)

    def runner(folder):
        return Runner(ivon_method.build(problem), batches, steps=30, seed=0, batch_size=BATCH,
                      run_dir=folder, checkpoint_every=5, init=init)

    full, _ = crash_then_resume(ivon_method, runner, tmp_path, monkeypatch)
    assert full.state.step == 30 and (full.state.average is not None) == target
