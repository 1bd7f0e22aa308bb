"""The data-parallel combination of shard estimates equals the whole-batch estimate
(another rank is simulated by its all-reduce parts; real ranks: tests/distributed)."""

from __future__ import annotations

import pytest
import torch

import bdlkit.problems.data_parallel as data_parallel
from bdlkit.core.distributed import Topology
from bdlkit.models.mlp import MLP
from bdlkit.problems import BayesianModel


def _model() -> tuple[BayesianModel, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = BayesianModel(MLP(4, 3, hidden=(5,)).double(), "categorical", num_data=50)
    x = torch.randn(10, 4, dtype=torch.float64)
    return model, x, torch.randint(0, 3, (10,))


@pytest.mark.parametrize("cut", [7, 5, 10])  # uneven shards, even shards, an empty one
def test_two_shards_combine_to_the_whole_batch_estimate(cut, monkeypatch):
    model, x, y = _model()
    params = model.init_params()
    whole_value, whole_score = model.value_and_score(params, (x, y))
    model.shard_over(Topology(world=2, rank=0))
    sent = []
    monkeypatch.setattr(data_parallel, "all_reduce_sum", lambda parts, group: (
        sent.append(parts), parts)[1])
    model.value_and_score(params, (x[cut:], y[cut:]))  # the other rank: its parts
    other = sent[0]
    def summed(parts, group):  # the two ranks' buckets must line up part by part
        assert [(p.dtype, p.shape) for p in parts] == [(p.dtype, p.shape) for p in other]
        return [a + b for a, b in zip(parts, other, strict=True)]

    monkeypatch.setattr(data_parallel, "all_reduce_sum", summed)
    value, score = model.value_and_score(params, (x[:cut], y[:cut]))
    torch.testing.assert_close(value, whole_value, rtol=1e-12, atol=1e-12)
    for k in whole_score:
        torch.testing.assert_close(score[k], whole_score[k], rtol=1e-12, atol=1e-12)
    assert torch.isfinite(other[0]).all()  # an empty shard sends zeros, not 0/0
    model.shard_over(Topology())  # one rank: the plain oracle again
    assert model.reducer is None


def test_a_single_rank_topology_has_no_reducer():
    with pytest.raises(ValueError, match="several data-parallel ranks"):
        data_parallel.ShardReducer(Topology())
