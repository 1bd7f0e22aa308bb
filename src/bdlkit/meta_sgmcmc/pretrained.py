"""Meta-SGMCMC meta-parameters on disk: save, load, and the set that ships with bdlkit.

A file (:mod:`bdlkit.core.meta_files`) holds the eight tensors of the Q_f and D_f networks
(:data:`~bdlkit.meta_sgmcmc.dynamics.META_SHAPES`) and the
:class:`~bdlkit.meta_sgmcmc.dynamics.Constants` they were meta-trained with, plus provenance.

The shipped set (``pretrained/bdlkit-meta-sgmcmc.safetensors``) was produced by
``bdlkit meta-train meta-sgmcmc`` on bdlkit's offline task distribution (the one L2E's
meta-training uses); the command, seed and meta-loss curve are in
``benchmarks/results/meta-sgmcmc-meta-train/``. The authors' released networks are not
shipped (their repository has no licence).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import torch

from bdlkit.core.meta_files import (
    MetaFormat,
    Pretrained,
    load_meta_file,
    load_shipped,
    save_meta_file,
)
from bdlkit.meta_sgmcmc.dynamics import META_KEYS, Constants, MetaParams, check_meta_params

PRETRAINED_NAME = "bdlkit-meta-sgmcmc.safetensors"
FORMAT = MetaFormat("meta-sgmcmc", "bdlkit-meta-sgmcmc-meta-params/1", META_KEYS,
                    check_meta_params, Constants, "Meta-SGMCMC", "a")


def save_meta_params(path: str | os.PathLike, meta: MetaParams, constants: Constants,
                     info: dict[str, object] | None = None) -> Path:
    """Atomically write ``meta`` and ``constants`` (and string-able ``info``)."""
    return save_meta_file(FORMAT, path, meta, constants, info)


def load_meta_params(path: str | os.PathLike, dtype: torch.dtype = torch.float32) -> Pretrained:
    """Read a file of :func:`save_meta_params` (or ``bdlkit meta-train meta-sgmcmc``); wrong
    shapes, NaN weights or missing constants are refused naming the file and the fix."""
    return load_meta_file(FORMAT, path, dtype)


def pretrained_path() -> Path:
    """Where the shipped meta-parameters live inside the installed package."""
    return Path(str(resources.files("bdlkit.meta_sgmcmc") / "pretrained" / PRETRAINED_NAME))


def load_pretrained(dtype: torch.dtype = torch.float32) -> Pretrained:
    """The meta-parameters that ship with bdlkit (the ``meta_sgmcmc`` sampler's default)."""
    return load_shipped(FORMAT, pretrained_path(), dtype)


__all__ = ["PRETRAINED_NAME", "Pretrained", "load_meta_params", "load_pretrained",
           "pretrained_path", "save_meta_params"]
