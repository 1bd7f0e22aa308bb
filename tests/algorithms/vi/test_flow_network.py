"""family="flow" on networks: a flow on the last layer (or named tensors) times a diagonal
Gaussian on the rest; bad selections fail early; a NaN names the family; `bdlkit fit
--family flow` resumes bit-exactly after kill -9."""

import json
import signal

import pytest
import torch
from vi_helpers import crash_then_resume, quiet_flow

import bdlkit
from bdlkit.algorithms.vi import advi, score_vi
from bdlkit.engine.checkpoint import latest_checkpoint, load_checkpoint
from bdlkit.engine.runner import NonFiniteError
from bdlkit.families.flow import FlowFamily
from bdlkit.models import MLP
from bdlkit.problems import BayesianModel
from cli_helpers import run_cli


def _model(hidden=(8,), **kw):
    torch.manual_seed(0)
    return BayesianModel(MLP(4, 3, hidden=hidden), "categorical", num_data=100, **kw)


def test_the_flow_is_on_the_last_layer_and_q0_is_the_diagonal_gaussian_everywhere():
    problem = _model()
    alg = quiet_flow(advi, problem, init_std=0.1)
    assert alg._flow.features == problem.num_params and alg._flow.flowed == 8 * 3 + 3
    assert alg._layout.names == ("net.2.weight", "net.2.bias", "net.0.weight", "net.0.bias")
    state = alg.init(generator=torch.Generator().manual_seed(0))
    draws = alg.approximation(state).sample(4000, torch.Generator().manual_seed(1))
    point = problem.init_params()
    assert list(draws) == list(point)
    for name, value in point.items():
        assert draws[name].shape == (4000, *value.shape)
        assert (draws[name].mean(0) - value).abs().max() < 0.02  # 4 se of σ = 0.1
        assert (draws[name].std(0) / 0.1 - 1).abs().max() < 0.1
    assert alg.label == "advi (family='flow')"


def test_named_tensors_can_carry_the_flow_and_bad_selections_fail_early():
    problem = _model()
    first = next(iter(problem.init_params()))
    alg = quiet_flow(score_vi, problem, flow_on=f"{first},net.2.bias")
    assert alg._flow.flowed == 4 * 8 + 3 and alg.flow_on == (first, "net.2.bias")
    with pytest.raises(ValueError, match=r"flow_on= patterns \['head.\*'\] match no parameter"):
        quiet_flow(advi, problem, flow_on="head.*")
    with pytest.raises(ValueError, match="bayesian= leaves deterministic"):
        quiet_flow(advi, _model(bayesian="last_layer"), flow_on="net.0.weight")
    with pytest.raises(ValueError, match="flow_on names no parameter"):
        quiet_flow(advi, problem, flow_on=",")
    with pytest.raises(ValueError, match="flow transforms must be an integer >= 1"):
        quiet_flow(advi, problem, flow_transforms=0)


@pytest.mark.slow
def test_advi_with_a_last_layer_flow_trains_a_network_and_its_draws_predict():
    data = bdlkit.data.load("digits")
    torch.manual_seed(0)
    problem = BayesianModel(MLP(64, 10, hidden=(16,)), "categorical", num_data=data.num_train)
    result = bdlkit.Runner(quiet_flow(advi, problem), data, steps=150, seed=0).fit()
    probs = result.predict(data.x_test, num_samples=8)
    accuracy = float((probs.argmax(-1) == data.y_test).double().mean())
    assert probs.shape == (len(data.y_test), 10) and accuracy > 0.9  # measured 0.970


def test_a_non_finite_flow_loss_stops_the_run_naming_the_family_and_step(monkeypatch):
    target = bdlkit.Target(lambda x: -0.5 * (x**2).sum(-1), dim=2, dtype=torch.float64)
    alg = quiet_flow(score_vi, target)
    score = FlowFamily.score
    monkeypatch.setattr(FlowFamily, "score", lambda *a, **k: score(*a, **k) * float("nan"))
    with pytest.raises(NonFiniteError, match=r"score_vi \(family='flow'\): the flow's "
                       r"score-matching loss .* at step 1"):
        bdlkit.Runner(alg, steps=5, seed=0).fit()


FIT = ["fit", "--method", "score_vi", "--family", "flow", "--model", "mlp", "--data", "digits",
       "--steps", "40", "--checkpoint-every", "10", "--seed", "0", "--no-progress", "--out"]


def _cli(*argv, kill_at=None):
    return run_cli(*argv, method=("bdlkit.algorithms.vi.score_vi", "ScoreVI"), kill_at=kill_at,
                   timeout=600, env={"OMP_NUM_THREADS": "1"})


@pytest.mark.slow  # three CLI processes, about 4 minutes; the in-process crash-resume of a
# network flow family stays fast (test_a_spline_run_on_a_network_resumes_bit_exactly...)
def test_fit_with_a_flow_on_the_last_layer_resumes_bit_exactly_after_kill_9(tmp_path):
    """The issue's acceptance: `bdlkit fit --method score_vi --family flow --model mlp
    --data digits` (40 steps here), killed with SIGKILL at step 25, then `--resume`."""
    full = _cli(*FIT, str(tmp_path / "full"))
    assert full.returncode == 0, full.stderr
    killed = _cli(*FIT, str(tmp_path / "cut"), kill_at=25)
    assert killed.returncode == -signal.SIGKILL
    assert load_checkpoint(latest_checkpoint(tmp_path / "cut" / "checkpoints")).step == 20
    again = _cli("fit", "--resume", str(tmp_path / "cut"), "--no-progress")
    assert again.returncode == 0, again.stderr
    metrics = (tmp_path / "full" / "metrics.json").read_bytes()
    assert (tmp_path / "cut" / "metrics.json").read_bytes() == metrics
    assert json.loads(metrics)["accuracy"] > 0.1
    config = (tmp_path / "full" / "config.yaml").read_text()
    assert "family: flow" in config and "flow_on: last_layer" in config


