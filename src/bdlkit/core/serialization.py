"""Safe, atomic files for tensors and states.

Tensors go to ``safetensors`` (never pickle); metadata to JSON. Every file is
written to a temporary name in the same folder, flushed, fsynced and renamed over
the target, so a crash leaves either the old file or the new one, never half of
one. States are flattened with optree into dotted-path keys and rebuilt from a
template state of the same algorithm (built with the same hyperparameters).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from bdlkit.core.errors import CorruptFileError
from bdlkit.core.tree import tree_flatten_with_path, tree_unflatten

__all__ = ["CorruptFileError", "atomic_write_bytes", "load_json", "load_tensors",
           "load_tensors_with_metadata", "save_json", "save_tensors", "state_from_tensors",
           "state_to_tensors"]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if hasattr(os, "fchmod"):  # mkstemp makes 0600; give the usual file mode
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_tensors(path: str | os.PathLike, tensors: dict[str, Tensor],
                 metadata: dict[str, str] | None = None) -> None:
    """Atomically write a flat dict of tensors (and string ``metadata``) as safetensors."""
    data = {k: v.detach().contiguous().clone().cpu() for k, v in tensors.items()}
    atomic_write_bytes(path, st_save(data, metadata=metadata))


def load_tensors_with_metadata(path: str | os.PathLike
                               ) -> tuple[dict[str, Tensor], dict[str, str]]:
    """:func:`load_tensors` and the file's string metadata (``{}`` when it has none)."""
    if not Path(path).exists():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except (SafetensorError, ValueError, OSError) as err:
        raise CorruptFileError(
            f"{path} is not a readable safetensors file ({err}); it may be truncated or "
            "corrupt: re-run or restore it from a backup") from err


def load_tensors(path: str | os.PathLike) -> dict[str, Tensor]:
    """Read a safetensors file, turning any decoding failure into a clear error."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        return st_load(path.read_bytes())
    except (SafetensorError, ValueError, OSError) as err:
        raise CorruptFileError(
            f"{path} is not a readable safetensors file ({err}); it may be truncated or "
            "corrupt: re-run or restore it from a backup"
        ) from err


def save_json(path: str | os.PathLike, obj: Any) -> None:
    """Atomically write ``obj`` as strict JSON: NaN and ±inf floats become ``null``."""
    text = json.dumps(_finite(obj), indent=2, default=_json_default, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode())


def _finite(obj: Any) -> Any:
    if isinstance(obj, Tensor) and obj.numel() == 1:
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def load_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptFileError(f"{path} is not valid JSON ({err}); the file is corrupt") from err


def state_to_tensors(state: Any) -> dict[str, Tensor]:
    """Flatten a state pytree to ``{dotted.path: tensor}`` (Python scalars -> 0-d tensors)."""
    paths, leaves, _ = tree_flatten_with_path(state)
    out: dict[str, Tensor] = {}
    for path, leaf in zip(paths, leaves):
        key = path or "_"
        if isinstance(leaf, Tensor):
            out[key] = leaf
        elif isinstance(leaf, (bool, int, float)):
            out[key] = torch.tensor(leaf)
        else:
            raise TypeError(f"state leaf {key!r} has unsupported type {type(leaf).__name__}")
    return out


def state_from_tensors(template: Any, tensors: dict[str, Tensor]) -> Any:
    """Rebuild a state with the structure of ``template`` from :func:`state_to_tensors` output."""
    paths, leaves, spec = tree_flatten_with_path(template)
    keys = [p or "_" for p in paths]
    missing = [k for k in keys if k not in tensors]
    extra = sorted(set(tensors) - set(keys))
    if missing or extra:
        raise CorruptFileError(
            f"saved state does not match this algorithm: missing {missing[:5]}, unexpected "
            f"{extra[:5]}; was it saved by another method or model?"
        )
    new = []
    for key, leaf in zip(keys, leaves):
        t = tensors[key]
        if isinstance(leaf, Tensor):
            if t.shape != leaf.shape or t.dtype != leaf.dtype:
                raise CorruptFileError(
                    f"saved {key!r} has shape {tuple(t.shape)} {t.dtype}, expected "
                    f"{tuple(leaf.shape)} {leaf.dtype}"
                )
            new.append(t.to(leaf.device))
        else:
            new.append(type(leaf)(t.item()))
    return tree_unflatten(spec, new)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Tensor) and obj.numel() == 1:
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, torch.dtype):
        return str(obj)
    return repr(obj)
