"""``--likelihood``: names, the task check, what the network outputs, ``config.yaml``, a
refused resume, and fit + evaluate + predict for every choice."""

import numpy as np
import pytest
import torch
import yaml

import bdlkit
from bdlkit.problems.likelihoods import Bernoulli, Categorical, Gaussian
from bdlkit.runs import directory as run
from bdlkit.runs import likelihood_choice as choice
from bdlkit.runs.config import ConfigValueError, RunConfig


@pytest.mark.parametrize("spec, name", [
    ("auto", "auto"), ("Bernoulli", "bernoulli"), ("gaussian:0.50", "gaussian:0.5"),
    ("gaussian:1e-3", "gaussian:0.001"), (" heteroscedastic ", "heteroscedastic"),
])
def test_names_are_normalised_as_config_yaml_keeps_them(spec, name):
    assert RunConfig(method="map", likelihood=spec).likelihood == name


@pytest.mark.parametrize("spec, message", [
    ("studentt", "must be one of auto, categorical, bernoulli, gaussian, gaussian:<sigma>"),
    ("gaussian:0", "finite number > 0"), ("gaussian:nan", "finite number > 0"),
    ("gaussian:", "finite number > 0"), (3, "must be a string"),
])
def test_bad_names_are_refused_naming_the_choices(spec, message):
    with pytest.raises(ConfigValueError, match=message) as err:
        RunConfig(method="map", likelihood=spec)
    assert err.value.option == "--likelihood"


@pytest.mark.parametrize("spec, task, valid", [
    ("gaussian", "classification", "auto, categorical, bernoulli"),
    ("gaussian:0.1", "classification", "auto, categorical, bernoulli"),
    ("categorical", "regression", "auto, gaussian, gaussian:<sigma>, heteroscedastic"),
    ("heteroscedastic", "forecasting", "auto, gaussian, gaussian:<sigma>"),
])
def test_a_likelihood_of_another_task_is_refused(spec, task, valid):
    with pytest.raises(ConfigValueError, match=f"does not fit {task} data; use one of {valid}"):
        choice.resolved(spec, task)


@pytest.mark.parametrize("spec, task, other", [("categorical", "regression", "classification"),
                                                ("gaussian", "classification", "regression")])
def test_a_likelihood_of_the_other_task_names_the_data_kwargs_that_switch_it(spec, task, other):
    """Issue 43, own data 3: a CSV of 0/1 labels read as regression, then --likelihood
    categorical: the refusal names --data-kwargs '{"task": "classification"}'."""
    switch = f"""--data-kwargs '{{"task": "{other}"}}'"""
    with pytest.raises(ConfigValueError) as err:
        choice.resolved(spec, task)
    assert switch in str(err.value) and f'task="{other}"' in str(err.value)


def test_auto_is_todays_choice_and_outputs_follow_the_likelihood():
    assert [choice.resolved("auto", t) for t in choice.BY_TASK] == ["categorical", "gaussian",
                                                                     "gaussian"]
    assert choice.output_count("auto", "classification", 10, 1) == 10
    assert choice.output_count("bernoulli", "classification", 2, 1) == 1
    assert choice.output_count("heteroscedastic", "regression", None, 3) == 6
    assert choice.output_count("gaussian:2.0", "regression", None, 3) == 3
    with pytest.raises(ConfigValueError, match="two classes.*has 10: use categorical"):
        choice.output_count("bernoulli", "classification", 10, 1)


@pytest.mark.parametrize("spec, kind, name", [
    ("auto", Categorical, "categorical"), ("bernoulli", Bernoulli, "bernoulli"),
])
def test_classification_likelihoods_round_trip_through_their_names(spec, kind, name):
    built = choice.build(spec, "classification")
    assert isinstance(built, kind) and choice.name_of(built) == name


@pytest.mark.parametrize("spec", ["gaussian", "gaussian:0.25", "heteroscedastic"])
def test_regression_likelihoods_round_trip_through_their_names(spec):
    built = choice.build(spec, "regression")
    assert isinstance(built, Gaussian) and choice.name_of(built) == spec


def test_a_forecast_learns_one_sigma_per_channel_from_its_persistence_error():
    built = choice.build("auto", "forecasting", [0.5, 2.0])
    assert built.channels == 2 and built.noise == (0.5, 2.0)
    assert choice.name_of(built) == "gaussian"


