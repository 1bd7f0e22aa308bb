"""Checkpoints: one self-contained safetensors file per checkpoint, written atomically.

A checkpoint holds everything a run needs to continue bit-exactly: the algorithm
state (parameters, optimiser moments, the generator state of the algorithm's noise),
the global torch RNG state, the data-order state (:class:`~bdlkit.engine.batches.Batches`),
the sample store's manifest (and, for an in-memory store, its draws) and the step
counter. Tensors live under the prefixes ``state/``, ``store/``, ``data/`` and
``rng/``; the JSON metadata goes in the safetensors header (``__metadata__``), so a
checkpoint is a single file and ``os.replace`` makes its write atomic. Nothing is
ever unpickled on load.
"""

from __future__ import annotations

import json
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

from bdlkit.core.serialization import CorruptFileError, atomic_write_bytes

FORMAT_VERSION = 1
_NAME = re.compile(r"^step-(\d{9})\.safetensors$")


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


def save_checkpoint(folder: str | os.PathLike, ckpt: Checkpoint, keep: int = 1) -> Path:
    """Write ``ckpt`` atomically as ``folder/step-<step>.safetensors``; keep the newest ``keep``."""
    tensors: dict[str, Tensor] = {}
    for prefix in ("state", "store", "data", "rng"):
        for key, value in getattr(ckpt, prefix).items():
            tensors[f"{prefix}/{key}"] = value.detach().contiguous().clone().cpu()
    meta = {"format": FORMAT_VERSION, "step": ckpt.step, **ckpt.meta}
    path = checkpoint_path(folder, ckpt.step)
    atomic_write_bytes(path, st_save(tensors, metadata={"bdlkit": json.dumps(meta)}))
    for old in list_checkpoints(folder)[:-keep]:
        if old != path:
            old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint; a truncated or corrupt file raises :class:`CorruptFileError`."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    raw = path.read_bytes()
    try:
        tensors = st_load(raw)
        meta = json.loads(_header(raw)["__metadata__"]["bdlkit"])
        step = int(meta["step"])
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(f"format {meta.get('format')!r}, expected {FORMAT_VERSION}")
    except Exception as err:  # any decoding failure is a corrupt file for the user
        raise CorruptFileError(
            f"checkpoint {path} is corrupt or truncated ({type(err).__name__}: {err}). Only "
            "the newest checkpoint is kept, so the run cannot be resumed: start it again "
            "with --overwrite (or restore the file from a backup)"
        ) from None
    parts: dict[str, dict[str, Tensor]] = {"state": {}, "store": {}, "data": {}, "rng": {}}
    for key, value in tensors.items():
        prefix, _, rest = key.partition("/")
        if prefix not in parts:
            raise CorruptFileError(f"checkpoint {path} has an unexpected entry {key!r}")
        parts[prefix][rest] = value
    return Checkpoint(step=step, meta=meta, **parts)


def latest_checkpoint(folder: str | os.PathLike) -> Path | None:
    found = list_checkpoints(folder)
    return found[-1] if found else None


def global_rng_state() -> dict[str, Tensor]:
    """The global torch RNG states (CPU and, when initialised, each CUDA device)."""
    states = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            states[f"torch_cuda_{i}"] = s
    return states


def set_global_rng_state(states: dict[str, Tensor]) -> None:
    if "torch_cpu" in states:
        torch.set_rng_state(states["torch_cpu"])
    keys = sorted((k for k in states if k.startswith("torch_cuda_")), key=lambda k: int(k[11:]))
    cuda = [states[k] for k in keys]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def _header(raw: bytes) -> dict[str, Any]:
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length])
