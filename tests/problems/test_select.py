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


def test_groups_the_module_declares():
    """Koopa's parameter_groups: a group alone, in a list with names, and a bad name."""
    from bdlkit.models import Koopa

    net = Koopa(16, 8, 2, [0], dynamic_dim=4, hidden_dim=6, num_blocks=2)
    assert select_parameters(net, "operators") == ["operators.0", "operators.1"]
    assert select_parameters(net, "last_block") == ["operators.1"]
    head = select_parameters(net, "head")
    assert head == ["dec_inv.3.weight", "dec_inv.3.bias", "dec_var.3.weight", "dec_var.3.bias",
                    "operators.0", "operators.1"]
    assert select_parameters(net, ["last_block", "enc_inv.0.bias"]) == ["enc_inv.0.bias",
                                                                       "operators.1"]
    with pytest.raises(ValueError, match="match no parameter"):
        select_parameters(net, ["head", "nope"])
