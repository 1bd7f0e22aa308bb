"""Issue 45, item 5: the prediction boundary's shape and dtype contract. A Result records
the per-example shape and dtype of its training inputs (also in result.json) and every
method that takes inputs refuses others with one line naming both; the zoo MLP refuses
inputs it would regroup into other rows."""

import pytest
import torch

import bdlkit
from bdlkit.core.errors import InputError
from bdlkit.models import MLP


def fitted(likelihood="categorical", out=3):
    """A 3-step MAP fit of an MLP on 40 examples of shape (8,), in float32."""
    torch.manual_seed(0)
    x = torch.randn(40, 8)
    y = torch.randint(0, 3, (40,)) if likelihood == "categorical" else torch.randn(40, 1)
    model = bdlkit.BayesianModel(MLP(8, out, hidden=(5,)), likelihood, num_data=40)
    return bdlkit.infer(model, "map", data=(x, y), steps=3, seed=0, progress=False)


def test_item5_predict_refuses_another_per_example_shape_instead_of_regrouping_rows():
    result = fitted()
    assert result.predict(torch.randn(10, 8)).shape == (10, 3)
    # before: (10, 4) came back as (5, 3) and (4, 16) as (8, 3), without a word
    for bad in (torch.randn(10, 4), torch.randn(4, 16), torch.randn(10, 2, 4), torch.randn(8)):
        with pytest.raises(InputError, match=r"Result.predict: x has shape .* fit on examples "
                                             r"of shape \(8,\): pass x of shape \(n, 8\)"):
            result.predict(bad)
    with pytest.raises(InputError, match=r"Result.predictive: x has shape \(10, 4\)"):
        result.predictive(torch.randn(10, 4))
    with pytest.raises(InputError, match=r"Result.predict: x has shape \(10, 4\)"):
        result.predict(torch.randn(10, 4), return_samples=True)


def test_item5_predict_refuses_another_dtype_with_the_conversion():
    result = fitted()
    with pytest.raises(InputError, match=r"x is torch.float64, but the model was fit on "
                                         r"torch.float32 inputs: convert them with "
                                         r"x.to\(torch.float32\)"):
        result.predict(torch.randn(10, 8, dtype=torch.float64))
    with pytest.raises(InputError, match="x is torch.int64"):
        result.predict(torch.zeros(10, 8, dtype=torch.long))


def test_item5_intervals_forecast_and_to_arviz_check_their_inputs_too():
    result = fitted("gaussian", out=1)
    lower, upper = result.intervals(torch.randn(6, 8))
    assert lower.shape == upper.shape == (6,)
    with pytest.raises(InputError, match=r"Result.intervals: x has shape \(6, 4\)"):
        result.intervals(torch.randn(6, 4))
    with pytest.raises(InputError, match=r"Result.forecast: x has shape \(6, 4\)"):
        result.forecast(torch.randn(6, 4))
    pytest.importorskip("arviz")
    with pytest.raises(InputError, match=r"Result.to_arviz: x has shape \(6, 4\)"):
        bdlkit.infer(result.problem, "sgld", data=(torch.randn(40, 8), torch.randn(40, 1)),
                     steps=4, seed=0, progress=False).to_arviz(x=torch.randn(6, 4))


def test_item5_a_saved_result_keeps_its_input_contract(tmp_path):
    result = fitted()
    result.save(tmp_path)
    fresh = bdlkit.BayesianModel(MLP(8, 3, hidden=(5,)), "categorical", num_data=40)
    back = bdlkit.load(tmp_path, problem=fresh)  # fresh never saw data: the file says (8,)
    assert torch.allclose(back.predict(torch.ones(2, 8)), result.predict(torch.ones(2, 8)))
    with pytest.raises(InputError, match=r"fit on examples of shape \(8,\)"):
        back.predict(torch.randn(10, 4))


def test_item5_the_zoo_mlp_refuses_inputs_it_would_regroup_into_other_rows():
    net = MLP(8, 3, hidden=(5,))
    assert net(torch.randn(4, 8)).shape == (4, 3)
    assert net(torch.randn(8)).shape == (1, 3)  # one example
    with pytest.raises(ValueError, match=r"MLP takes examples of shape \(8,\) \(8 values each\), "
                                         r"got x of shape \(10, 4\) \(4 values per example\)"):
        net(torch.randn(10, 4))
    with pytest.raises(ValueError, match=r"got x of shape \(16,\)"):
        net(torch.randn(16))
    images = MLP((1, 2, 2), 3, hidden=(5,))
    assert images(torch.randn(5, 1, 2, 2)).shape == images(torch.randn(5, 4)).shape == (5, 3)
    scalar = MLP(1, 2, hidden=(5,))
    assert scalar(torch.randn(6)).shape == (6, 2)  # n scalar examples, as before


def test_item5_a_loaded_run_directory_refuses_digits_of_another_width(tmp_path):
    from bdlkit.cli import main

    out = tmp_path / "run"
    assert main(["fit", "--method", "map", "--data", "digits", "--steps", "2", "--out",
                 str(out), "--no-progress"]) == 0
    result = bdlkit.load(out)
    x = bdlkit.data.load("digits").x_test[:540]
    assert result.predict(x).shape == (540, 10)
    # before: (270, 10) and (200, 10), without a word
    for bad in (x.reshape(540, 2, 32)[:, 0], torch.cat([x[:100], x[:100]], 1)):
        with pytest.raises(InputError, match=r"fit on examples of shape \(64,\)"):
            result.predict(bad)
