"""MC dropout: MAP at rate 0, masks at their rate, the predictive over masks, resume, intervals,
ArviZ, and the refusals of a model it cannot drop units of."""

from __future__ import annotations

import dataclasses
import math
import types

import pytest
import torch
from torch import nn

from bdlkit import infer, models
from bdlkit.algorithms import map as map_
from bdlkit.algorithms import mc_dropout
from bdlkit.core.errors import InputError
from bdlkit.engine.callbacks import CallbackError, Hooks
from bdlkit.engine.runner import Runner
from bdlkit.evaluation.predictive import bma
from bdlkit.families.dropout import BernoulliDropout, Site, apply_scales, column_scales
from bdlkit.problems import BayesianModel, Target
from bdlkit.problems.priors import IsotropicGaussian


def data(n=64, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g, dtype=dtype)
    y = torch.sin(x.sum(1)) + 0.1 * torch.randn(n, generator=g, dtype=dtype)
    return x, y


def problem(dropout=0.2, dtype=torch.float64, likelihood="gaussian", **kw):
    torch.manual_seed(0)
    net = models.MLP(3, 1, hidden=(16,), dropout=dropout).to(dtype)
    return BayesianModel(net, likelihood, **{"prior": 1.0, "num_data": 64, **kw})


def test_rate_zero_takes_maps_steps_bit_for_bit():
    model, (x, y) = problem(), data()
    a, b = map_.build(model, lr=1e-2), mc_dropout.build(model, lr=1e-2, rate=0.0)
    sa, sb = a.init(generator=torch.Generator()), b.init(generator=torch.Generator())
    for i in range(20):
        batch = (x[i % 4 * 16:(i % 4 + 1) * 16], y[i % 4 * 16:(i % 4 + 1) * 16])
        sa, _ = a.step(sa, batch)
        sb, _ = b.step(sb, batch)
    for k, v in a.params(sa).items():
        assert torch.equal(v, b.params(sb)[k]), k
    assert not torch.equal(a.params(sa)["net.1.weight"], model.init_params()["net.1.weight"])


