"""The functional and the module oracle give the same value and score."""

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit.problems import Gaussian


def make(oracle: str, net: nn.Module, likelihood="categorical", **kw):
    return bdlkit.BayesianModel(net, likelihood, prior=0.7, num_data=50, oracle=oracle, **kw)


def compare(net_fn, likelihood, batch, **kw):
    torch.manual_seed(0)
    net_a = net_fn().double()
    net_b = net_fn().double()
    net_b.load_state_dict(net_a.state_dict())
    fa, fb = make("functional", net_a, likelihood, **kw), make("module", net_b, likelihood, **kw)
    params = {k: v + 0.1 * torch.randn_like(v) for k, v in fa.init_params().items()}
    va, sa = fa.value_and_score(params, batch)
    vb, sb = fb.value_and_score(params, batch)
    assert torch.allclose(va, vb, atol=1e-10)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.allclose(sa[k], sb[k], atol=1e-10), k
    return net_b


def mlp():
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))


def test_parity_categorical_mlp():
    batch = (torch.randn(10, 4, dtype=torch.float64), torch.randint(0, 3, (10,)))
    compare(mlp, "categorical", batch)


def test_parity_learned_noise_and_last_layer():
    net = lambda: nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))  # noqa: E731
    batch = (torch.randn(10, 4, dtype=torch.float64), torch.randn(10, 1, dtype=torch.float64))
    compare(net, Gaussian(0.3, learn_noise=True), batch, bayesian="last_layer")


@pytest.mark.parametrize("buffers", ["frozen", "batch_stats"])
def test_parity_batchnorm_and_buffers_unchanged(buffers):
    net = lambda: nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))  # noqa: E731
    batch = (torch.randn(10, 4, dtype=torch.float64), torch.randint(0, 3, (10,)))
    net_b = compare(net, "categorical", batch, buffers=buffers)
    bn = net_b[1]
    assert torch.equal(bn.running_mean, torch.zeros(8, dtype=torch.float64))
    assert int(bn.num_batches_tracked) == 0
    assert all(p.grad is None for p in net_b.parameters())
