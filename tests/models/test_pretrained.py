"""Pretrained weights from a safetensors file: loaded, checked, and the run's prior
centred at them (``bdlkit fit --pretrained W.safetensors``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from bdlkit.core.errors import InputError
from bdlkit.models.mlp import MLP
from bdlkit.models.pretrained import load_weights
from bdlkit.runs import directory
from bdlkit.runs.config import RunConfig


def _weights(tmp_path: Path, **changes) -> tuple[Path, dict[str, torch.Tensor]]:
    torch.manual_seed(3)
    state = {k: v.clone() for k, v in MLP(64, 10, hidden=(100,)).state_dict().items()}
    state.update(changes)
    path = tmp_path / "w.safetensors"
    save_file(state, str(path))
    return path, state


def test_weights_are_copied_and_missing_ones_reported(tmp_path: Path):
    path, state = _weights(tmp_path)
    partial = {k: v for k, v in state.items() if not k.startswith("net.2")}
    save_file(partial, str(tmp_path / "p.safetensors"))
    net = MLP(64, 10, hidden=(100,))
    with pytest.warns(UserWarning, match=r"does not hold 2 of the network's tensors"):
        loaded = load_weights(net, tmp_path / "p.safetensors")
    assert sorted(loaded) == sorted(partial)
    assert all(torch.equal(net.state_dict()[k], v) for k, v in partial.items())
    save_file({}, str(tmp_path / "empty.safetensors"))
    with pytest.raises(InputError, match="no tensors"):
        load_weights(net, tmp_path / "empty.safetensors")


@pytest.mark.parametrize("bad, match", [
    ({"extra.weight": torch.zeros(2)}, "does not have"),
    ({"net.0.weight": torch.zeros(3, 3)}, "shapes differ"),
])
def test_other_networks_weights_are_refused(tmp_path: Path, bad, match):
    path, _ = _weights(tmp_path, **bad)
    with pytest.raises(InputError, match=match):
        load_weights(MLP(64, 10, hidden=(100,)), path)


def test_pickles_are_refused_with_the_conversion(tmp_path: Path):
    with pytest.raises(InputError, match="safetensors.*save_file"):
        load_weights(MLP(2, 2), tmp_path / "w.pt")


def test_a_run_starts_at_the_weights_and_centres_its_prior_there(tmp_path: Path):
    path, state = _weights(tmp_path)
    cfg = RunConfig(method="map", model="mlp", data="digits", pretrained=str(path),
                    model_kwargs={"hidden": [100]})
    problem = directory.build_problem(cfg, directory.load_dataset(cfg))
    init = problem.init_params()
    for k, v in state.items():
        assert torch.equal(init[k], v) and torch.equal(problem.prior.means[k], v)
    head = {k: v for k, v in state.items() if not k.startswith("net.2")}  # a new head:
    save_file(head, str(tmp_path / "body.safetensors"))  # prior mean 0 there (BayesDLL)
    cfg = RunConfig(method="map", model="mlp", data="digits", model_kwargs={"hidden": [100]},
                    pretrained=str(tmp_path / "body.safetensors"))
    with pytest.warns(UserWarning, match="new head"):
        problem = directory.build_problem(cfg, directory.load_dataset(cfg))
    assert sorted(problem.prior.means) == sorted(head)
    assert "mean=given:" in repr(problem.prior)
    plain = RunConfig(method="map", model="mlp", data="digits", model_kwargs={"hidden": [100]})
    assert directory.build_problem(plain, directory.load_dataset(plain)).prior.means == {}
