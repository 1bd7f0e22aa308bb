"""Sample stores: keep MCMC draws after burn-in and thinning, in memory or on disk.

A draw is a tensor (``(chains, d)`` for a Target) or a flat ``dict[str, Tensor]``
(network parameters by name); stacked draws add a leading draw axis and keep the type.
Draws are cloned to the CPU when appended; a store keeps the most recent ``max_samples``.

This module holds the shared logic (:class:`SampleStore`: keep rule, cap, structure
checks, metadata validation) and :class:`MemoryStore`; :mod:`.disk` has the
safetensors-sharded :class:`~bdlkit.engine.collect.DiskStore`.

Hand-written rather than built on a storage library (zarr, arviz's InferenceData) so
files stay pickle-free, no dependency is added, and crash/resume follows bdlkit's
checkpoints exactly.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.serialization import CorruptFileError

FORMAT_VERSION = 1
DISK_KIND = "bdlkit.samples"
MEMORY_KIND = "bdlkit.samples.memory"
MANIFEST = "manifest.json"
TENSOR_KEY = "_"  # the file key of a tensor draw
_SHARD_RE = re.compile(r"shard-(\d{6})\.safetensors")
_KIND_NAMES = {"tensor": "Tensor", "dict": "dict[str, Tensor]"}
_ADVICE = "restore it from a backup, or start a new store in another folder"

Draw = Tensor | dict[str, Tensor]
Flat = dict[str, Tensor]


class SampleStore(ABC):
    """Shared logic of the stores: selection, structure checks, chunking."""

    _read_only = False

    def __init__(self, *, burnin: int = 0, thin: int = 1, max_samples: int | None = None) -> None:
        self.burnin = _int(burnin, "burnin", 0)
        self.thin = _int(thin, "thin", 1)
        self.max_samples = None if max_samples is None else _int(max_samples, "max_samples", 1)
        self.total_seen = 0  # draws ever appended, dropped ones included
        self._structure: str | None = None  # "tensor" or "dict", set by the first draw
        self._shapes: dict[str, tuple[int, ...]] = {}  # per-draw shapes, in key order
        self._dtypes: dict[str, torch.dtype] = {}

    def wants(self, step: int) -> bool:
        """Whether the draw after ``step`` completed steps (1-based) is kept."""
        return step > self.burnin and (step - self.burnin) % self.thin == 0

    def wanted(self, start: int, stop: int) -> range:
        """The steps of ``start .. stop - 1`` that :meth:`wants` (a range: a compiled chunk
        of a hundred steps asks once)."""
        first = max(start, self.burnin + 1)
        first += -(first - self.burnin) % self.thin
        return range(first, stop, self.thin)

    @property
    def structure(self) -> str | None:
        """``"tensor"`` or ``"dict"`` once a draw is held (None before)."""
        return self._structure

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of one draw per key (a tensor draw has the single key ``"_"``)."""
        return dict(self._shapes)

    def offer(self, step: int, params: Draw) -> bool:
        """Append ``params`` if :meth:`wants` ``step``; return whether it was kept."""
        if not self.wants(step):
            return False
        self.append(params)
        return True

    def append(self, params: Draw) -> None:
        """Add one draw (a detached CPU clone), dropping the oldest beyond ``max_samples``."""
        if self._read_only:
            raise RuntimeError(f"{self!r} is a read-only view (DiskStore.open); cannot append")
        structure, flat = _flatten(params)
        self._check_draw(structure, flat)
        draw = {k: flat[k].detach().to("cpu", copy=True) for k in self._shapes}
        self.total_seen += 1
        self._append(draw)

    def iter_chunks(self, chunk_size: int | None = None) -> Iterator[Draw]:
        """Stacked draws, oldest first, ``chunk_size`` at a time (``None``: natural chunks).

        Natural chunks are one shard (then the unflushed draws) for a disk store and all
        draws for a memory store. Do not append while iterating.
        """
        if chunk_size is None:
            yield from map(self._wrap, self._iter_flat())
            return
        chunk_size = _int(chunk_size, "chunk_size", 1)
        parts: list[Flat] = []
        filled = 0
        for chunk in self._iter_flat():
            n, start = len(next(iter(chunk.values()))), 0
            while start < n:
                take = min(chunk_size - filled, n - start)
                parts.append({k: v[start : start + take] for k, v in chunk.items()})
                filled, start = filled + take, start + take
                if filled == chunk_size:
                    yield self._wrap(self._cat(parts))
                    parts, filled = [], 0
        if parts:
            yield self._wrap(self._cat(parts))

    def load(self) -> Draw | None:
        """All held draws stacked along a new leading axis (``None`` if there are none)."""
        chunks = list(self._iter_flat())
        return self._wrap(self._cat(chunks)) if chunks else None

    @abstractmethod
    def __len__(self) -> int:
        """Draws currently held (at most ``max_samples``)."""

    @abstractmethod
    def flush(self) -> None:
        """Make every held draw durable (no-op in memory)."""

    @abstractmethod
    def collect_garbage(self, keep: set[str] = frozenset()) -> None:
        """Delete files of draws dropped by the cap, but those named in ``keep`` (no-op in
        memory).

        Call it right after a checkpoint has been written, with ``keep`` the files the
        other kept checkpoints list.
        """

    @abstractmethod
    def state_dict(self) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """``(JSON-able metadata, tensors)`` describing the store exactly."""

    @abstractmethod
    def load_state_dict(self, meta: dict[str, Any], tensors: dict[str, Tensor],
                        keep: set[str] = frozenset()) -> None:
        """Restore exactly the state given by :meth:`state_dict` (settings included);
        files named in ``keep`` are listed by another kept checkpoint and stay."""

    @abstractmethod
    def _append(self, draw: Flat) -> None: ...

    @abstractmethod
    def _iter_flat(self) -> Iterator[Flat]:
        """Natural non-empty chunks of stacked draws, oldest first, as flat dicts."""

    def _check_draw(self, structure: str, flat: Flat) -> None:
        """Record the first draw's structure; check later draws against it."""
        if self._structure is None:
            self._structure = structure
            self._shapes = {k: tuple(v.shape) for k, v in flat.items()}
            self._dtypes = {k: v.dtype for k, v in flat.items()}
            return
        if structure != self._structure:
            raise ValueError(
                f"draw is a {_KIND_NAMES[structure]} but this store holds "
                f"{_KIND_NAMES[self._structure]} draws"
            )
        if set(flat) != set(self._shapes):
            missing, extra = sorted(self._shapes.keys() - flat), sorted(flat.keys() - self._shapes)
            raise ValueError(f"draw keys differ from the first's: missing {missing}, new {extra}")
        for k, v in flat.items():
            if tuple(v.shape) != self._shapes[k] or v.dtype != self._dtypes[k]:
                name = "draw" if structure == "tensor" else f"draw[{k!r}]"
                raise ValueError(
                    f"{name} has shape {tuple(v.shape)} and dtype {v.dtype}, but the first "
                    f"draw had {self._shapes[k]} and {self._dtypes[k]}"
                )

    def _wrap(self, flat: Flat) -> Draw:
        if self._structure == "tensor":
            return flat[TENSOR_KEY]
        return {k: flat[k] for k in self._shapes}

    def _stack(self, draws: list[Flat]) -> Flat:
        return {k: torch.stack([d[k] for d in draws]) for k in self._shapes}

    def _cat(self, chunks: list[Flat]) -> Flat:
        return {k: torch.cat([c[k] for c in chunks]) for k in self._shapes}

    def _meta(self, kind: str) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "kind": kind,
            "structure": self._structure,
            "keys": list(self._shapes),
            "shapes": {k: list(s) for k, s in self._shapes.items()},
            "dtypes": {k: str(d).removeprefix("torch.") for k, d in self._dtypes.items()},
            "total_seen": self.total_seen,
            "burnin": self.burnin,
            "thin": self.thin,
            "max_samples": self.max_samples,
        }

    def _restore_meta(self, p: dict[str, Any]) -> None:
        for name in ("burnin", "thin", "max_samples", "total_seen"):
            setattr(self, name, p[name])
        self._structure, self._shapes, self._dtypes = p["structure"], p["shapes"], p["dtypes"]


