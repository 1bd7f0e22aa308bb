"""score_vi and advi with a block-diagonal flow (more flowed values than one block holds):
q₀ is the diagonal Gaussian, the Gaussian block's closed-form gradients are autograd's,
score_vi scores the anchor once at K = 1, a run learns and resumes bit-exactly, a run
records its blocks."""


import pytest
import torch
from vi_helpers import crash_then_resume, diag_gaussian, quiet_flow

import bdlkit
from bdlkit.algorithms.vi import advi, flow_vi, score_vi
from bdlkit.core import rng
from bdlkit.families.flow import FlowFamily
from bdlkit.models import MLP
from bdlkit.problems import BayesianModel

F64 = torch.float64


def _model(hidden=32, double=False):
    torch.manual_seed(0)
    net = MLP(4, 3, hidden=(hidden,))
    return BayesianModel(net.double() if double else net, "categorical", num_data=100)


def test_a_last_layer_of_99_values_is_two_blocks_starting_at_the_diagonal_gaussian():
    problem = _model()
    alg = quiet_flow(advi, problem, init_std=0.1)
    assert alg._flow.flowed == 32 * 3 + 3 and alg._flow.blocks == 2
    assert alg.record()["flow_block"] == 64 and "flow_block" not in quiet_flow(
        advi, _model(hidden=8)).record()  # one block: the record of the flow before blocks
    state = alg.init(generator=torch.Generator().manual_seed(0))
    draws = alg.approximation(state).sample(4000, torch.Generator().manual_seed(1))
    for name, value in problem.init_params().items():
        assert (draws[name].mean(0) - value).abs().max() < 0.02  # 4 se of σ = 0.1
        assert (draws[name].std(0) / 0.1 - 1).abs().max() < 0.1


def _captured_grads(alg, state, batch, monkeypatch):
    captured = {}
    step = flow_vi._step
    monkeypatch.setattr(flow_vi, "_step", lambda opt, lr, st, grads, anchor, gen:
                        captured.update(grads) or step(opt, lr, st, grads, anchor, gen))
    alg.step(state, batch)
    return captured


@pytest.mark.parametrize("stl", [False, True])
def test_advi_on_a_block_flow_takes_autograds_gradients_in_one_pass(stl, monkeypatch):
    """The flowed block's log q from the sampling pass (full estimator) and the Gaussian
    block's closed form give the gradients of the surrogate through the whole family."""
    problem = _model(double=True)
    alg = quiet_flow(advi, problem, num_samples=3, stl=stl)
    state = alg.init(generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(4)
    state.lam.update({k: v + 0.3 * torch.randn(v.shape, generator=gen, dtype=F64)
                      for k, v in state.lam.items() if k.startswith("flow.")})
    batch = (torch.randn(16, 4, generator=gen, dtype=F64), torch.arange(16) % 3)
    captured = _captured_grads(alg, state, batch, monkeypatch)
    family, layout = alg._flow, alg._layout
    lam = {k: v.detach().requires_grad_(True) for k, v in state.lam.items()}
    thetas = family.sample(lam, 3, rng.from_state(state.rng_state, torch.device("cpu")))
    _, scores = flow_vi.problem_scores(problem, layout, thetas.detach(), batch)
    at = {k: v.detach() for k, v in lam.items()} if stl else lam
    surrogate = -((scores * thetas).sum(-1) - family.log_prob(at, thetas)).mean() \
        / family.features
    expected = dict(zip(lam, torch.autograd.grad(surrogate, list(lam.values())), strict=True))
    for key, value in expected.items():
        assert torch.allclose(captured[key], value, atol=1e-9, rtol=1e-9), key  # 2e-11


def test_score_vi_scores_the_anchor_once_at_one_inner_step_and_twice_off_it(monkeypatch):
    problem = _model()
    batch = (torch.randn(16, 4), torch.arange(16) % 3)
    calls = []
    head_score = FlowFamily.head_score
    monkeypatch.setattr(FlowFamily, "head_score", lambda *a, **k: calls.append(1) or
                        head_score(*a, **k))
    for inner_steps, per_step in ((1, [1, 1]), (2, [1, 2])):
        alg = quiet_flow(score_vi, problem, inner_steps=inner_steps, num_samples=2)
        state = alg.init(generator=torch.Generator().manual_seed(0))
        counts = []
        for _ in range(2):
            calls.clear()
            state, info = alg.step(state, batch)
            counts.append(len(calls))
        assert counts == per_step and info["loss"] > 0


def test_advi_with_a_block_flow_on_a_70_d_target_finds_its_mean_and_scales():
    std = torch.linspace(0.3, 2.0, 70, dtype=F64)
    target, mean = diag_gaussian(std)
    result = bdlkit.infer(target, "advi", family="flow", steps=100, lr=5e-2, num_samples=4,
                          start="init", init_std=1.0, seed=0, flow_transforms=2,
                          flow_hidden=8)
    assert result.algorithm._flow.blocks == 2
    q = result.algorithm.approximation(result.state)
    draws = q.sample(4000, torch.Generator().manual_seed(0))
    start = float((mean / std).abs().max())
    error = float(((draws.mean(0) - mean) / std).abs().max())
    assert error < 0.2 * start, (error, start)
    assert float((draws.std(0) / std).log().abs().median()) < 0.25  # 0.50 at the start


def test_a_block_flow_run_on_a_network_resumes_bit_exactly_after_a_crash(tmp_path,
                                                                         monkeypatch):
    """(score_vi's: test_flow_network's CLI kill -9 test, whose digits MLP has blocks.)"""
    data = bdlkit.data.load("digits")
    torch.manual_seed(0)
    problem = BayesianModel(MLP(64, 10, hidden=(8,)), "categorical", num_data=data.num_train)

    def runner(run_dir):
        return bdlkit.Runner(quiet_flow(advi, problem), data, steps=20, seed=1,
                             run_dir=run_dir, checkpoint_every=5)

    full, _ = crash_then_resume(advi, runner, tmp_path, monkeypatch, at=12)
    assert full.algorithm._flow.blocks == 2  # 90 values
    assert bool((full.state.lam["flow.embedding"] != 0).all())
