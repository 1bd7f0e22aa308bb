"""Safe, atomic, checksummed files for tensors and states.

Tensors go to ``safetensors`` (never pickle); metadata to JSON. Every file is
written to a temporary name in the same folder, flushed, fsynced, renamed over the
target and its folder fsynced, so a crash leaves either the old file or the new one,
never half of one, and the rename itself survives a power cut. A temporary file left
by a process killed mid-write is named ``.<target>.<8 random characters>.tmp``;
:func:`remove_stale_temps` deletes them (the writer holding the run folder's lock
calls it).

Every tensor file carries :func:`tensor_digest` (SHA-256 over each tensor's name,
dtype, shape and bytes) in its metadata under ``bdlkit.sha256`` and is checked against
it on every read, so a flipped bit in the tensor data is an error naming the file,
never a silently different number. Files written before checksums existed have no
digest and are read unchecked. States are flattened with optree into dotted-path keys
and rebuilt from a template state of the same algorithm (built with the same
hyperparameters).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor

from bdlkit.core.errors import CorruptFileError
from bdlkit.core.tree import tree_flatten_with_path, tree_unflatten

__all__ = ["CorruptFileError", "atomic_write_bytes", "canonical_header", "check_digest",
           "fsync_file", "load_json", "load_tensors", "load_tensors_with_metadata",
           "naming_the_file", "remove_stale_temps", "save_json",
           "save_tensors", "state_from_tensors", "state_to_tensors", "tensor_digest"]

DIGEST_KEY = "bdlkit.sha256"  # the metadata entry of a tensor file's checksum
_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")  # atomic_write_bytes' temporary names


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file, fsync, rename). An ``OSError``
    that names no file (a full disk: ``[Errno 28]``) is raised again naming ``path``."""
    path = Path(path)
    with naming_the_file(path):
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
        fsync_folder(path.parent)


@contextlib.contextmanager
def naming_the_file(path: str | os.PathLike) -> Iterator[None]:
    """Raise an ``OSError`` of the block that names no file (``write`` and ``fsync`` on a
    full disk raise ``[Errno 28] No space left on device`` alone) again naming ``path``,
    so the message says which file could not be written."""
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno is None:
            raise
        raise OSError(err.errno, err.strerror or os.strerror(err.errno), str(path)) from err


def fsync_file(path: str | os.PathLike) -> None:
    """Make what was written to ``path`` (e.g. appended lines) durable."""
    with naming_the_file(path):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_folder(folder: str | os.PathLike) -> None:
    """Make a rename or unlink in ``folder`` durable (a no-op where folders cannot be
    opened, e.g. on Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def remove_stale_temps(folder: str | os.PathLike) -> list[str]:
    """Delete the temporary files a killed writer left in ``folder`` (their names are
    ``.<target>.<random>.tmp``); returns the names removed. Call it only while holding
    the folder's lock, so no live writer's file is taken."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = [f.name for f in folder.iterdir() if _TEMP.match(f.name) and f.is_file()]
    for name in removed:
        (folder / name).unlink(missing_ok=True)
    return removed


def tensor_digest(tensors: dict[str, Tensor]) -> str:
    """SHA-256 (hex) over each tensor's name, dtype, shape and bytes, in name order: the
    checksum every bdlkit tensor file records, independent of the file layout."""
    h = hashlib.sha256()
    for key in sorted(tensors):
        t = tensors[key].detach().contiguous().cpu()
        h.update(f"{key}\0{str(t.dtype).removeprefix('torch.')}\0{list(t.shape)}\0".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def check_digest(path: str | os.PathLike, tensors: dict[str, Tensor], expected: str | None,
                 advice: str) -> None:
    """Raise :class:`CorruptFileError` naming ``path`` and ``advice`` when ``tensors`` do not
    hash to ``expected`` (no check when ``expected`` is None: an older file)."""
    if expected is None:
        return
    found = tensor_digest(tensors)
    if found != expected:
        raise CorruptFileError(
            f"{path} is damaged: its tensors hash to SHA-256 {found[:12]}..., not the "
            f"{expected[:12]}... recorded when it was written" + (f"; {advice}" if advice else ""))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_READ_ADVICE = "re-run or restore it from a backup"


def save_tensors(path: str | os.PathLike, tensors: dict[str, Tensor],
                 metadata: dict[str, str] | None = None) -> str:
    """Atomically write a flat dict of tensors (and string ``metadata``) as safetensors,
    with their :func:`tensor_digest` in the metadata; returns the digest."""
    data = {k: v.detach().contiguous().clone().cpu() for k, v in tensors.items()}
    digest = tensor_digest(data)
    raw = st_save(data, metadata={**(metadata or {}), DIGEST_KEY: digest})
    atomic_write_bytes(path, canonical_header(raw))
    return digest


def canonical_header(raw: bytes) -> bytes:
    """``raw`` safetensors bytes with the JSON header's keys sorted, padded with spaces to
    its original length (as the format pads it): the writer orders the metadata keys as its
    hash map iterates, differently from one write to the next, so without this two saves
    of the same tensors and metadata differ in their bytes. Tensor data are untouched."""
    (size,) = struct.unpack("<Q", raw[:8])
    sorted_json = json.dumps(json.loads(raw[8:8 + size]), sort_keys=True,
                             separators=(",", ":"), ensure_ascii=False).encode()
    if len(sorted_json) > size:  # a different escaping: keep the writer's own header
        return raw
    return raw[:8] + sorted_json.ljust(size, b" ") + raw[8 + size:]


def load_tensors_with_metadata(path: str | os.PathLike, advice: str = _READ_ADVICE,
                               expected: str | None = None
                               ) -> tuple[dict[str, Tensor], dict[str, str]]:
    """:func:`load_tensors` and the file's string metadata (``{}`` when it has none; the
    checksum entry is checked and left out). With ``expected`` (the digest a manifest
    lists for the file) the file must record that same digest."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    try:
        raw = path.read_bytes()
        tensors = st_load(raw)
        metadata = dict(header(raw).get("__metadata__") or {})
    except (SafetensorError, ValueError, OSError, struct.error) as err:
        raise CorruptFileError(
            f"{path} is not a readable safetensors file ({err}); it may be truncated or "
            f"corrupt: {advice}") from err
    recorded = metadata.pop(DIGEST_KEY, None)
    if expected is not None and recorded != expected:
        raise CorruptFileError(f"{path} is not the file that was listed for it (its checksum "
                               f"{str(recorded)[:12]}... differs from {expected[:12]}...); {advice}")
    check_digest(path, tensors, recorded, advice)
    return tensors, metadata


def load_tensors(path: str | os.PathLike, advice: str = _READ_ADVICE,
                 expected: str | None = None) -> dict[str, Tensor]:
    """Read a safetensors file and check its checksum (and that it is ``expected``),
    turning any decoding failure or mismatch into a :class:`CorruptFileError` naming the
    file and ``advice``."""
    return load_tensors_with_metadata(path, advice, expected)[0]


def header(raw: bytes) -> dict[str, Any]:
    """The JSON header of a safetensors file's bytes (tensor entries and ``__metadata__``)."""
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length])


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
