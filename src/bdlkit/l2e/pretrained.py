"""L2E meta-parameters on disk: save, load, and the set that ships with bdlkit.

A meta-parameter file (:mod:`bdlkit.core.meta_files`) holds the six MLP tensors (``w0, b0,
w1, b1, w2, b2``, Haiku layout (in, out)) and the :class:`~bdlkit.l2e.kinetic.Constants` the
sampler was meta-trained with, plus provenance.

The shipped set (``pretrained/bdlkit-l2e.safetensors``) was produced by
``bdlkit meta-train l2e`` on bdlkit's own offline task distribution; the exact command,
seed and meta-loss curve are in ``benchmarks/results/l2e-meta-train/``. L2E's released
meta-parameters are *not* shipped (their repository has no licence).
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
from bdlkit.l2e.kinetic import META_KEYS, Constants, MetaParams, check_meta_params

PRETRAINED_NAME = "bdlkit-l2e.safetensors"
# the shipped file predates checksums in tensor files: its tensor_digest is pinned here
PRETRAINED_SHA256 = "df04d6819a22bce36300c29ab95992715a7cc2b70a1e2d163a34fc5528ef8928"
FORMAT = MetaFormat("l2e", "bdlkit-l2e-meta-params/1", META_KEYS, check_meta_params, Constants,
                    "L2E", "an")


def save_meta_params(path: str | os.PathLike, meta: MetaParams, constants: Constants,
                     info: dict[str, object] | None = None) -> Path:
    """Atomically write ``meta`` and ``constants`` (and string-able ``info``)."""
    return save_meta_file(FORMAT, path, meta, constants, info)


def load_meta_params(path: str | os.PathLike, dtype: torch.dtype = torch.float32,
                     digest: str | None = None) -> Pretrained:
    """Read a meta-parameter file written by :func:`save_meta_params` (or meta-training);
    with ``digest``, its tensors must have that :func:`~bdlkit.core.serialization.tensor_digest`."""
    return load_meta_file(FORMAT, path, dtype, digest)


def pretrained_path() -> Path:
    """Where the shipped meta-parameters live inside the installed package."""
    return Path(str(resources.files("bdlkit.l2e") / "pretrained" / PRETRAINED_NAME))


def load_pretrained(dtype: torch.dtype = torch.float32) -> Pretrained:
    """The meta-parameters that ship with bdlkit (the default of the ``l2e`` sampler)."""
    return load_shipped(FORMAT, pretrained_path(), dtype, digest=PRETRAINED_SHA256)


__all__ = ["PRETRAINED_NAME", "Pretrained", "load_meta_params", "load_pretrained",
           "pretrained_path", "save_meta_params"]
