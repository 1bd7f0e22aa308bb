"""The ivon-opt peer row of ``bench efficiency``: bdlkit ivon's settings, its own copy of the
module, the ratios and goal against it, skipped with the reason when ivon-opt is absent."""

import importlib.util
import json

import pytest
import torch

from bdlkit import models
from bdlkit.bench import efficiency, efficiency_peers, efficiency_setup
from bdlkit.problems import BayesianModel

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
needs_ivon = pytest.mark.skipif(efficiency_peers.available("ivon_opt") is not None,
                                reason="ivon-opt is not installed")


@needs_ivon
def test_the_ivon_opt_row_takes_bdlkit_ivons_settings_and_trains_its_own_copy():
    torch.manual_seed(0)
    problem = BayesianModel(models.MLP(4, 3, hidden=(5,)), "categorical", prior=2.0,
                            num_data=40)
    before = {k: v.clone() for k, v in problem.module.state_dict().items()}
    row, state = efficiency_setup.build("ivon_opt", problem, seed=0)
    group = row.optimizer.param_groups[0]
    twin = efficiency_setup.build("ivon", problem, seed=0)[0]
    assert efficiency_setup.METHOD_SPECS["ivon"] == ("ivon", {"mc_samples": 1})
    assert group["ess"] == twin.data_size == 40 and group["hess_init"] == twin.hess_init
    assert group["weight_decay"] == pytest.approx(1 / (2.0**2 * 40)) == twin.weight_decay
    assert group["lr"] == pytest.approx(float(twin.rate(0)))
    assert row.optimizer.mc_samples == 1
    batch = (torch.randn(8, 4), torch.randint(0, 3, (8,)))
    state, info = row.step(state, batch)
    assert torch.isfinite(info["log_prob"])
    assert any(not torch.equal(p, before[k]) for k, p in row.module.state_dict().items())
    assert all(torch.equal(p, before[k]) for k, p in problem.module.state_dict().items())


@needs_ivon
def test_ivon_rows_give_the_ratios_and_the_goal_against_ivon_opt(tmp_path):
    methods = ("advi", "score_vi", "ivon", "ivon_opt")
    rows = efficiency.run(tmp_path, models=("mlp",), methods=methods, steps=1, repeats=1,
                          warmup=1, memory=False, echo=False, shared_warm_up=False,
                          profile=False, denormal_rounds=0)
    assert [r["method"] for r in rows] == list(methods)
    assert all(r["status"] == "ok" and r["step_time_s"] > 0 for r in rows)
    result = json.loads((tmp_path / "results.json").read_text())
    ratios = result["ratios"]
    for key in ("mlp:advi/ivon_opt", "mlp:score_vi/ivon_opt", "mlp:ivon/ivon_opt"):
        assert ratios[key] > 0
    assert isinstance(result["goals"]["mlp:advi/ivon_opt <= 1.1"], bool)
    assert result["settings"]["hyper"]["ivon"] == {"mc_samples": 1}
    assert next(r for r in rows if r["method"] == "ivon_opt")["mem_method"].startswith(
        "not measured (floor or peer row)")


def test_the_ivon_opt_row_is_skipped_with_the_reason_without_ivon_opt(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ivon" else real(name, *a))
    why = efficiency_peers.available("ivon_opt")
    assert "ivon-opt is not installed" in why and "pip install ivon-opt" in why
    efficiency.run(tmp_path, models=("mlp",), methods=("torch_sgd", "ivon_opt"), steps=1,
                   repeats=1, warmup=1, memory=False, echo=False, shared_warm_up=False,
                   denormal_rounds=0)
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["skipped"] == {"ivon_opt": why}
    assert [r["method"] for r in result["rows"]] == ["torch_sgd"]
    assert result["goals"]["mlp:advi/ivon_opt <= 1.1"] is None
    assert "`ivon_opt` (ivon-opt is not installed" in (tmp_path / "results.md").read_text()


def test_a_peer_that_takes_a_rows_settings_refuses_to_be_built_without_them():
    problem = BayesianModel(models.MLP(4, 3, hidden=(5,)), "categorical", num_data=40)
    with pytest.raises(ValueError, match="takes the settings of the suite's ivon row"):
        efficiency_peers.build("ivon_opt", problem, seed=0)