class MemoryStore(SampleStore):
    """Draws held in memory (a deque of per-draw CPU tensors)."""

    def __init__(self, *, burnin: int = 0, thin: int = 1, max_samples: int | None = None) -> None:
        super().__init__(burnin=burnin, thin=thin, max_samples=max_samples)
        self._draws: deque[Flat] = deque(maxlen=self.max_samples)

    def __len__(self) -> int:
        return len(self._draws)

    def _append(self, draw: Flat) -> None:
        self._draws.append(draw)  # the deque's maxlen drops the oldest

    def _iter_flat(self) -> Iterator[Flat]:
        if self._draws:
            yield self._stack(list(self._draws))

    def flush(self) -> None:
        pass

    def collect_garbage(self, keep: set[str] = frozenset()) -> None:
        pass

    def state_dict(self) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """Metadata with counts and structure; tensors ``samples.<key>``: the draws stacked."""
        meta = {**self._meta(MEMORY_KIND), "count": len(self)}
        flat = self._stack(list(self._draws)) if self._draws else {}
        return meta, {f"samples.{k}": v for k, v in flat.items()}

    def load_state_dict(self, meta: dict[str, Any], tensors: dict[str, Tensor],
                        keep: set[str] = frozenset()) -> None:
        p = _parse_meta(meta, MEMORY_KIND, where := "sample store checkpoint")
        n = p["count"]
        want = {f"samples.{k}": [n, *s, p["dtypes"][k]] for k, s in p["shapes"].items() if n}
        found = {k: tensors[k] if k in tensors else None for k in want}
        got = {k: t if t is None else [*t.shape, t.dtype] for k, t in found.items()}
        if got != want:
            raise CorruptFileError(f"{where}: tensors {got} should be {want}; {_ADVICE}")
        self._restore_meta(p)
        columns = [found[f"samples.{k}"].detach().cpu().unbind() for k in self._shapes]
        draws = (dict(zip(self._shapes, (c[i].clone() for c in columns))) for i in range(n))
        self._draws = deque(draws, maxlen=self.max_samples)


