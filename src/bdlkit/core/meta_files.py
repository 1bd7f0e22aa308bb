"""Meta-parameter files of the learned samplers (L2E, Meta-SGMCMC): one format, two users.

A file is safetensors (never a pickle) holding the sampler's network tensors and, as string
metadata, its ``format``, the frozen-dataclass constants it was meta-trained with
(``constants``, JSON) and free-form provenance (command, seed, final meta-loss). A sampler
must run with the constants its meta-parameters were trained with, so loading returns both.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.serialization import (
    CorruptFileError,
    check_digest,
    load_tensors_with_metadata,
    save_tensors,
)


@dataclass(frozen=True)
class Pretrained:
    """Meta-parameters with the constants they were trained with and their provenance."""

    meta: dict[str, Tensor]
    constants: Any
    info: dict[str, str] = field(default_factory=dict)
    path: str | None = None


@dataclass(frozen=True)
class MetaFormat:
    """What distinguishes one learner's files: its name, format tag, tensor keys, the check
    of the tensors (raises ``ValueError``) and its constants' dataclass."""

    learner: str  # "l2e", "meta-sgmcmc": the `bdlkit meta-train` learner
    tag: str
    keys: tuple[str, ...]
    check: Callable[[dict[str, Tensor]], None]
    constants: type
    title: str  # the learner as prose names it: "L2E", "Meta-SGMCMC"
    article: str  # the title's indefinite article: "an" L2E, "a" Meta-SGMCMC


def save_meta_file(fmt: MetaFormat, path: str | os.PathLike, meta: dict[str, Tensor],
                   constants: Any, info: dict[str, object] | None = None) -> Path:
    """Atomically write ``meta`` and ``constants`` (and string-able ``info``)."""
    fmt.check(meta)
    metadata = {"format": fmt.tag,
                "constants": json.dumps(constants_dict(constants), sort_keys=True)}
    for k, v in (info or {}).items():
        metadata[str(k)] = v if isinstance(v, str) else json.dumps(v)
    save_tensors(path, {k: meta[k] for k in fmt.keys}, metadata=metadata)
    return Path(path)


