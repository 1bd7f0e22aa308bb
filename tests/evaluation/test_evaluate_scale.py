"""Evaluation at scale: fewer draws (``max_draws``), fewer test rows (``max_test``), all
corruption cells in one pass per draw, and a progress report that covers every pass."""

import pytest
import torch
from torch import nn

import bdlkit
from bdlkit import data, metrics
from bdlkit.core.draws import ApproximationDraws, KeptDraws, MemberDraws, PointDraws, evenly_spaced
from bdlkit.data.corruptions import corrupt_dataset
from bdlkit.evaluation import evaluate
from bdlkit.evaluation.plan import first_test_rows
from bdlkit.evaluation.predictive import bma, bma_over_inputs
from bdlkit.evaluation.shift import cells, corruption_metrics, severity_means


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def _network(num_data):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    return bdlkit.BayesianModel(net, "categorical", num_data=num_data)


@pytest.fixture(scope="module")
def sampler_run(digits):
    return bdlkit.infer(_network(digits.num_train), "sgld", data=(digits.x_train, digits.y_train),
                        steps=60, seed=0, batch_size=128, burnin=20, thin=2)


class Recorder:
    """A Progress that remembers its plan and every update."""

    def __init__(self):
        self.plan, self.updates = None, []

    def start(self, plan):
        self.plan = plan

    def update(self, n):
        self.updates.append(n)


def test_evenly_spaced_ends_at_the_last_draw_and_thins_evenly():
    assert evenly_spaced(100, 20) == list(range(4, 100, 5))
    assert evenly_spaced(7, 7) == list(range(7))
    assert evenly_spaced(10, 1) == [9]
    picked = evenly_spaced(10, 3)
    assert picked[-1] == 9 and len(set(picked)) == 3
    with pytest.raises(ValueError, match="cannot pick"):
        evenly_spaced(3, 4)


def test_kept_draws_stream_a_thinned_subset_and_count_it():
    kept = KeptDraws({"w": torch.arange(10.0)[:, None]})
    g = torch.Generator()
    streamed = torch.cat([d["w"] for d in kept.stream(32, g, max_draws=4)])
    assert streamed.tolist() == [2.0, 4.0, 7.0, 9.0] == [float(i) for i in evenly_spaced(10, 4)]
    assert kept.stream_count(32, 4) == 4 and kept.stream_count(32) == 10
    assert len(list(kept.stream(32, g))) == 10  # no cap: every draw, num_samples unused
    with pytest.raises(ValueError, match="max_draws must be >= 1"):
        kept.stream_count(32, 0)


def test_every_source_streams_as_many_draws_as_it_counts():
    g = torch.Generator().manual_seed(0)
    q = type("Q", (), {"sample": lambda self, n, gen: {"w": torch.randn(n, 2, generator=gen)}})()
    sources = [KeptDraws({"w": torch.randn(9, 2)}), MemberDraws({"w": torch.randn(5, 2)}),
               ApproximationDraws(q), PointDraws({"w": torch.zeros(2)})]
    for source in sources:
        for max_draws in (None, 1, 3, 50):
            count = source.stream_count(8, max_draws)
            assert len(list(source.stream(8, g, 4, max_draws))) == count, (source, max_draws)
    members = MemberDraws({"w": torch.arange(5.0)[:, None]})
    assert [float(d["w"]) for d in members.stream(8, g, max_draws=2)] == [0.0, 1.0]
    assert ApproximationDraws(q).stream_count(8, 3) == 3


def test_a_sampler_run_evaluates_on_fewer_draws(sampler_run, digits):
    kept = sampler_run.num_kept
    assert kept == 20
    full = sampler_run.predictive(digits.x_test)
    fewer = sampler_run.predictive(digits.x_test, max_draws=5)
    assert full.num_samples == kept and fewer.num_samples == 5
    picked = [d for i, d in enumerate(sampler_run.iter_draws()) if i in evenly_spaced(kept, 5)]
    by_hand = bma(sampler_run.problem, picked, digits.x_test)
    assert torch.equal(fewer.log_probs, by_hand.log_probs)


def test_bma_over_inputs_equals_one_bma_per_set(sampler_run, digits):
    xs = [digits.x_test[:100], digits.x_test[100:350], digits.x_test[:7]]
    together = bma_over_inputs(sampler_run.problem, sampler_run.iter_draws(), xs, chunk_size=64)
    for x, pred in zip(xs, together, strict=True):
        alone = bma(sampler_run.problem, sampler_run.iter_draws(), x, chunk_size=64)
        assert torch.equal(pred.log_probs, alone.log_probs)
        assert torch.equal(pred.expected_entropy, alone.expected_entropy)
    with pytest.raises(ValueError, match="one label entry per set"):
        bma_over_inputs(sampler_run.problem, sampler_run.iter_draws(), xs, [None])


