"""``infer(..., device=...)``: the model, ``init`` and every batch on the requested device.

No GPU here: the ``meta`` device (shapes without values) shows where tensors end up, a
spy shows what ``infer`` asks for, and one test runs on CUDA where there is one."""

import importlib

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import bdlkit
from bdlkit.engine.batches import Batches
from bdlkit.runs.config import ConfigValueError


def _model(n=40, meta=False):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    model = bdlkit.BayesianModel(net, "categorical", prior=bdlkit.problems.priors.IsotropicGaussian(
        1.0, mean="init"), num_data=n)
    return model.to("meta") if meta else model


def _data(n=40):
    gen = torch.Generator().manual_seed(1)
    return torch.randn(n, 4, generator=gen), torch.randint(0, 3, (n,), generator=gen)


def test_to_moves_module_initial_values_and_prior_means():
    model = _model(meta=True)
    assert model.device.type == "meta"
    assert all(p.device.type == "meta" for p in model.module.parameters())
    assert all(v.device.type == "meta" for v in model.init_params().values())
    assert all(v.device.type == "meta" for v in model.prior.means.values())
    assert model.forward(model.init_params(), torch.empty(2, 4, device="meta")).shape == (2, 3)


@pytest.mark.parametrize("batch_size", [16, 40])  # minibatches and the full batch
def test_tensor_batches_follow_the_model_to_its_device(batch_size):
    x, y = _data()
    batches = Batches(_model(meta=True), (x, y), batch_size, seed=0)
    bx, by = batches(3)
    assert bx.device.type == by.device.type == "meta"
    assert bx.shape == (min(batch_size, 40), 4)


def test_dataloader_batches_are_moved_as_they_are_drawn():
    loader = DataLoader(TensorDataset(*_data()), batch_size=16)
    batches = Batches(_model(meta=True), loader, 16, seed=0)
    for t in range(4):  # across an epoch boundary (3 batches per epoch)
        bx, by = batches(t)
        assert bx.device.type == by.device.type == "meta"


def test_on_the_data_device_the_batches_are_the_data_itself():
    x, y = _data()
    bx, by = Batches(_model(), (x, y), 40, seed=0)(0)
    assert bx is x and by is y  # no copy


def test_infer_moves_problem_and_init_and_trains_on_the_batches_it_moved(monkeypatch):
    model, (x, y) = _model(), _data()
    moved, seen = [], []
    to = bdlkit.BayesianModel.to
    monkeypatch.setattr(bdlkit.BayesianModel, "to",
                        lambda self, d: (moved.append(torch.device(d)), to(self, d))[1])
    step = bdlkit.algorithms.point.map.MAP.step
    monkeypatch.setattr(bdlkit.algorithms.point.map.MAP, "step",
                        lambda self, s, b: (seen.append(b[0].device), step(self, s, b))[1])
    loader = DataLoader(TensorDataset(x, y), batch_size=20)
    init = model.init_params()
    res = bdlkit.infer(model, "map", data=loader, steps=4, lr=1e-2, device="cpu", init=init)
    assert moved == [torch.device("cpu")]
    assert seen == [model.device] * 4
    assert all(v.device == model.device for v in res.state.params.values())


def test_without_device_the_model_stays_where_it_is(monkeypatch):
    model, data = _model(), _data()
    monkeypatch.setattr(bdlkit.BayesianModel, "to", lambda *a: pytest.fail("moved"))
    bdlkit.infer(model, "map", data=data, steps=2)


@pytest.mark.parametrize("device, message", [
    ("meta", "meta tensors hold no values"),
    ("tpu", "not a torch device"),
    ("cuda:7" if torch.cuda.is_available() else "cuda", "GPU"),
])
def test_an_unusable_device_is_refused_before_anything_runs(device, message):
    model = _model()
    with pytest.raises(ConfigValueError, match=message):
        bdlkit.infer(model, "map", data=_data(), steps=2, device=device)
    assert model.device.type == "cpu"


def test_a_target_runs_on_the_cpu_only_through_device():
    target = bdlkit.Target(lambda t: -0.5 * (t**2).sum(-1), dim=2)
    assert bdlkit.infer(target, "map", steps=2, device="cpu").state is not None
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="log_prob"):
            bdlkit.infer(target, "map", steps=2, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cpu_model_and_cpu_dataloader_train_on_cuda():
    model, (x, y) = _model(), _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=20)
    res = bdlkit.infer(model, "sgld", data=loader, steps=20, lr=1e-2, device="cuda")
    assert model.device.type == "cuda"
    probs = res.predict(x.cuda())
    assert probs.device.type == "cuda" and torch.isfinite(probs).all()


@pytest.mark.parametrize("built_on_device", [False, True])
def test_a_learned_noise_parameter_follows_the_network(built_on_device):
    """The likelihood's log σ (one per channel here) lives with the weights, also in
    ``random_init`` (ensemble members) and when the module was built on the device."""
    net = nn.Linear(4, 2).to("meta" if built_on_device else "cpu")
    lik = bdlkit.problems.likelihoods.Gaussian([1.0, 2.0], learn_noise=True, channels=2)
    model = bdlkit.BayesianModel(net, lik, num_data=10)
    if not built_on_device:
        model.to("meta")
    for params in (model.init_params(), model.random_init(torch.Generator())):
        assert {v.device.type for v in params.values()} == {"meta"}, params.keys()


def test_a_misspelt_method_or_option_moves_nothing(monkeypatch):
    moved = []
    placement = importlib.import_module("bdlkit.engine.placement")  # infer imports it per call
    monkeypatch.setattr(placement, "place", lambda *args: moved.append(args) or args[:2])
    with pytest.raises(ValueError, match="did you mean"):
        bdlkit.infer(_model(), "sgdl", data=_data(), steps=2, device="cpu")
    with pytest.raises(ValueError, match="lr"):
        bdlkit.infer(_model(), "sgld", data=_data(), steps=2, device="cpu", lrr=0.1)
    assert moved == []
