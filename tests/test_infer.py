"""bdlkit.infer end to end: the acceptance example, bad input, NaN handling."""

import pytest
import torch
from torch import nn

import bdlkit


def standard_normal():
    return bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=3)


def test_issue_acceptance_sgld_recovers_a_standard_normal():
    draws = bdlkit.infer(standard_normal(), method="sgld", steps=20000, seed=0).sample(2000)
    assert draws.shape == (2000, 3)
    assert (draws.mean(0).abs() < 0.1).all()
    assert ((draws.std(0) - 1).abs() < 0.1).all()


def test_sampler_defaults_burnin_thin_and_chains():
    res = bdlkit.infer(standard_normal(), "sgld", steps=4000, seed=0)
    assert res.config["chains"] == 4 and res.config["burnin"] == 2000
    assert res.config["thin"] == 2 and res.num_kept == 4 * 1000
    with pytest.raises(ValueError, match="only 4000 were kept"):
        res.sample(4001)


def test_history_is_recorded():
    res = bdlkit.infer(standard_normal(), "sgld", steps=1000, seed=0)
    assert len(res.history) == 1000 and res.history[-1]["step"] == 1000
    assert len(bdlkit.infer(standard_normal(), "sgld", steps=100, log_every=10).history) == 10
    assert {"log_prob", "lr"} <= set(res.history[0])


def test_nan_during_training_stops_with_a_clear_report():
    with pytest.raises(bdlkit.NonFiniteError, match=r"at step \d+.*lower lr"):
        bdlkit.infer(standard_normal(), "sgld", steps=2000, lr=5.0, seed=0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"steps": 10, "epochs": 1}, "exactly one of steps= or epochs="),
        ({}, "exactly one of steps= or epochs="),
        ({"epochs": 2}, "epochs= needs data"),
        ({"steps": 10, "learning_rate": 0.1}, "unknown key 'learning_rate' in the hyperparam"),
        ({"steps": 10, "burnin": 10}, "burnin must be in"),
        ({"steps": 10, "data": (torch.zeros(2), torch.zeros(2))}, "has no data"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bdlkit.infer(standard_normal(), "sgld", **kwargs)


def test_unknown_method_lists_the_valid_ones():
    from bdlkit.algorithms import METHODS

    with pytest.raises(ValueError, match="valid methods: " + ", ".join(sorted(METHODS))):
        bdlkit.infer(standard_normal(), "hamiltonian", steps=1)


def digits_model(seed=0):
    ds = bdlkit.data.load("digits")
    torch.manual_seed(seed)
    net = bdlkit.models.MLP(ds.input_shape, ds.num_classes, hidden=(32,))
    return bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=ds.num_train), ds


def test_models_train_on_a_dataset_and_predict_probabilities():
    model, ds = digits_model()
    res = bdlkit.infer(model, "sgld", data=ds, epochs=10, lr=0.5, seed=0)
    probs = res.predict(ds.x_test)
    assert probs.shape == (len(ds.x_test), 10)
    assert torch.allclose(probs.sum(1), torch.ones(len(probs)))
    assert (probs.argmax(1) == ds.y_test).float().mean() > 0.9
    assert res.config["steps"] == 10 * 10  # ceil(1257 / 128) = 10 batches per epoch


def test_model_runs_are_reproducible():
    model, ds = digits_model()
    a = bdlkit.infer(model, "sgld", data=ds, steps=30, seed=5).samples
    b = bdlkit.infer(model, "sgld", data=ds, steps=30, seed=5).samples
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_dataloader_data_is_accepted():
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    model = bdlkit.BayesianModel(net, "categorical", num_data=64)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    res = bdlkit.infer(model, "map", data=loader, epochs=2, lr=1e-2)
    assert res.config["steps"] == 8


def test_init_decides_the_number_of_chains():
    res = bdlkit.infer(standard_normal(), "sgld", steps=200, init=torch.zeros(3))
    assert res.config["chains"] is None and res.num_kept == 100
    assert res.sample(100).shape == (100, 3)
    with pytest.raises(ValueError, match="chains=2"):
        bdlkit.infer(standard_normal(), "sgld", steps=20, init=torch.zeros(3, 3), chains=2)
