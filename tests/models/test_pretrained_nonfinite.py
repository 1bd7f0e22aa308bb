"""Issue 45, smaller item: a pretrained file holding NaN or inf is refused when loaded,
naming the tensors (a run started from it stopped with "step size probably too large")."""

import pytest
import torch
from safetensors.torch import save_file

from bdlkit.core.errors import InputError
from bdlkit.models.mlp import MLP
from bdlkit.models.pretrained import load_weights


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_pretrained_weights_are_refused_naming_the_tensors(tmp_path, bad):
    net = MLP(4, 2, hidden=(3,))
    state = {k: v.clone() for k, v in net.state_dict().items()}
    state["net.2.bias"][1] = bad
    save_file(state, str(tmp_path / "w.safetensors"))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(InputError, match=r"w.safetensors holds NaN or infinite values in 1 "
                                         r"tensor\(s\) \(\['net.2.bias'\]\): these weights "
                                         r"cannot start a run"):
        load_weights(net, tmp_path / "w.safetensors")
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())  # untouched
