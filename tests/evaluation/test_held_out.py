"""``bdlkit.evaluate`` takes its data as ``bdlkit.infer`` does: a Dataset, an ``(x, y)``
pair or a DataLoader, each scoring the same rows the same way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import bdlkit
from bdlkit.core.errors import InputError
from bdlkit.evaluation.held_out import held_out


@pytest.fixture(scope="module")
def fitted():
    data = bdlkit.data.load("digits")
    torch.manual_seed(0)
    net = bdlkit.models.MLP(data.input_shape, data.num_classes, hidden=(16,))
    model = bdlkit.BayesianModel(net, "categorical", num_data=data.num_train)
    return data, bdlkit.infer(model, "map", data=data, steps=60, progress=False)


def test_a_pair_a_loader_and_a_dataset_give_the_same_metrics(fitted):
    data, result = fitted
    x, y = data.x_test, data.y_test
    by_dataset = bdlkit.evaluate(result, data, diagnostics=False).metrics
    by_pair = bdlkit.evaluate(result, (x, y), diagnostics=False).metrics
    loader = DataLoader(TensorDataset(x, y), batch_size=100)
    by_loader = bdlkit.evaluate(result, loader, diagnostics=False).metrics
    by_numpy = bdlkit.evaluate(result, (x.numpy(), y.numpy().astype(np.int32)),
                               diagnostics=False).metrics
    for metrics in (by_pair, by_loader, by_numpy):
        for key in ("accuracy", "nll", "ece"):
            assert metrics[key] == pytest.approx(by_dataset[key], rel=1e-6)
        assert metrics["num_test"] == len(y)


def test_the_model_task_says_how_targets_are_read():
    x = torch.zeros(4, 2)
    assert held_out((x, torch.tensor([0.0, 1, 2, 1])), "classification").y_test.dtype == \
        torch.int64
    regression = held_out((x, torch.tensor([0, 1, 2, 1])), "regression")
    assert regression.y_test.dtype == torch.float32 and regression.num_train == 0


@pytest.mark.parametrize("bad", [torch.zeros(3, 2), (torch.zeros(3, 2),), "digits"])
def test_anything_else_is_refused_naming_what_evaluate_takes(bad):
    with pytest.raises(InputError, match=r"Dataset, an \(x, y\) pair or a DataLoader"):
        held_out(bad, "classification")