def test_the_spline_family_covers_every_tensor_at_a_cost_linear_in_d():
    problem = _model()
    alg = quiet_flow(advi, problem, family="spline", flow_bins=4)
    tensors = len(problem.init_params())
    state = alg.init(generator=torch.Generator().manual_seed(0))
    sizes = {k: v.numel() for k, v in state.lam.items()}
    assert sizes["loc"] == sizes["log_scale"] == problem.num_params
    assert sizes["spline.widths"] + sizes["spline.heights"] + sizes["spline.derivatives"] == \
        tensors * (3 * 4 - 1)
    assert alg.label == "advi (family='spline')" and "flow_on" not in alg.record()
    with pytest.raises(ValueError, match="flow_on is an option of family=.flow.; family=.spline. covers"):
        quiet_flow(advi, problem, family="spline", flow_on="all")


@pytest.mark.parametrize("module", [advi, score_vi])
def test_a_spline_run_on_a_network_resumes_bit_exactly_after_a_crash(module, tmp_path,
                                                                     monkeypatch):
    data = bdlkit.data.load("digits")
    torch.manual_seed(0)
    problem = BayesianModel(MLP(64, 10, hidden=(8,)), "categorical", num_data=data.num_train)

    def runner(run_dir):
        return bdlkit.Runner(quiet_flow(module, problem, family="spline"), data, steps=30, seed=1,
                             run_dir=run_dir, checkpoint_every=10)

    full, _ = crash_then_resume(module, runner, tmp_path, monkeypatch)
    moved = (full.state.lam["spline.heights"] != 0).any()
    assert bool(moved)  # the splines left the identity


def test_score_vi_updates_a_flows_gaussian_block_with_its_own_rao_blackwellised_gradients(
        monkeypatch):
    """On a network, score_vi's loss is a sum over the flow factor and the diagonal
    Gaussian factor; the Gaussian block gets score_vi's diagonal gradients (at K = 1:
    −mean ŝ/N and −(1 + mean (θ − μ) ŝ)/N, ADVI's), not the Monte Carlo score matching
    whose ε/σ noise stalls it."""
    from bdlkit.algorithms.vi import flow_vi
    from bdlkit.core import rng

    problem = _model()
    alg = quiet_flow(score_vi, problem, num_samples=4)
    state = alg.init(generator=torch.Generator().manual_seed(0))
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    batch = (x, torch.arange(16) % 3)
    captured = {}
    step = flow_vi._step
    monkeypatch.setattr(flow_vi, "_step", lambda opt, lr, st, grads, anchor, gen:
                        captured.update(grads) or step(opt, lr, st, grads, anchor, gen))
    alg.step(state, batch)
    gen = rng.from_state(state.rng_state, device=torch.device("cpu"))
    thetas = alg._flow.sample(state.lam, 4, gen)
    _, scores = flow_vi.problem_scores(problem, alg._layout, thetas, batch)
    m, n = alg._flow.flowed, problem.num_data
    mu = state.lam["loc"][m:]
    assert torch.allclose(captured["loc"][m:], -scores[:, m:].mean(0) / n, atol=1e-6)
    expected = -(1 + ((thetas[:, m:] - mu) * scores[:, m:]).mean(0)) / n
    assert torch.allclose(captured["log_scale"][m:], expected, atol=1e-6)
    assert captured["loc"][:m].abs().max() > 0  # the flowed block: score matching


def test_options_that_would_be_wrong_or_inert_with_a_flow_fail_early():
    problem = _model()
    with pytest.raises(ValueError, match="draws are independent, not antithetic pairs"):
        quiet_flow(score_vi, problem, antithetic=True, num_samples=4)
    with pytest.raises(ValueError, match="use optimizer='adam'"):
        quiet_flow(score_vi, problem, optimizer="sgd")
    with pytest.raises(ValueError, match="flow_on is an option of family='flow'"):
        quiet_flow(advi, problem, family="diag", flow_on="net.0.weight")
    target = bdlkit.Target(lambda x: -0.5 * (x**2).sum(-1), dim=2)
    with pytest.raises(ValueError, match="on a Target the flow is on all of θ"):
        quiet_flow(advi, target, flow_on="all")
    with pytest.warns(UserWarning, match="max_step cannot act") as caught:
        score_vi.build(problem, family="flow", max_step=2.0, loss="mc")
    assert not any("loss" in str(w.message).split("cannot")[0] for w in caught)  # it acts
    everything = quiet_flow(advi, _model(bayesian="last_layer"), flow_on="all")
    assert everything._flow.flowed == everything._flow.features  # all random tensors


def test_a_non_finite_problem_score_is_named_as_such(monkeypatch):
    problem = _model()
    alg = quiet_flow(advi, problem)
    state = alg.init(generator=torch.Generator().manual_seed(0))
    inner = BayesianModel.value_and_score
    monkeypatch.setattr(BayesianModel, "value_and_score", lambda self, p, b: (
        inner(self, p, b)[0], {k: v * float("nan") for k, v in inner(self, p, b)[1].items()}))
    batch = (torch.randn(8, 4), torch.arange(8) % 3)
    _, info = alg.step(state, batch)
    assert info["nonfinite"] == "the problem's scores at the flow's draws"
