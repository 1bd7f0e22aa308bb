"""What a data-parallel runner refuses before any collective (one process: the refusals
come from the constructor; the collectives themselves are tested in tests/distributed)."""

from __future__ import annotations

import pytest
import torch

from bdlkit.algorithms import get_method
from bdlkit.core.distributed import Topology
from bdlkit.engine.runner import Runner
from bdlkit.models.mlp import MLP
from bdlkit.problems import BayesianModel

TWO = Topology(world=2, rank=0)


def _model(**kwargs) -> tuple[BayesianModel, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = BayesianModel(MLP(3, 2, hidden=(4,)), "categorical", num_data=20, **kwargs)
    return model, (torch.randn(20, 3), torch.randint(0, 2, (20,)))


@pytest.mark.parametrize("method", ["nuts", "fisher_vi"])
def test_methods_that_differentiate_the_density_themselves_are_refused(method):
    pytest.importorskip("pyro") if method == "nuts" else None
    model, data = _model()
    algorithm = get_method(method).build(model)
    assert algorithm.data_parallel is False
    with pytest.raises(ValueError, match="past the all-reduce"):
        Runner(algorithm, data, steps=2, topology=TWO)


def test_batch_statistics_and_compile_are_refused():
    model, data = _model(buffers="batch_stats")
    with pytest.raises(ValueError, match="batch_stats"):
        Runner(get_method("sgld").build(model), data, steps=2, topology=TWO)
    model, data = _model()
    with pytest.raises(ValueError, match="compile=True"):
        Runner(get_method("sgld").build(model), data, steps=2, topology=TWO, compile=True)


def test_the_step_minibatch_is_per_rank_times_ranks_and_the_oracle_is_left_alone():
    model, data = _model()
    runner = Runner(get_method("sgld").build(model), data, steps=2, batch_size=4, topology=TWO)
    assert (runner.batch_size, runner.minibatch_rows) == (4, 8)
    assert "batch_size=8," in runner.fingerprint()["data"]
    assert model.reducer is None  # only while fit() runs
    alone = Runner(get_method("sgld").build(model), data, steps=2, batch_size=8)
    assert alone.fingerprint()["data"] == runner.fingerprint()["data"]