def _per_cell(result, ds):
    """The old path: one corrupted copy and one BMA over the draws per cell."""
    out = {}
    for name, severity in cells():
        shifted = corrupt_dataset(ds, name, severity, seed=severity)
        pred = result.predictive(shifted.x_test)
        values = metrics.classification_metrics(pred.probs, shifted.y_test, pred.log_probs)
        out.setdefault(name, {})[str(severity)] = {k: values[k] for k in ("accuracy", "nll",
                                                                          "ece")}
    return out


@pytest.mark.parametrize("memory_bytes", [1 << 30, 1])  # all cells at once; one per pass
def test_batched_corruptions_equal_the_per_cell_path(sampler_run, digits, memory_bytes):
    ds = first_test_rows(digits, 120)
    updates = []
    batched = corruption_metrics(sampler_run, ds, progress=updates.append,
                                 memory_bytes=memory_bytes)
    old = _per_cell(sampler_run, ds)
    assert set(batched) == set(old) | {"mean"}
    for name, by_severity in old.items():
        for severity, values in by_severity.items():
            for key, value in values.items():
                assert batched[name][severity][key] == pytest.approx(value, abs=1e-6)
    assert sum(updates) == 30 * 120 * sampler_run.num_kept
    assert len(updates) == sampler_run.num_kept * (1 if memory_bytes > 1 else 30)
    means = severity_means(batched)
    assert list(means) == ["1", "2", "3", "4", "5"]
    assert means["5"]["accuracy"] == pytest.approx(
        sum(batched[n]["5"]["accuracy"] for n in old) / 6)


def test_progress_covers_every_pass_of_an_evaluation(sampler_run, digits):
    seen = Recorder()
    ev = evaluate(sampler_run, digits, ood=digits, corruptions=True, max_draws=4, max_test=50,
                  progress=seen)
    names = [p.name for p in seen.plan.passes]
    assert names == ["test", "ood", "corruptions", "probe"]
    assert sum(seen.updates) == seen.plan.total == 4 * 50 * (1 + 1 + 30) + 20 * 50
    assert ev.metrics["num_draws"] == 4 and ev.metrics["num_test"] == 50
    assert ev.metrics["diagnostics"]["chain_draws"] == 20  # the chain: every kept draw
    assert "4 draws × 50 rows" in seen.plan.describe()


def test_a_tqdm_like_bar_gets_the_plans_total(sampler_run, digits):
    class Bar:
        total = None

        def __init__(self):
            self.n = 0

        def update(self, n):
            self.n += n

    bar = Bar()
    evaluate(sampler_run, digits, max_test=30, diagnostics=False, progress=bar)
    assert bar.total == bar.n == 20 * 30


def test_max_test_cuts_the_reference_and_the_ood_set_too(sampler_run, digits):
    ref = sampler_run.predict(digits.x_test)
    ev = evaluate(sampler_run, digits, reference=ref, ood=digits, max_test=40,
                  diagnostics=False)
    assert ev.metrics["reference_rows"] == 40 and ev.metrics["agreement"] == 1.0
    assert ev.metrics["ood_aupr_base_rate"] == 0.5
    with pytest.raises(ValueError, match="max_test must be >= 1"):
        evaluate(sampler_run, digits, max_test=0)


def test_evaluation_health_is_the_failed_checks(sampler_run, digits):
    ev = bdlkit.evaluate(sampler_run, digits, diagnostics=False)
    assert ev.health == ev.metrics["health"]
    assert isinstance(ev.health, dict)
    ev.metrics["health"] = {"rhat": "not mixed"}
    assert ev.health == {"rhat": "not mixed"}
    ev.metrics.pop("health")
    assert ev.health == {}


def test_a_multi_chain_target_streams_each_chains_draw_like_take():
    """A Target's store holds (chains, d) per kept step: the stream flattens them
    draw-major, so it yields ``count`` single draws and thins over all of them."""
    target = bdlkit.Target(lambda th: -0.5 * (th**2).sum(-1), dim=2)
    result = bdlkit.infer(target, "sgld", steps=40, chains=3, burnin=20, thin=1, seed=0)
    kept = result.draws
    assert kept.count == 60 and result.num_streamed() == 60
    streamed = torch.stack(list(result.iter_draws()))
    assert streamed.shape == (60, 2) and torch.equal(streamed, kept.take(60))
    thinned = torch.stack(list(result.iter_draws(max_draws=5)))
    assert result.num_streamed(max_draws=5) == 5
    assert torch.equal(thinned, kept.take(60)[evenly_spaced(60, 5)])
