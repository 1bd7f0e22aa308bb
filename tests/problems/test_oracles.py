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


@pytest.mark.parametrize("kw", [{}, {"temperature": 0.3},
                                {"prior": bdlkit.problems.IsotropicGaussian(0.5, mean="init")},
                                {"bayesian": "last_layer"}, {"precision": "bf16"}])
def test_the_flat_module_oracle_equals_the_functional_oracle(kw):
    """FlatModuleOracle (flat storage's oracle) gives the functional oracle's value and
    flattened score, and leaves the module's parameters as they were."""
    from bdlkit.core.flat import FlatLayout, FlatProblem

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    args = {"prior": 0.7, **kw}
    model = bdlkit.BayesianModel(net, "categorical", num_data=50, **args)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    params = {k: v + 0.1 * torch.randn_like(v) for k, v in model.init_params().items()}
    layout = FlatLayout.of(params)
    flat = FlatProblem(model, layout)
    assert flat.oracle is not None
    x, y = torch.randn(8, 4, dtype=torch.float64), torch.randint(0, 3, (8,))
    value, score = model.value_and_score(params, (x, y))
    fvalue, fscore = flat.value_and_score(layout.flatten(params), (x, y))
    tol = 1e-2 if kw.get("precision") else 1e-10
    torch.testing.assert_close(fvalue, value, atol=tol, rtol=tol)
    torch.testing.assert_close(fscore, layout.flatten(score), atol=tol, rtol=tol)
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_the_flat_module_oracle_is_not_used_where_it_does_not_apply():
    from bdlkit.core.flat import FlatLayout, FlatProblem

    net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 1)).double()
    for model in (bdlkit.BayesianModel(net, "gaussian:1", num_data=20, buffers="batch_stats"),
                  bdlkit.BayesianModel(net, Gaussian(learn_noise=True), num_data=20)):
        params = model.init_params()
        flat = FlatProblem(model, FlatLayout.of(params))
        assert flat.oracle is None
        x, y = torch.randn(8, 4, dtype=torch.float64), torch.randn(8, 1, dtype=torch.float64)
        value, score = model.value_and_score(params, (x, y))
        fvalue, fscore = flat.value_and_score(FlatLayout.of(params).flatten(params), (x, y))
        torch.testing.assert_close(fvalue, value)
        torch.testing.assert_close(fscore, FlatLayout.of(params).flatten(score))


def test_the_flat_module_oracle_edge_cases():
    """Unused parameters get zero scores; a partial prior-mean dict; the module is restored
    when the network raises; oracle="module" and subclasses keep their own oracle."""
    from bdlkit.core.flat import FlatLayout, FlatProblem

    class WithSpare(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.spare = nn.Parameter(torch.ones(2))

        def forward(self, x):
            return self.fc(x)

    torch.manual_seed(0)
    net = WithSpare().double()
    mean = {"fc.bias": torch.full((3,), 0.5, dtype=torch.float64)}
    prior = bdlkit.problems.IsotropicGaussian(0.7, mean=mean)
    model = bdlkit.BayesianModel(net, "categorical", prior=prior, num_data=30)
    params = {k: v + 0.1 for k, v in model.init_params().items()}
    layout = FlatLayout.of(params)
    flat = FlatProblem(model, layout)
    x, y = torch.randn(5, 4, dtype=torch.float64), torch.randint(0, 3, (5,))
    value, score = model.value_and_score(params, (x, y))
    fvalue, fscore = flat.value_and_score(layout.flatten(params), (x, y))
    torch.testing.assert_close(fvalue, value)
    torch.testing.assert_close(fscore, layout.flatten(score))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(RuntimeError):
        flat.value_and_score(layout.flatten(params), (torch.randn(5, 7, dtype=torch.float64), y))
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())
    module_model = bdlkit.BayesianModel(net, "categorical", num_data=30, oracle="module")
    assert FlatProblem(module_model, layout).oracle is None

    class Custom(bdlkit.BayesianModel):
        def log_prior(self, params):
            return super().log_prior(params) * 2

    assert FlatProblem(Custom(net, "categorical", num_data=30), layout).oracle is None
