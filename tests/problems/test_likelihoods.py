"""One likelihood vocabulary: a name means the same in ``BayesianModel(likelihood=...)``,
``bdlkit fit --likelihood`` and a YAML config (issue 43, own data 1 and 2)."""

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit.problems.likelihoods import NAMES, Gaussian, make_likelihood, name_of
from bdlkit.runs import likelihood_choice
from bdlkit.runs.config import RunConfig

SPECS = {"categorical": "classification", "bernoulli": "classification",
         "gaussian": "regression", "gaussian:0.25": "regression",
         "heteroscedastic": "regression"}


def test_every_name_is_documented_in_one_table():
    assert set(NAMES) == {*SPECS} - {"gaussian:0.25"} | {"gaussian:<sigma>"}
    assert likelihood_choice.CHOICES == ("auto", *NAMES)


@pytest.mark.parametrize("spec", SPECS)
def test_python_cli_and_yaml_build_the_same_likelihood(spec):
    python = bdlkit.BayesianModel(nn.Linear(3, 2), likelihood=spec, num_data=10).likelihood
    cfg = RunConfig.from_dict({"method": "map", "likelihood": spec}, "exp.yaml")
    cli = likelihood_choice.build(cfg.likelihood, SPECS[spec])
    assert repr(python) == repr(cli) and name_of(python) == name_of(cli) == spec
    assert python.init_params(torch.float64).keys() == cli.init_params(torch.float64).keys()


def test_gaussian_learns_its_sigma_in_python_as_on_the_command_line():
    model = bdlkit.BayesianModel(nn.Linear(3, 1), likelihood="gaussian", num_data=10)
    assert model.likelihood.learn_noise and "likelihood.log_noise" in model.init_params()
    fixed = make_likelihood("gaussian:1")
    assert not fixed.learn_noise and fixed.noise == 1.0 and fixed.init_params(torch.float32) == {}


def test_heteroscedastic_by_name_predicts_a_sigma_per_target():
    model = bdlkit.BayesianModel(nn.Linear(3, 2), likelihood="heteroscedastic", num_data=10)
    assert isinstance(model.likelihood, Gaussian) and model.likelihood.heteroscedastic
    pred = model.likelihood.predictive(torch.tensor([[0.5, -2.0]]), {})
    assert pred.mean.tolist() == [0.5] and 0 < float(pred.var[0]) < 1


@pytest.mark.parametrize("spec, needle", [
    ("studentt", "categorical, bernoulli, gaussian, gaussian:<sigma>, heteroscedastic"),
    ("gaussian:0", "finite number > 0"), (" Gaussian ", None),
])
def test_a_bad_name_in_python_lists_the_names_and_what_they_mean(spec, needle):
    if needle is None:
        assert make_likelihood(spec).learn_noise
        return
    with pytest.raises(ValueError, match=needle) as err:
        bdlkit.BayesianModel(nn.Linear(3, 2), likelihood=spec, num_data=10)
    assert needle.startswith("finite") or "σ learned with the weights" in str(err.value)
