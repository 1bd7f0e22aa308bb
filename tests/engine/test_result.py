"""Result.save / bdlkit.load round-trips without pickle; corrupt files fail clearly."""

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit.core.serialization import CorruptFileError


def target():
    return bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=2)


def test_target_samples_round_trip_without_the_problem(tmp_path):
    res = bdlkit.infer(target(), "sgld", steps=200, seed=0)
    res.save(tmp_path / "run")
    back = bdlkit.load(tmp_path / "run")
    assert torch.equal(back.sample(100), res.sample(100))
    assert back.history == res.history and back.method == "sgld"
    with pytest.raises(ValueError, match="pass problem="):
        _ = back.params


def test_state_round_trips_with_the_problem(tmp_path):
    t = target()
    res = bdlkit.infer(t, "map", steps=50, lr=0.1)
    res.save(tmp_path)
    back = bdlkit.load(tmp_path, problem=t)
    assert torch.equal(back.params, res.params)
    assert back.state.step == 50
    assert torch.equal(back.state.opt_state.nu, res.state.opt_state.nu)


def classifier():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    return bdlkit.BayesianModel(net, "categorical", num_data=40)


def test_model_predictions_survive_save_and_load(tmp_path):
    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    res = bdlkit.infer(classifier(), "sgld", data=(x, y), steps=40, seed=1, batch_size=10)
    res.save(tmp_path)
    back = bdlkit.load(tmp_path, problem=classifier())
    assert torch.equal(back.predict(x), res.predict(x))
    assert torch.equal(back.state.rng_state, res.state.rng_state)


def test_corrupt_files_give_clear_errors(tmp_path):
    t = target()
    bdlkit.infer(t, "sgld", steps=20).save(tmp_path)
    (tmp_path / "state.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CorruptFileError, match="truncated or corrupt"):
        bdlkit.load(tmp_path, problem=t)
    (tmp_path / "result.json").write_text("{not json")
    with pytest.raises(CorruptFileError, match="not valid JSON"):
        bdlkit.load(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        bdlkit.load(tmp_path / "missing")


def test_loading_a_state_into_another_method_is_refused(tmp_path):
    t = target()
    bdlkit.infer(t, "sgld", steps=20).save(tmp_path)
    meta = (tmp_path / "result.json").read_text().replace('"method": "sgld"', '"method": "map"')
    (tmp_path / "result.json").write_text(meta)
    with pytest.raises(CorruptFileError, match="does not match this algorithm"):
        bdlkit.load(tmp_path, problem=t)


def test_gaussian_bma_variance_is_exact_and_keeps_precision():
    """Mixture variance = mean noise variance + spread of the means (law of total variance)."""
    torch.manual_seed(0)
    net = nn.Linear(2, 1)
    with torch.no_grad():
        net.bias.fill_(1e4)  # large means: the naive E[m^2] - E[m]^2 loses everything in float32
    lik = bdlkit.problems.Gaussian(noise=0.1)
    model = bdlkit.BayesianModel(net, lik, prior=1.0, num_data=10)
    x = torch.randn(5, 2)
    draws = {"weight": torch.randn(4, 1, 2), "bias": 1e4 + torch.randn(4, 1)}
    res = bdlkit.Result(model, None, None, draws, [], {"method": "sgld", "kind": "sampler"})
    pred = res.predict(x)
    means = torch.stack([x @ draws["weight"][s].T + draws["bias"][s] for s in range(4)])[..., 0]
    assert pred.mean.shape == (5,)
    assert torch.allclose(pred.mean, means.mean(0))
    assert torch.allclose(pred.var, 0.01 + means.var(0, correction=0), rtol=1e-3)


def test_saving_a_point_estimate_over_a_sampler_run_leaves_no_stale_samples(tmp_path):
    t = target()
    bdlkit.infer(t, "sgld", steps=20).save(tmp_path)
    bdlkit.infer(t, "map", steps=20).save(tmp_path)
    back = bdlkit.load(tmp_path, problem=t)
    assert back.kind == "optimizer" and back.samples is None


def test_save_json_writes_strict_json_with_nulls(tmp_path):
    import json

    from bdlkit.core.serialization import save_json

    save_json(tmp_path / "m.json", {"a": float("nan"), "b": [float("inf"), 1.0],
                                    "c": torch.tensor(float("nan"))})
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": None, "b": [None, 1.0],
                                                             "c": None}


def test_sigma_summary_of_a_diagonal_vi_result_and_none_otherwise():
    import warnings

    x, y = torch.randn(40, 4), torch.randint(0, 3, (40,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a 5-step run: sigma has not moved (and says so)
        res = bdlkit.infer(classifier(), "advi", data=(x, y), steps=5, seed=0, batch_size=10)
        full = bdlkit.infer(target(), "gsm", steps=5, seed=0)  # full covariance
    rows = res.sigma_summary()
    assert [r["tensor"] for r in rows] == ["0.weight", "0.bias", "2.weight", "2.bias", "all"]
    assert rows[-1]["size"] == 4 * 8 + 8 + 8 * 3 + 3
    assert all(r["q10"] <= r["median"] <= r["q90"] for r in rows)
    assert full.sigma_summary() is None
    assert bdlkit.infer(target(), "map", steps=5).sigma_summary() is None


def test_vi_draws_follow_the_runs_seed():
    """The VI draws of sample() and of the BMA come from the run's seed, not a fixed one."""
    res = bdlkit.infer(target(), "advi", steps=30, seed=4)
    again = bdlkit.Result(res.problem, res.algorithm, res.state, None, [], dict(res.config))
    other = bdlkit.Result(res.problem, res.algorithm, res.state, None, [],
                          {**res.config, "seed": 5})
    assert torch.equal(res.sample(8), again.sample(8))  # deterministic given the seed
    assert not torch.equal(res.sample(8), other.sample(8))  # same q, another seed
    streamed = torch.stack(list(res.iter_draws(num_samples=8, chunk=8)))
    assert torch.equal(streamed, res.sample(8))  # the predictive averages the same draws
    assert torch.equal(res.sample(8, generator=3), res.sample(8, generator=3))