def load_meta_file(fmt: MetaFormat, path: str | os.PathLike,
                   dtype: torch.dtype = torch.float32, digest: str | None = None) -> Pretrained:
    """Read a file of :func:`save_meta_file`; a missing file, wrong shapes, NaN weights or
    missing constants are refused naming the file and the fix. With ``digest``, its tensors
    must have that :func:`~bdlkit.core.serialization.tensor_digest`."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{fmt.title} meta-parameter file {path} does not exist; pass the path of a file "
            f"written by `bdlkit meta-train {fmt.learner}` (DIR/meta_params.safetensors), or "
            "omit it to use the shipped set")
    tensors, metadata = load_tensors_with_metadata(path)
    check_digest(path, tensors, digest, "reinstall bdlkit")
    try:
        fmt.check(tensors)
        constants = read_constants(metadata, fmt.constants)
    except (KeyError, ValueError, TypeError) as err:
        raise CorruptFileError(
            f"{path} is not {fmt.article} {fmt.title} meta-parameter file ({err}); write one with "
            f"`bdlkit meta-train {fmt.learner} --out DIR`") from err
    meta = {k: tensors[k].to(dtype) for k in fmt.keys}
    info = {k: v for k, v in metadata.items() if k != "constants"}
    return Pretrained(meta, constants, info, str(path))


def load_shipped(fmt: MetaFormat, path: Path, dtype: torch.dtype = torch.float32,
                 digest: str | None = None) -> Pretrained:
    """The meta-parameters that ship with bdlkit at ``path`` (a clear error when the file is
    missing from the installation)."""
    if not path.exists():
        raise FileNotFoundError(
            f"the shipped {fmt.title} meta-parameters are missing ({path}); reinstall bdlkit, "
            f"or meta-train your own with `bdlkit meta-train {fmt.learner} --out DIR` and pass "
            "meta_params=DIR/meta_params.safetensors")
    return load_meta_file(fmt, path, dtype, digest)


def resolve(meta_params: Any, load_pretrained: Callable[[], Pretrained],
            load_file: Callable[[str | os.PathLike], Pretrained]) -> Pretrained:
    """A sampler's ``meta_params`` option as :class:`Pretrained`: ``"pretrained"`` (or None)
    is the shipped set, a string or path a file, a :class:`Pretrained` itself."""
    if isinstance(meta_params, Pretrained):
        return meta_params
    if meta_params is None or (isinstance(meta_params, str) and meta_params == "pretrained"):
        return load_pretrained()
    if isinstance(meta_params, (str, os.PathLike)):
        return load_file(meta_params)
    raise TypeError(f"meta_params must be 'pretrained', a path or a Pretrained, "
                    f"got {type(meta_params).__name__}")


def read_constants(metadata: dict[str, object], cls: type) -> Any:
    """The ``cls`` constants in a file's metadata; ``TypeError`` or ``ValueError`` saying what
    is wrong when the metadata are not what :func:`save_meta_file` writes. A missing
    constant is an error: a sampler must not silently run with a default it was not trained
    with."""
    bad = sorted(str(k) for k, v in metadata.items() if not isinstance(v, str))
    if bad:
        raise TypeError(f"its metadata {', '.join(bad)} must be strings")
    if "constants" not in metadata:
        raise ValueError("its metadata have no 'constants' entry")
    raw = json.loads(str(metadata["constants"]))
    if not isinstance(raw, dict):
        raise TypeError(f"its 'constants' metadata must be a JSON object of the sampler "
                        f"constants, got a JSON {type(raw).__name__}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        value = raw[f.name]
        kinds = str(getattr(f.type, "__name__", f.type))  # "str", "float" or "float | str"
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ((isinstance(value, str) and "str" in kinds)
                or (number and kinds != "str")):
            raise TypeError(f"its constant {f.name!r} must be "
                            f"{'a string' if kinds == 'str' else 'a number'}, got {value!r}")
        values[f.name] = value
    constants = cls(**values)  # the class's own range checks, on the values present
    # constants added after a format: older files meant the default
    later = getattr(cls, "ADDED_LATER", ())
    missing = [f.name for f in dataclasses.fields(cls)
               if f.name not in values and f.name not in later]
    if missing:
        raise ValueError(f"its constants lack {missing}")
    return constants


def flatten(meta: dict[str, Tensor], keys: Sequence[str]) -> Tensor:
    """The meta-parameters as one vector, in the order of ``keys`` (meta-training's φ)."""
    return torch.cat([meta[k].reshape(-1) for k in keys])


def unflatten(vec: Tensor, shapes: dict[str, tuple[int, ...]]) -> dict[str, Tensor]:
    """Split the last dimension of ``vec`` back into tensors of ``shapes`` (in its order;
    leading batch dimensions kept): the inverse of :func:`flatten`."""
    out, i = {}, 0
    for k, shape in shapes.items():
        n = math.prod(shape)
        out[k] = vec[..., i:i + n].reshape(*vec.shape[:-1], *shape)
        i += n
    return out


def constants_dict(constants: Any) -> dict[str, Any]:
    """``constants`` as the dict files, digests and run options record: every field, except
    one its class added later (``ADDED_LATER``) while it holds its default, so that a file,
    digest or checkpoint written before the field existed still matches."""
    out = dataclasses.asdict(constants)
    defaults = {f.name: f.default for f in dataclasses.fields(constants)}
    for name in getattr(type(constants), "ADDED_LATER", ()):
        if out.get(name) == defaults.get(name):
            del out[name]
    return out


def meta_digest(meta: dict[str, Tensor], constants: Any) -> str:
    """A 16-hex prefix of SHA-256 over the constants and the tensors (a sampler's VERSION
    suffix: a checkpoint written with other meta-parameters is not resumed)."""
    h = hashlib.sha256(json.dumps(constants_dict(constants), sort_keys=True).encode())
    for k in sorted(meta):
        h.update(k.encode() + meta[k].detach().cpu().double().numpy().tobytes())
    return h.hexdigest()[:16]


__all__ = ["MetaFormat", "Pretrained", "constants_dict", "flatten", "load_meta_file",
           "load_shipped", "meta_digest", "read_constants", "resolve", "save_meta_file", "unflatten"]
