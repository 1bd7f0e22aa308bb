"""Checkpoints: one self-contained safetensors file per checkpoint, written atomically.

A checkpoint holds everything a run needs to continue bit-exactly: the algorithm
state (parameters, optimiser moments, the generator state of the algorithm's noise),
the global torch RNG state, the data-order state (:class:`~bdlkit.engine.batches.Batches`),
the sample store's manifest (and, for an in-memory store, its draws) and the step
counter. Tensors live under the prefixes ``state/``, ``store/``, ``data/`` and
``rng/``; the JSON metadata goes in the safetensors header (``__metadata__``), so a
checkpoint is a single file and ``os.replace`` makes its write atomic. Nothing is
ever unpickled on load.

Integrity: the metadata records the :func:`~bdlkit.core.serialization.tensor_digest` of
all tensors (``sha256``), checked on every load, and the largest parameter magnitude
(``max_abs``). The newest :data:`KEEP` checkpoints are kept, so one damaged file is not
fatal; :func:`set_aside` renames a damaged or diverged one to ``<name>.damaged`` or
``<name>.diverged`` (kept for inspection, never read again by a resume).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from bdlkit.core.serialization import (
    CorruptFileError,
    atomic_write_bytes,
    check_digest,
    fsync_folder,
    header,
    tensor_digest,
)

FORMAT_VERSION = 1
KEEP = 2  #: checkpoints kept — the previous one survives damage to the newest
_NAME = re.compile(r"^step-(\d{9})\.safetensors$")


class NewerFormatError(ValueError):
    """A checkpoint written by a newer bdlkit (not damaged: it is never set aside)."""


@dataclass
class Checkpoint:
    """The contents of a checkpoint file, split by prefix."""

    step: int
    meta: dict[str, Any]
    state: dict[str, Tensor]
    store: dict[str, Tensor] = field(default_factory=dict)
    data: dict[str, Tensor] = field(default_factory=dict)
    rng: dict[str, Tensor] = field(default_factory=dict)


def checkpoint_path(folder: str | os.PathLike, step: int) -> Path:
    return Path(folder) / f"step-{step:09d}.safetensors"


def list_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """Checkpoint files in ``folder``, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name))


def save_checkpoint(folder: str | os.PathLike, ckpt: Checkpoint, keep: int = KEEP,
                    protect: Path | None = None) -> Path:
    """Write ``ckpt`` atomically as ``folder/step-<step>.safetensors`` with its checksum;
    keep the newest ``keep`` and ``protect`` (e.g. the newest sane one)."""
    tensors: dict[str, Tensor] = {}
    for prefix in ("state", "store", "data", "rng"):
        for key, value in getattr(ckpt, prefix).items():
            tensors[f"{prefix}/{key}"] = value.detach().contiguous().clone().cpu()
    meta = {"format": FORMAT_VERSION, "step": ckpt.step, **ckpt.meta,
            "sha256": tensor_digest(tensors)}
    path = checkpoint_path(folder, ckpt.step)
    atomic_write_bytes(path, st_save(tensors, metadata={"bdlkit": json.dumps(meta)}))
    for old in list_checkpoints(folder)[:-keep]:
        if old not in (path, protect):
            old.unlink(missing_ok=True)
    fsync_folder(folder)
    return path


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint and check its checksum; a truncated, corrupt or damaged file
    raises :class:`CorruptFileError` naming it (the caller adds what to do)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    raw = path.read_bytes()
    try:
        tensors = st_load(raw)
        meta = _meta(raw)
    except NewerFormatError:
        raise
    except Exception as err:  # any decoding failure is a corrupt file for the user
        raise CorruptFileError(
            f"checkpoint {path} is corrupt or truncated ({type(err).__name__}: {err})"
        ) from None
    check_digest(path, tensors, meta.get("sha256"), "")
    parts: dict[str, dict[str, Tensor]] = {"state": {}, "store": {}, "data": {}, "rng": {}}
    for key, value in tensors.items():
        prefix, _, rest = key.partition("/")
        if prefix not in parts:
            raise CorruptFileError(f"checkpoint {path} has an unexpected entry {key!r}")
        parts[prefix][rest] = value
    return Checkpoint(step=int(meta["step"]), meta=meta, **parts)


def read_meta(path: str | os.PathLike) -> dict[str, Any] | None:
    """A checkpoint's JSON metadata, from its header alone (None when unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            (length,) = struct.unpack("<Q", head)
            if length > 2**27:  # no header of ours is that large
                return None
            return _meta(head + f.read(length))
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None


def sane(meta: dict[str, Any]) -> bool:
    """Whether a checkpoint's parameters were finite and at most its ``sane_bound`` in
    magnitude (one written before ``max_abs`` was recorded counts as sane)."""
    value, bound = meta.get("max_abs", 0.0), meta.get("sane_bound", math.inf)
    return isinstance(value, (int, float)) and math.isfinite(value) and value <= bound


def set_aside(path: Path, why: str) -> Path:
    """Rename checkpoint ``path`` to ``<name>.<why>`` (``damaged`` or ``diverged``): kept for
    inspection, no longer a checkpoint a resume reads."""
    target = path.with_name(f"{path.name}.{why}")
    os.replace(path, target)
    fsync_folder(path.parent)
    return target


def latest_checkpoint(folder: str | os.PathLike) -> Path | None:
    found = list_checkpoints(folder)
    return found[-1] if found else None


def _meta(raw: bytes) -> dict[str, Any]:
    meta = json.loads(header(raw)["__metadata__"]["bdlkit"])
    if not isinstance(meta, dict):
        raise ValueError("the metadata is not a JSON object")
    int(meta["step"])
    found = meta.get("format")
    if isinstance(found, int) and not isinstance(found, bool) and found > FORMAT_VERSION:
        raise NewerFormatError(f"checkpoint file format {found} is newer than this bdlkit's "
                               f"({FORMAT_VERSION}): use the bdlkit release that wrote it")
    if found != FORMAT_VERSION:
        raise ValueError(f"format {found!r}, expected {FORMAT_VERSION}")
    return meta


def global_rng_state() -> dict[str, Tensor]:
    """The global torch RNG states (CPU and, when initialised, each CUDA device, and the
    current device's again as ``cuda_current_device``: the data-parallel replicas each
    run on their own GPU and restore the writer's current one onto theirs)."""
    states = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            states[f"torch_cuda_{i}"] = s
        states["cuda_current_device"] = torch.cuda.get_rng_state()
    return states


def set_global_rng_state(states: dict[str, Tensor]) -> None:
    if "torch_cpu" in states:
        torch.set_rng_state(states["torch_cpu"])
    keys = sorted((k for k in states if k.startswith("torch_cuda_")), key=lambda k: int(k[11:]))
    cuda = [states[k] for k in keys]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
        if "cuda_current_device" in states:
            torch.cuda.set_rng_state(states["cuda_current_device"])