@pytest.fixture(scope="module")
def binary_file(tmp_path_factory):
    """digits 0 and 1 as a user's two-class ``.npz``."""
    ds = bdlkit.data.load("digits")
    train, test = ds.y_train < 2, ds.y_test < 2
    path = tmp_path_factory.mktemp("data") / "binary.npz"
    np.savez(path, x_train=ds.x_train[train].numpy(), y_train=ds.y_train[train].numpy(),
             x_test=ds.x_test[test].numpy(), y_test=ds.y_test[test].numpy())
    return str(path)


def _fit(tmp_path, **options):
    cfg = RunConfig(method="map", epochs=3, hyper={"lr": 1e-2}, **options)
    out = run.fit(cfg, tmp_path / "run")
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    return out, recorded, run.reevaluate(tmp_path / "run")


def test_bernoulli_on_two_classes_fits_evaluates_and_predicts(tmp_path, binary_file):
    out, recorded, again = _fit(tmp_path, data=binary_file, likelihood="bernoulli",
                                eval_every=5)
    assert recorded["likelihood"] == "bernoulli"
    assert isinstance(out.result.problem.likelihood, Bernoulli)
    assert out.metrics["accuracy"] > 0.9 and again["accuracy"] == out.metrics["accuracy"]
    assert any("eval/accuracy" in e for e in out.result.history)  # point eval: (n, 2) probs
    x = out.result.problem.module(torch.zeros(1, 64))
    assert x.shape == (1, 1)  # one logit
    p1 = out.result.predict(bdlkit.data.load(binary_file).x_test)
    assert p1.ndim == 1 and ((p1 >= 0) & (p1 <= 1)).all()


@pytest.mark.parametrize("spec", ["heteroscedastic", "gaussian:0.5", "auto"])
def test_regression_likelihoods_fit_evaluate_and_give_intervals(tmp_path, spec):
    out, recorded, again = _fit(tmp_path, data="uci/yacht", likelihood=spec)
    assert recorded["likelihood"] == ("gaussian" if spec == "auto" else spec)
    assert again["rmse"] == out.metrics["rmse"]  # evaluate reloads the run (a learned σ too)
    x = bdlkit.data.load("uci/yacht").x_test[:5]
    pred = out.result.predict(x)
    lo, hi = out.result.intervals(x, 0.9)
    assert pred.mean.shape == lo.shape == (5,) and (hi > lo).all()
    if spec == "gaussian:0.5":
        torch.testing.assert_close(pred.var, torch.full((5,), 0.25))


def test_a_resume_with_another_likelihood_is_refused_naming_it(tmp_path):
    cfg = RunConfig(method="map", data="uci/yacht", steps=20, checkpoint_every=5)
    run.fit(cfg, tmp_path / "run")
    checkpoints = sorted((tmp_path / "run" / "checkpoints").glob("*.safetensors"))
    checkpoints[-1].unlink()  # as if killed before its last checkpoint
    path = tmp_path / "run" / "config.yaml"
    path.write_text(path.read_text().replace("likelihood: gaussian\n",
                                             "likelihood: gaussian:0.5\n"))
    with pytest.raises(ValueError, match=r"likelihood=Gaussian\(noise=1.0, mode=learned\) in "
                       r"the checkpoint, likelihood=Gaussian\(noise=0.5, mode=fixed\) in this"):
        run.resume(tmp_path / "run")


def test_the_cli_records_the_likelihood_of_a_regression_csv(tmp_path):
    """Issue 20's acceptance: ``--likelihood`` on a regression CSV lands in config.yaml."""
    from bdlkit.cli import main

    gen = np.random.default_rng(0)
    x = gen.normal(size=(60, 2))
    rows = np.column_stack([x, x @ [1.0, -0.5] + 0.1 * gen.normal(size=60)])
    csv = tmp_path / "table.csv"
    np.savetxt(csv, rows, delimiter=",", header="a,b,target", comments="")
    out = tmp_path / "run"
    assert main(["fit", "--method", "map", "--data", str(csv), "--likelihood",
                 "heteroscedastic", "--precision", "bf16", "--steps", "20", "--out", str(out),
                 "--no-progress"]) == 0
    recorded = yaml.safe_load((out / "config.yaml").read_text())
    assert (recorded["likelihood"], recorded["precision"]) == ("heteroscedastic", "bf16")


def test_a_changed_precision_is_named_as_the_difference():
    from pathlib import Path

    from bdlkit.engine.resume import check_fingerprint

    saved = "BayesianModel(MLP, likelihood=Categorical(), num_data=5, bayesian=2 tensors / 9 values)"
    with pytest.raises(ValueError, match="no precision in the checkpoint, precision=bf16 in this"):
        check_fingerprint({"problem": saved}, {"problem": saved[:-1] + ", precision=bf16)"},
                          Path("ckpt"), "map")
