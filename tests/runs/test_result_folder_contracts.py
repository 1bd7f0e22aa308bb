"""Issue 45, smaller items: ``bdlkit.load(folder, problem=...)`` refuses a problem other
than the one the result was fit on (another prior or activation with the same shapes
loaded silently), and a result folder of another format version says it was written by
a newer or older bdlkit."""

import json

import pytest
import torch

import bdlkit
from bdlkit.core.errors import CorruptFileError, InputError
from bdlkit.models import MLP


def model(activation="relu", prior=1.0):
    torch.manual_seed(0)
    return bdlkit.BayesianModel(MLP(8, 3, hidden=(5,), activation=activation), "categorical",
                                prior=prior, num_data=40)


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(1)
    x, y = torch.randn(40, 8), torch.randint(0, 3, (40,))
    bdlkit.infer(model(), "map", data=(x, y), steps=3, seed=0, progress=False).save(tmp_path)
    return tmp_path


def test_loading_with_another_prior_or_activation_is_refused_naming_the_field(saved):
    assert bdlkit.load(saved, problem=model()).predict(torch.ones(2, 8)).shape == (2, 3)
    with pytest.raises(InputError, match=r"was fit on another problem: prior=IsotropicGaussian"
                                         r"\(scale=1.0, mean=0\) in the saved result, "
                                         r"prior=IsotropicGaussian\(scale=0.1, mean=0\) in the "
                                         r"problem passed; pass the problem it was fit on"):
        bdlkit.load(saved, problem=model(prior=0.1))
    with pytest.raises(InputError, match=r"was fit on another network: '\(1\): ReLU\(\)' in the "
                                         r"saved result, '\(1\): Tanh\(\)' in the problem's "
                                         r"module"):
        bdlkit.load(saved, problem=model(activation="tanh"))
    target = bdlkit.Target(lambda t: -(t**2).sum(-1), dim=3)
    with pytest.raises(InputError, match="another problem"):
        bdlkit.load(saved, problem=target)
    assert bdlkit.load(saved).method == "map"  # without a problem nothing is compared


def _set_format(folder, value):
    meta = json.loads((folder / "result.json").read_text())
    if value is None:
        del meta["format"]
    else:
        meta["format"] = value
    (folder / "result.json").write_text(json.dumps(meta))


def test_a_result_of_another_format_names_the_bdlkit_version_that_wrote_it(saved):
    _set_format(saved, 2)
    with pytest.raises(CorruptFileError, match=r"written by a newer bdlkit \(result format 2; "
                                               r"this bdlkit reads format 1\): upgrade bdlkit"):
        bdlkit.load(saved)
    _set_format(saved, 0)
    with pytest.raises(CorruptFileError, match=r"written by an older bdlkit \(result format 0; "
                                               r"this bdlkit reads format 1\)"):
        bdlkit.load(saved)
    _set_format(saved, None)
    with pytest.raises(CorruptFileError, match="not a bdlkit result .it records no format"):
        bdlkit.load(saved)


def test_a_result_saved_before_the_contract_loads_unchecked(saved):
    meta = json.loads((saved / "result.json").read_text())
    del meta["contract"]
    (saved / "result.json").write_text(json.dumps(meta))
    back = bdlkit.load(saved, problem=model(prior=0.1))  # nothing recorded to compare
    assert back.predict(torch.ones(2, 8)).shape == (2, 3)