def test_rate_zero_run_predicts_as_map():
    x, y = data()
    runs = [infer(problem(), m, data=(x, y), steps=30, seed=0, batch_size=16, lr=1e-2,
                  progress=False, **kw) for m, kw in (("map", {}), ("mc_dropout", {"rate": 0.0}))]
    maps, drop = (r.predictive(x, num_samples=8) for r in runs)
    torch.testing.assert_close(drop.mean, maps.mean, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(drop.var, maps.var, rtol=1e-9, atol=1e-9)


def test_sites_are_the_linear_layers_the_dropout_layers_feed():
    alg = mc_dropout.build(problem(dropout=0.2))
    assert alg.sites == (Site("net.1.weight", 0.2, "net.0"), Site("net.4.weight", 0.2, "net.3"))
    assert mc_dropout.build(problem(dropout=0.2), rate=0.05).sites[0].rate == 0.05
    plain = mc_dropout.build(problem(dropout=0.0), rate=0.1)  # every Linear's inputs
    assert plain.sites == (Site("net.0.weight", 0.1), Site("net.2.weight", 0.1))


def _plain_twin(layered):
    """The same network and weights without dropout layers (parameter names shift)."""
    torch.manual_seed(0)
    net = models.MLP(3, 1, hidden=(16,)).to(torch.float64)
    rename = {"net.1.": "net.0.", "net.4.": "net.2."}
    net.load_state_dict({next((k.replace(a, b) for a, b in rename.items() if a in k), k): v
                         for k, v in layered.module.state_dict().items()})
    return BayesianModel(net, layered.likelihood, prior=layered.prior.scale,
                         num_data=layered.num_data, temperature=layered.temperature)


def _sgd_gradients(model, seeds, **kw):
    """−update of one SGD step (lr 1, no momentum) from the initial weights, per mask seed."""
    alg = mc_dropout.build(model, lr=1.0, optimizer="sgd", momentum=0.0, **kw)
    start = alg.init(generator=torch.Generator().manual_seed(0))
    batch = data(n=16)
    return torch.stack([torch.cat([(start.params[k] - new.params[k]).reshape(-1)
                                   for k in start.params])
                        for new, _ in (alg.step(dataclasses.replace(start, mask_seed=s), batch)
                                       for s in seeds)])


def test_dropout_layers_and_a_rate_at_every_linear_take_the_same_steps():
    layered = problem(dropout=0.3)
    a = _sgd_gradients(layered, range(5))
    b = _sgd_gradients(_plain_twin(layered), range(5), rate=0.3)
    assert torch.equal(a, b)  # the same per-example masks, from layers or from pre-hooks
    assert not torch.equal(a[0], a[1])


@pytest.mark.parametrize("options", [
    {}, {"temperature": 0.5, "prior": IsotropicGaussian(1.0, mean="init"), "oracle": "module"}])
def test_training_masks_estimate_the_gradient_of_the_predictive_family(options):
    """The per-example training step, prior in expectation over masks included, is unbiased
    for E_z of the gradient at W = M·diag(z)/(1 − p), the draws a result predicts with: its
    mean over 600 mask seeds agrees with 600 weight-space masks' (chain rule, prior at W)
    within 5 standard errors; leaving out the prior's expectation fails by 11 SEs."""
    model = problem(dropout=0.3, **options)
    alg = mc_dropout.build(model, lr=1.0, optimizer="sgd", momentum=0.0)
    mean = alg.init(generator=torch.Generator().manual_seed(0)).params
    batch, n_eff = data(n=16), model.effective_num_data
    g = torch.Generator().manual_seed(1)
    weight_space = []
    for _ in range(600):
        scales = column_scales(mean, alg.sites, g)
        _, score = model.value_and_score(apply_scales(mean, scales), batch)
        weight_space.append(torch.cat([(-s * scales.get(k, 1.0) / n_eff).reshape(-1)
                                       for k, s in score.items()]))
    b = torch.stack(weight_space)
    a = _sgd_gradients(model, range(600))
    se = (a.var(0) / len(a) + b.var(0) / len(b)).sqrt()
    assert ((a.mean(0) - b.mean(0)).abs() <= 5 * se + 1e-12).all()
    assert a.var(0).sum() < b.var(0).sum()  # per-example masks: the smaller variance


def test_each_step_draws_new_masks():
    x, y = data(n=16)
    for model, kw in ((problem(dropout=0.3), {}), (problem(dropout=0.0), {"rate": 0.3})):
        alg = mc_dropout.build(model, lr=1.0, optimizer="sgd", momentum=0.0, **kw)
        start = alg.init(generator=torch.Generator().manual_seed(0))
        moves = [alg.step(dataclasses.replace(start, step=t), (x, y))[0].params for t in (0, 1)]
        assert not all(torch.equal(moves[0][k], moves[1][k]) for k in moves[0])
        again = alg.step(dataclasses.replace(start, step=1), (x, y))[0].params
        assert all(torch.equal(moves[1][k], again[k]) for k in again)  # and the same on replay


def test_masks_drop_columns_at_the_rate_and_keep_the_mean():
    """Each column is zeroed with probability p (a binomial count within 4.5 SDs) and the
    kept ones are scaled by 1/(1-p), so the draws average to M (a CLT bound)."""
    torch.manual_seed(1)
    m = {"w": torch.randn(5, 40, dtype=torch.float64), "b": torch.randn(5, dtype=torch.float64)}
    p, n = 0.3, 400
    draws = BernoulliDropout(m, (Site("w", p),)).sample(n, torch.Generator().manual_seed(0))
    dropped = (draws["w"] == 0).all(dim=1)  # (n, 40): whole columns
    assert ((draws["w"] == 0) == dropped[:, None, :]).all()
    count, total = int(dropped.sum()), dropped.numel()
    assert abs(count - p * total) < 4.5 * math.sqrt(total * p * (1 - p))
    kept = draws["w"][~dropped[:, None, :].expand_as(draws["w"])]
    scaled = m["w"].expand(n, -1, -1)[~dropped[:, None, :].expand_as(draws["w"])] / (1 - p)
    torch.testing.assert_close(kept, scaled)
    se = m["w"].abs() * math.sqrt(p / (1 - p) / n)
    assert ((draws["w"].mean(0) - m["w"]).abs() <= 4.5 * se + 1e-12).all()
    assert torch.equal(draws["b"], m["b"].expand(n, -1))


def test_the_predictive_averages_the_masked_networks():
    x, y = data()
    result = infer(problem(), "mc_dropout", data=(x, y), steps=40, seed=0, batch_size=16,
                   lr=1e-2, progress=False)
    draws = result.sample(16, generator=3)
    one_by_one = [result.problem.predictive({k: v[i] for k, v in draws.items()}, x).mean
                  for i in range(16)]
    mixture = bma(result.problem, ({k: v[i] for k, v in draws.items()} for i in range(16)), x)
    torch.testing.assert_close(mixture.mean, torch.stack(one_by_one).mean(0))
    distinct = {tuple(d.flatten().tolist()[:5]) for d in one_by_one}
    assert len(distinct) > 8  # different masks give different networks
    spread = result.predictive(x, num_samples=64).var
    no_masks = result.problem.predictive(result.params, x).var
    assert (spread > no_masks.reshape(spread.shape)).float().mean() > 0.9


class _StopAt(Hooks):
    def on_log(self, event):
        if event.step == 20:
            raise OSError("stopped")


def test_resume_is_bit_exact(tmp_path):
    x, y = data()

    def runner(run_dir, callbacks=None):
        algorithm = mc_dropout.build(problem(), lr=1e-2)
        return Runner(algorithm, (x, y), steps=40, seed=3, batch_size=16, run_dir=run_dir,
                      log_every=5, checkpoint_every=10, callbacks=callbacks)

    straight = runner(tmp_path / "full").fit()
    with pytest.raises(CallbackError):
        runner(tmp_path / "cut", [_StopAt()]).fit()
    resumed = runner(tmp_path / "cut").fit(resume=True)
    for k, v in straight.params.items():
        assert torch.equal(v, resumed.params[k]), k
    assert straight.state.mask_seed == resumed.state.mask_seed  # the mask stream
    a, b = straight.sample(4, generator=0), resumed.sample(4, generator=0)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_intervals_and_arviz():
    x, y = data()
    result = infer(problem(), "mc_dropout", data=(x, y), steps=40, seed=0, batch_size=16,
                   lr=1e-2, progress=False)
    lo, hi = result.intervals(x[:10], level=0.9, num_samples=32)
    assert (lo < hi).all()
    idata = result.to_arviz(x[:10], num_samples=20)
    weight = idata.posterior["net.1.weight"]
    assert weight.sizes["draw"] * weight.sizes["chain"] == 20
    assert float((weight == 0).all("net.1.weight_dim_0").mean()) > 0.05  # dropped columns


def _with_layer_rates(p):
    model = problem(dropout=0.1)
    for layer in model.module.modules():
        if isinstance(layer, nn.Dropout):
            layer.p = p
    return model


@pytest.mark.parametrize("build, match", [
    (lambda: mc_dropout.build(problem(dropout=0.0)), "no dropout layers"),
    (lambda: mc_dropout.build(problem(dropout=0.0), rate=0.0), "no dropout layers"),
    (lambda: mc_dropout.build(problem(dropout=0.1), rate=1.0), r"in \[0, 1\)"),
    (lambda: mc_dropout.build(problem(dropout=0.1), rate=-0.1), r"in \[0, 1\)"),
    (lambda: mc_dropout.build(Target(lambda t: -(t ** 2).sum(-1), dim=2)), "BayesianModel"),
    (lambda: mc_dropout.build(problem(dropout=0.1, buffers="batch_stats")), "buffers='frozen'"),
    (lambda: mc_dropout.build(_with_layer_rates(0.0)), "p = 0"),
    (lambda: mc_dropout.build(_with_layer_rates(1.0)), r"p = 1.0, outside \[0, 1\)"),
])
def test_refuses_what_it_cannot_drop(build, match):
    with pytest.raises(InputError, match=match):
        build()


def test_refuses_a_dropout_that_does_not_feed_a_linear_layer():
    net = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.1), nn.ReLU(), nn.Linear(8, 1))
    model = BayesianModel(net, "gaussian", prior=1.0, num_data=10)
    with pytest.raises(InputError, match="feeds 2, not a single Linear layer"):
        mc_dropout.build(model)


def test_only_random_weights_carry_masks():
    torch.manual_seed(0)
    net = models.MLP(3, 1, hidden=(8,), dropout=0.1)
    model = BayesianModel(net, "gaussian", prior=1.0, num_data=10, bayesian="last_layer")
    assert [s.weight for s in mc_dropout.build(model).sites] == ["net.4.weight"]


class _FakeShard:
    """A data-parallel reducer of one rank that sums nothing (each call sees its own rows)."""

    def __init__(self, rank):
        self.topology = types.SimpleNamespace(data_rank=rank)

    def __call__(self, value, score, rows):
        return value, score


def test_each_data_parallel_shard_draws_its_own_masks():
    grads = []
    for rank in (None, 0, 1):
        model = problem(dropout=0.3)
        model.reducer = None if rank is None else _FakeShard(rank)
        grads.append(_sgd_gradients(model, [7]))
    assert not torch.equal(grads[1], grads[2])  # row j of two shards: different masks
    assert not torch.equal(grads[0], grads[1])
