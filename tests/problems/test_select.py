import pytest
from torch import nn

from bdlkit.problems.select import select_parameters


def net():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 3))


def test_all_and_last_layer():
    assert len(select_parameters(net(), "all")) == 6
    assert select_parameters(net(), "last_layer") == ["3.weight", "3.bias"]


def test_by_name_prefix_and_pattern():
    assert select_parameters(net(), ["0"]) == ["0.weight", "0.bias"]
    assert select_parameters(net(), ["*.weight"]) == ["0.weight", "1.weight", "3.weight"]


def test_by_module_type_and_callable():
    assert select_parameters(net(), (nn.Conv2d, nn.Linear)) == [
        "0.weight",
        "0.bias",
        "3.weight",
        "3.bias",
    ]
    assert select_parameters(net(), lambda n, p: p.ndim > 1) == ["0.weight", "3.weight"]


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="match no parameter"):
        select_parameters(net(), ["head"])
    with pytest.raises(ValueError, match="selects no parameter"):
        select_parameters(net(), nn.LSTM)
    with pytest.raises(ValueError, match="must be"):
        select_parameters(net(), 3)