def _flatten(params: Any) -> tuple[str, Flat]:
    """``("tensor", {"_": t})`` or ``("dict", params)``; TypeError for anything else."""
    if isinstance(params, Tensor):
        return "tensor", {TENSOR_KEY: params}
    if not isinstance(params, dict):
        raise TypeError(
            f"a draw must be a Tensor or a flat dict[str, Tensor], got {type(params).__name__}; "
            "flatten other pytrees first (e.g. bdlkit.core.serialization.state_to_tensors)"
        )
    if not params:
        raise ValueError("cannot store an empty dict as a draw")
    for k, v in params.items():
        if not isinstance(k, str) or not isinstance(v, Tensor):
            raise TypeError(f"a draw dict must map str to Tensor; {k!r} holds {type(v).__name__}")
    return "dict", dict(params)


def _shard_entry(s: Any) -> dict[str, Any]:
    """A manifest's shard entry: file, count and (since checksums) its sha256."""
    entry = {"file": s["file"], "count": _int(s["count"], "count", 1)}
    if "sha256" in s:
        if not (isinstance(s["sha256"], str) and re.fullmatch(r"[0-9a-f]{64}", s["sha256"])):
            raise ValueError(f"shard {s['file']!r} has a malformed sha256 {s['sha256']!r}")
        entry["sha256"] = s["sha256"]
    return entry


def _int(value: Any, name: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return value


def _dtype(name: Any) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def _parse_meta(meta: Any, kind: str, where: str, advice: str = _ADVICE) -> dict[str, Any]:
    """Validate a manifest's or checkpoint's metadata; CorruptFileError naming ``where``."""
    try:
        head = (meta.get("format"), meta.get("kind")) if isinstance(meta, dict) else None
        if head != (FORMAT_VERSION, kind):
            raise ValueError(f"expected a JSON object with format {FORMAT_VERSION}, kind {kind!r}")
        ints = {"burnin": 0, "thin": 1, "total_seen": 0}
        disk = {"shard_size": 1, "offset": 0, "next_index": 0}
        ints |= disk if kind == DISK_KIND else {"count": 0}
        p: dict[str, Any] = {name: _int(meta[name], name, lo) for name, lo in ints.items()}
        mx, structure, keys = meta["max_samples"], meta["structure"], meta["keys"]
        p["max_samples"] = None if mx is None else _int(mx, "max_samples", 1)
        if not isinstance(keys, list) or len(set(keys)) != len(keys):
            raise ValueError(f"keys must be a list of distinct names, got {keys!r}")
        if {None: [], "tensor": [TENSOR_KEY], "dict": keys or None}.get(structure) != keys:
            raise ValueError(f"keys {keys!r} do not fit structure {structure!r}")
        p["structure"] = structure
        p["shapes"] = {k: tuple(_int(n, "a dimension", 0) for n in meta["shapes"][k]) for k in keys}
        p["dtypes"] = {k: _dtype(meta["dtypes"][k]) for k in keys}
        held = p.get("count", 0)
        if kind == DISK_KIND:
            p["shards"] = [_shard_entry(s) for s in meta["shards"]]
            names = [s["file"] for s in p["shards"]]
            index = {int(m[1]) for m in map(_SHARD_RE.fullmatch, names) if m}
            if len(index) != len(names) or max(index, default=-1) >= p["next_index"]:
                raise ValueError(f"bad shard list {names} (next_index {p['next_index']})")
            if p["offset"] >= (p["shards"][0]["count"] if names else 1):
                raise ValueError(f"offset {p['offset']} skips the whole first shard")
            held = sum(s["count"] for s in p["shards"]) - p["offset"]
        if (held and structure is None) or held > (p["max_samples"] or held):
            raise ValueError(f"{held} draws do not fit structure {structure!r}, max_samples {mx}")
    except (KeyError, TypeError, ValueError) as err:
        problem = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        raise CorruptFileError(
            f"{where}: {problem}; it is corrupt or not a {kind!r} store: {advice}"
        ) from err
    return p
