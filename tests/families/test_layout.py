"""A layout puts a chosen group of named tensors first and maps both ways exactly."""

import pytest
import torch

from bdlkit.families.layout import Layout


def test_flatten_and_unflatten_are_inverse_and_keep_the_problems_order():
    point = {"a.weight": torch.arange(6.0).reshape(2, 3), "a.bias": torch.tensor([7.0, 8.0]),
             "b.weight": torch.tensor([[9.0]]), "lik.scale": torch.tensor(10.0)}
    layout = Layout.of(point, first=["b.weight"])
    assert layout.names[0] == "b.weight" and layout.features == 10
    assert layout.size_of(["b.weight", "a.bias"]) == 3
    vector = layout.flatten(point, batch=0)
    assert vector[0] == 9.0 and vector.tolist()[1:] == [0, 1, 2, 3, 4, 5, 7, 8, 10]
    back = layout.unflatten(vector)
    assert list(back) == list(point)  # the problem's order, not the vector's
    assert all(torch.equal(back[k], point[k]) for k in point)
    stacked = {k: torch.stack([v, -v]) for k, v in point.items()}
    draws = layout.flatten(stacked)
    assert draws.shape == (2, 10) and torch.equal(draws[1], -vector)
    assert torch.equal(layout.unflatten(draws)["a.weight"][1], -point["a.weight"])
    with pytest.raises(ValueError, match=r"\['c'\] are not among the parameters"):
        Layout.of(point, first=["c"])
