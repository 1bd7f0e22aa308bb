"""Issue 45, smaller items: a user network with integer outputs and NaN ``--pretrained``
weights are one line naming what is wrong (they were an "internal error" traceback and a
"step size probably too large" stop)."""


import pytest
import torch
from safetensors.torch import save_file

import bdlkit
from bdlkit.cli import main
from bdlkit.core.errors import InputError
from bdlkit.models import MLP
from cli_helpers import importable_package

INT_NET = '''
import torch
from torch import nn


class IntNet(nn.Module):
    """Rounds its logits to integers: no likelihood can use them."""

    def __init__(self, input_shape, out_features):
        super().__init__()
        self.linear = nn.Linear(int(torch.tensor(input_shape).prod()), out_features)

    def forward(self, x):
        return self.linear(x.flatten(1)).round().long()
'''


@pytest.fixture
def int_net(tmp_path, monkeypatch):
    """``intpkg.net:IntNet`` importable from tmp_path."""
    for module in importable_package(tmp_path, monkeypatch, "intpkg", INT_NET):
        yield f"{module}:IntNet"


def _one_line(rc: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def test_integer_network_outputs_are_refused_naming_the_network_and_dtype(int_net, tmp_path,
                                                                          capsys):
    net = bdlkit.models.build_model(int_net, input_shape=(4,), out_features=3)
    model = bdlkit.BayesianModel(net, "categorical", num_data=10)
    with pytest.raises(InputError, match="the network IntNet returns torch.int64 outputs"):
        model.validate_data((torch.randn(10, 4), torch.randint(0, 3, (10,))))
    rc = main(["fit", "--method", "map", "--model", int_net, "--data", "digits", "--steps",
               "2", "--out", str(tmp_path / "r"), "--no-progress"])
    line = _one_line(rc, capsys.readouterr().err)
    assert "the network IntNet returns torch.int64 outputs" in line and "floats" in line


def test_nan_pretrained_weights_are_refused_when_loaded(tmp_path, capsys):
    torch.manual_seed(0)
    state = dict(MLP(64, 10, hidden=(100,)).state_dict())
    state["net.0.weight"] = state["net.0.weight"].clone()
    state["net.0.weight"][3, 5] = float("nan")
    path = tmp_path / "w.safetensors"
    save_file(state, str(path))
    rc = main(["fit", "--method", "sgld", "--data", "digits", "--pretrained", str(path),
               "--steps", "2", "--out", str(tmp_path / "r"), "--no-progress"])
    line = _one_line(rc, capsys.readouterr().err)
    assert "holds NaN or infinite values in 1 tensor(s) (['net.0.weight'])" in line
    assert "step size" not in line
