"""Pretrained weights from a user's safetensors file: where a fine-tuning run starts.

``load_weights(net, path)`` copies the tensors of ``path`` (keys: the network's
``state_dict`` names, as ``safetensors.torch.save_file(net.state_dict(), path)`` writes
them) into ``net`` and returns them. Keys the network lacks, or a tensor of another
shape, are refused with the names, and so are a file with no tensors and one holding NaN
or infinite values (a run would stop at its first step); network tensors the file lacks
(a new classification head) keep their fresh initialisation, with a warning naming them.
Nothing is unpickled: a ``.pt``/``.pth`` checkpoint is refused with the one-line
conversion.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from bdlkit.core.errors import InputError

CONVERT = ("convert it once with: python -c \"import torch, safetensors.torch as s; "
           "s.save_file(torch.load('W.pt', weights_only=True), 'W.safetensors')\"")


def load_weights(net: nn.Module, path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Copy the weights in ``path`` into ``net`` (in place); returns them, by name, as the
    network now holds them (its dtype and device)."""
    path = Path(path)
    if path.suffix in (".pt", ".pth", ".bin", ".ckpt"):
        raise InputError(f"{path}: bdlkit reads pretrained weights from .safetensors files "
                         f"only (a pickle can run code when loaded); {CONVERT}")
    if not path.is_file():
        raise InputError(f"pretrained weights {path} do not exist")
    try:
        weights = load_file(path)
    except (SafetensorError, OSError, ValueError) as err:
        raise InputError(f"{path} is not a readable safetensors file ({err})") from None
    own = net.state_dict()
    if not weights:
        raise InputError(f"{path} holds no tensors")
    unknown = sorted(set(weights) - set(own))
    if unknown:
        raise InputError(f"{path} holds tensors the network does not have: {unknown[:5]} "
                         f"(the network's names start {sorted(own)[:3]}); save the file from "
                         "the same architecture's state_dict()")
    wrong = [f"{k}: file {tuple(v.shape)}, network {tuple(own[k].shape)}"
             for k, v in weights.items() if v.shape != own[k].shape]
    if wrong:
        raise InputError(f"{path}: shapes differ from the network's: {wrong[:3]}")
    nonfinite = sorted(k for k, v in weights.items()
                       if v.is_floating_point() and not bool(torch.isfinite(v).all()))
    if nonfinite:
        raise InputError(f"{path} holds NaN or infinite values in {len(nonfinite)} tensor(s) "
                         f"({nonfinite[:5]}): these weights cannot start a run; save finite "
                         "weights (the training that wrote them diverged, or the file was "
                         "written from a broken model)")
    with torch.no_grad():
        for k, v in weights.items():
            own[k].copy_(v.to(own[k]))
    missing = sorted(set(own) - set(weights))
    if missing:
        warnings.warn(f"{path} does not hold {len(missing)} of the network's tensors, which keep "
                      f"their fresh initialisation (a new head?): {missing[:5]}", stacklevel=2)
    return {k: own[k].detach().clone() for k in weights}
