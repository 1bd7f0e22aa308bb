"""Streaming BMA against a naive stacked average; bounded memory over a disk store."""

import math
import subprocess
import sys

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit.evaluation.predictive import ClassificationBMA, RegressionBMA, bma


def _classifier(seed=0, d=5, k=4):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(d, 8), nn.Tanh(), nn.Linear(8, k)).double()
    model = bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=10)
    g = torch.Generator().manual_seed(seed)
    base = model.init_params(g)
    draws = [{n: p + 0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype)
              for n, p in base.items()} for _ in range(7)]
    x = torch.randn(13, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, k, (13,), generator=g)
    return model, draws, x, y


@pytest.mark.parametrize("chunk_size", [1, 5, 1024])
def test_classification_bma_matches_the_naive_average(chunk_size):
    model, draws, x, y = _classifier()
    out = bma(model, iter(draws), x, y, chunk_size=chunk_size)
    probs = torch.stack([model.predictive(t, x) for t in draws])  # (S, n, K)
    assert isinstance(out, ClassificationBMA) and out.num_samples == 7
    assert torch.allclose(out.probs, probs.mean(0), atol=1e-12)
    mean_p = probs.mean(0)
    entropy = -(mean_p * mean_p.log()).sum(-1)
    per_draw = -(probs * probs.log()).sum(-1).mean(0)
    assert torch.allclose(out.entropy, entropy, atol=1e-12)
    assert torch.allclose(out.mutual_information, entropy - per_draw, atol=1e-12)
    acc = [(p.argmax(-1) == y).double().mean().item() for p in probs]
    nll = [-p.log().gather(1, y[:, None]).mean().item() for p in probs]
    assert out.sample_accuracy == pytest.approx(acc) and out.sample_nll == pytest.approx(nll)


def test_log_space_survives_underflow():
    """Probabilities that underflow in float32 still give a finite BMA log probability."""
    model, draws, x, _ = _classifier()
    big = [{k: 200 * v for k, v in d.items()} for d in draws]
    out = bma(model, iter(big), x)
    assert torch.isfinite(out.log_probs).all()
    lp = torch.stack([model.log_predictive(t, x) for t in big])
    assert torch.allclose(out.log_probs, torch.logsumexp(lp, 0) - math.log(len(big)))


def test_single_draw_is_that_draws_predictive():
    model, draws, x, _ = _classifier()
    out = bma(model, iter(draws[:1]), x)
    assert torch.allclose(out.probs, model.predictive(draws[0], x))
    assert torch.allclose(out.mutual_information, torch.zeros(len(x), dtype=torch.float64))


def test_regression_mixture_moments_and_density():
    torch.manual_seed(0)
    net = nn.Linear(3, 1).double()
    model = bdlkit.BayesianModel(net, bdlkit.problems.Gaussian(noise=0.3), prior=1.0,
                                 num_data=10)
    g = torch.Generator().manual_seed(1)
    draws = [{n: torch.randn(p.shape, generator=g, dtype=p.dtype) for n, p in
              model.init_params(g).items()} for _ in range(5)]
    x = torch.randn(9, 3, generator=g, dtype=torch.float64)
    y = torch.randn(9, generator=g, dtype=torch.float64)
    out = bma(model, iter(draws), x, y, chunk_size=4)
    means = torch.stack([model.predictive(t, x).mean for t in draws])
    assert isinstance(out, RegressionBMA)
    assert torch.allclose(out.mean, means.mean(0))
    assert torch.allclose(out.var, 0.09 + means.var(0, correction=0))
    dens = torch.stack([torch.distributions.Normal(m, 0.3).log_prob(y) for m in means])
    assert torch.allclose(out.log_density, torch.logsumexp(dens, 0) - math.log(5))


def test_no_draws_and_bad_input():
    model, draws, x, y = _classifier()
    with pytest.raises(ValueError, match="no draws"):
        bma(model, iter([]), x)
    with pytest.raises(ValueError, match="rows"):
        bma(model, iter(draws), x, y[:3])


MEMORY_SCRIPT = r"""
import resource, sys, torch, bdlkit
from torch import nn
from bdlkit.engine.collect import DiskStore
from bdlkit.evaluation.predictive import bma
store = DiskStore.open(sys.argv[1])
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(100, 900), nn.ReLU(), nn.Linear(900, 10))
model = bdlkit.BayesianModel(net, "categorical", prior=1.0, num_data=10)
x = torch.randn(10_000, 100)
draws = (dict(zip(c, (v[s] for v in c.values()))) for c in store.iter_chunks()
         for s in range(next(iter(c.values())).shape[0]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = bma(model, draws, x, chunk_size=1000)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(out.num_samples, (after - before) * 1024)
"""


@pytest.mark.slow
def test_bma_over_200_draws_of_a_100k_model_on_10k_points_runs_in_bounded_memory(tmp_path):
    """Streaming from a disk store: the peak memory growth stays far below the
    S x n x K = 200 x 10 000 x 10 float32 = 80 MB that stacking predictions would need
    (and below the 80 MB the draws themselves take)."""
    from bdlkit.engine.collect import DiskStore

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(100, 900), nn.ReLU(), nn.Linear(900, 10))
    params = dict(net.named_parameters())
    assert 99_000 < sum(p.numel() for p in params.values()) < 101_000
    store = DiskStore(tmp_path / "s", shard_size=10)
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        store.append({k: v.detach() + 0.01 * torch.randn(v.shape, generator=g)
                      for k, v in params.items()})
    store.flush()
    done = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(tmp_path / "s")],
                          capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    count, growth = map(int, done.stdout.split())
    full = 200 * 10_000 * 10 * 4
    assert count == 200
    assert growth < full / 4, f"peak memory grew by {growth / 2**20:.1f} MiB"


def test_regression_mixture_cdf_gives_interval_coverage():
    from bdlkit.metrics import regression_metrics

    torch.manual_seed(0)
    net = nn.Linear(2, 1).double()
    model = bdlkit.BayesianModel(net, bdlkit.problems.Gaussian(noise=0.5), prior=1.0,
                                 num_data=10)
    g = torch.Generator().manual_seed(2)
    draws = [{n: torch.randn(p.shape, generator=g, dtype=p.dtype) for n, p in
              model.init_params(g).items()} for _ in range(6)]
    x = torch.randn(40, 2, generator=g, dtype=torch.float64)
    y = torch.randn(40, generator=g, dtype=torch.float64)
    out = bma(model, iter(draws), x, y)
    means = torch.stack([model.predictive(t, x).mean for t in draws])
    cdf = torch.distributions.Normal(means, 0.5).cdf(y).mean(0)
    assert torch.allclose(out.cdf, cdf)
    values = regression_metrics(out.predictive, y, log_density=out.log_density, cdf=out.cdf)
    assert values["coverage_90"] == ((cdf >= 0.05) & (cdf <= 0.95)).double().mean().item()


def test_bernoulli_predict_returns_p_of_one():
    torch.manual_seed(0)
    net = nn.Linear(3, 1).double()
    model = bdlkit.BayesianModel(net, "bernoulli", prior=1.0, num_data=10)
    x = torch.randn(7, 3, dtype=torch.float64)
    res = bdlkit.Result(model, None, None, {k: v[None] for k, v in
                                           model.init_params(torch.Generator()).items()},
                        [], {"method": "sgld", "kind": "sampler"})
    p = res.predict(x)
    assert p.shape == (7,)
    assert torch.allclose(p, model.predictive(model.init_params(torch.Generator()), x))
