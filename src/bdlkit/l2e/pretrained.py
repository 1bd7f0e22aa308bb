"""L2E meta-parameters on disk: save, load, and the set that ships with bdlkit.

A meta-parameter file is safetensors (never a pickle) holding the six MLP tensors
(``w0, b0, w1, b1, w2, b2``, Haiku layout (in, out)) and, as string metadata, the
:class:`~bdlkit.l2e.kinetic.Constants` the sampler was meta-trained with (``constants``,
JSON) plus free-form provenance (command, seed, final meta-loss). The sampler must run
with the constants its meta-parameters were trained with, so loading returns both.

The shipped set (``pretrained/bdlkit-l2e.safetensors``) was produced by
``bdlkit meta-train l2e`` on bdlkit's own offline task distribution; the exact command,
seed and meta-loss curve are in ``benchmarks/results/l2e-meta-train/``. L2E's released
meta-parameters are *not* shipped (their repository has no licence).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path

import torch

from bdlkit.core.serialization import (
    CorruptFileError,
    check_digest,
    load_tensors_with_metadata,
    save_tensors,
)
from bdlkit.l2e.kinetic import META_KEYS, Constants, MetaParams, check_meta_params

PRETRAINED_NAME = "bdlkit-l2e.safetensors"
# the shipped file predates checksums in tensor files: its tensor_digest is pinned here
PRETRAINED_SHA256 = "df04d6819a22bce36300c29ab95992715a7cc2b70a1e2d163a34fc5528ef8928"


@dataclass(frozen=True)
class Pretrained:
    """Meta-parameters with the constants they were trained with and their provenance."""

    meta: MetaParams
    constants: Constants
    info: dict[str, str] = field(default_factory=dict)
    path: str | None = None


def save_meta_params(path: str | os.PathLike, meta: MetaParams, constants: Constants,
                     info: dict[str, object] | None = None) -> Path:
    """Atomically write ``meta`` and ``constants`` (and string-able ``info``)."""
    check_meta_params(meta)
    metadata = {"format": "bdlkit-l2e-meta-params/1",
                "constants": json.dumps(constants.to_dict(), sort_keys=True)}
    for k, v in (info or {}).items():
        metadata[str(k)] = v if isinstance(v, str) else json.dumps(v)
    save_tensors(path, {k: meta[k] for k in META_KEYS}, metadata=metadata)
    return Path(path)


def load_meta_params(path: str | os.PathLike, dtype: torch.dtype = torch.float32,
                     digest: str | None = None) -> Pretrained:
    """Read a meta-parameter file written by :func:`save_meta_params` (or meta-training);
    with ``digest``, its tensors must have that :func:`~bdlkit.core.serialization.tensor_digest`."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"L2E meta-parameter file {path} does not exist; pass the path of a file written "
            "by `bdlkit meta-train l2e` (DIR/meta_params.safetensors), or omit it to use "
            "the shipped set")
    tensors, metadata = load_tensors_with_metadata(path)
    check_digest(path, tensors, digest, "reinstall bdlkit")
    try:
        check_meta_params(tensors)
        constants = _constants(metadata)
    except (KeyError, ValueError, TypeError) as err:
        raise CorruptFileError(
            f"{path} is not an L2E meta-parameter file ({err}); write one with "
            "`bdlkit meta-train l2e --out DIR`") from err
    meta = {k: tensors[k].to(dtype) for k in META_KEYS}
    info = {k: v for k, v in metadata.items() if k not in ("constants",)}
    return Pretrained(meta, constants, info, str(path))


def _constants(metadata: dict[str, object]) -> Constants:
    """The :class:`Constants` in a file's metadata; ``TypeError`` or ``ValueError`` saying
    what is wrong when the metadata are not what :func:`save_meta_params` writes."""
    bad = sorted(str(k) for k, v in metadata.items() if not isinstance(v, str))
    if bad:
        raise TypeError(f"its metadata {', '.join(bad)} must be strings")
    if "constants" not in metadata:
        raise ValueError("its metadata have no 'constants' entry")
    raw = json.loads(str(metadata["constants"]))
    if not isinstance(raw, dict):
        raise TypeError(f"its 'constants' metadata must be a JSON object of the sampler "
                        f"constants, got a JSON {type(raw).__name__}")
    values = {f.name: raw[f.name] for f in fields(Constants) if f.name in raw}
    for f in fields(Constants):
        value = values.get(f.name, "" if f.type == "str" else 0.0)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (isinstance(value, str) if f.type == "str" else number):
            raise TypeError(f"its constant {f.name!r} must be "
                            f"{'a string' if f.type == 'str' else 'a number'}, got {value!r}")
    return Constants(**values)


def pretrained_path() -> Path:
    """Where the shipped meta-parameters live inside the installed package."""
    return Path(str(resources.files("bdlkit.l2e") / "pretrained" / PRETRAINED_NAME))


def load_pretrained(dtype: torch.dtype = torch.float32) -> Pretrained:
    """The meta-parameters that ship with bdlkit (the default of the ``l2e`` sampler)."""
    path = pretrained_path()
    if not path.exists():
        raise FileNotFoundError(
            f"the shipped L2E meta-parameters are missing ({path}); reinstall bdlkit, or "
            "meta-train your own with `bdlkit meta-train l2e --out DIR` and pass "
            "meta_params=DIR/meta_params.safetensors")
    return load_meta_params(path, dtype, digest=PRETRAINED_SHA256)


__all__ = ["PRETRAINED_NAME", "Pretrained", "load_meta_params", "load_pretrained",
           "pretrained_path", "save_meta_params"]
