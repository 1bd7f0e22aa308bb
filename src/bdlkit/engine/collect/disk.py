"""The disk-backed sample store: safetensors shards plus an atomic JSON manifest.

``DiskStore`` writes ``shard-NNNNNN.safetensors`` files of exactly ``shard_size`` draws
(the last one of a finished run may hold fewer) and a ``manifest.json`` listing them with
their SHA-256 checksums, each atomically (temporary file, fsync, rename) through
:mod:`bdlkit.core.serialization`. Every read checks a shard against the checksum in its
own header and in the manifest. The manifest is the truth: a shard file it does not list
is a leftover. A shard, once written, never changes.

A checkpoint holds the manifest and the draws not yet in a shard (``state_dict`` does
not flush), so where a run was checkpointed, interrupted or resumed does not change the
shard files: they depend only on the draws and ``shard_size``. Shards dropped by the cap
are deleted only by :meth:`DiskStore.collect_garbage` once no kept checkpoint lists
them, and :meth:`DiskStore.load_state_dict` deletes the shards written after the
checkpoint it restores. Reading streams shard by shard
(:meth:`~bdlkit.engine.collect.SampleStore.iter_chunks`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open
from torch import Tensor

from bdlkit.core.serialization import (
    DIGEST_KEY,
    CorruptFileError,
    load_json,
    load_tensors,
    remove_stale_temps,
    save_json,
    save_tensors,
)
from bdlkit.engine.collect.store import (
    _ADVICE,
    _SHARD_RE,
    DISK_KIND,
    MANIFEST,
    Flat,
    SampleStore,
    _int,
    _parse_meta,
)


class DiskStore(SampleStore):
    """Draws streamed to ``path`` as safetensors shards listed by ``manifest.json``.

    ``exist_ok=True`` skips the check for an existing store and starts empty (its first
    flush overwrites the manifest); the runner then resumes with :meth:`load_state_dict`.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        burnin: int = 0,
        thin: int = 1,
        max_samples: int | None = None,
        shard_size: int = 64,
        shard_bytes: int | None = 256 * 2**20,
        exist_ok: bool = False,
    ) -> None:
        super().__init__(burnin=burnin, thin=thin, max_samples=max_samples)
        self.shard_size = _int(shard_size, "shard_size", 1)
        self.shard_bytes = None if shard_bytes is None else _int(shard_bytes, "shard_bytes", 1)
        self.path = Path(path)
        if not exist_ok and (self.path / MANIFEST).exists():
            raise FileExistsError(
                f"{self.path} already holds a sample store; use DiskStore.open({str(self.path)!r})"
                " to read it, or pick another folder"
            )
        self._shards: list[dict[str, Any]] = []  # {"file": name, "count": n, "sha256": h}
        self._offset = 0  # draws skipped at the front of the first shard (cap)
        self._next_index = 0
        self._pending: list[Flat] = []  # draws not yet in a shard
        self._garbage: list[str] = []  # shards dropped by the cap, not yet deleted

    def _folder(self) -> Path:
        """The store's folder, created on the first write (so building a store, e.g. in
        a runner that is never run, leaves nothing on disk)."""
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path

    def __repr__(self) -> str:
        return f"DiskStore({str(self.path)!r}, {len(self)} draws)"

    @classmethod
    def open(cls, path: str | os.PathLike, manifest_advice: str = _ADVICE) -> DiskStore:
        """Read-only view of the store in ``path``, as its ``manifest.json`` describes it;
        ``manifest_advice`` is what an unreadable manifest's error says to do."""
        manifest = Path(path) / MANIFEST
        if not manifest.exists():
            raise FileNotFoundError(
                f"{manifest} does not exist: {path} is not a bdlkit sample store (or was never "
                "flushed)"
            )
        try:
            meta = load_json(manifest)
        except CorruptFileError as err:
            raise CorruptFileError(f"{err}: {manifest_advice}") from err
        store = cls(path, exist_ok=True)
        store._restore(_parse_meta(meta, DISK_KIND, str(manifest), manifest_advice))
        store._read_only = True
        return store

    def __len__(self) -> int:
        return sum(s["count"] for s in self._shards) - self._offset + len(self._pending)

    def flush(self) -> None:
        """Write pending draws as a shard, then the manifest (no-op for a read-only view)."""
        if not self._read_only:
            if self._pending:
                self._write_shard()
            save_json(self._folder() / MANIFEST, self._manifest())

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as it describes the written shards (what ``manifest.json`` holds)."""
        return self._manifest()

    @property
    def files(self) -> set[str]:
        """The shard files this store lists."""
        return {s["file"] for s in self._shards}

    def check_record(self, record: Any, where: str) -> None:
        """Refuse this store unless its manifest is the finished run's ``record`` (the store
        record of the final checkpoint ``where``): an edited or damaged manifest would
        otherwise silently drop or shift draws."""
        if not isinstance(record, dict) or record.get("pending"):
            raise CorruptFileError(f"{where} records no finished sample store (it holds "
                                   "unwritten draws): finish the run with --resume first")
        want = {k: v for k, v in record.items() if k != "pending"}
        found = json.loads(json.dumps(self._manifest()))
        if found != want:
            diff = sorted(k for k in set(found) | set(want) if found.get(k) != want.get(k))
            raise CorruptFileError(
                f"{self.path / MANIFEST} does not match the store record in {where} (differs "
                f"in {', '.join(diff)}): it was edited or damaged. `bdlkit fit --resume "
                f"{self.path.parent}` rewrites it from the checkpoint")

    def state_dict(self) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """The manifest (written to disk) plus ``pending``, and the unwritten draws as
        tensors ``pending.<key>``; no shard is written, so the shard files do not depend
        on when checkpoints are taken."""
        save_json(self._folder() / MANIFEST, self._manifest())
        flat = self._stack(self._pending) if self._pending else {}
        meta = {**self._manifest(), "pending": len(self._pending)}
        return meta, {f"pending.{k}": v for k, v in flat.items()}

    def load_state_dict(self, meta: dict[str, Any], tensors: dict[str, Tensor],
                        keep: set[str] = frozenset()) -> None:
        """Restore the checkpoint's record ``meta`` and its unwritten draws ``tensors``,
        deleting shard files it does not list (written after it) unless ``keep`` names
        them (listed by another kept checkpoint: deleted later, by collect_garbage).

        ``manifest.json`` is rewritten atomically first, so an edited or damaged manifest
        is replaced by the checkpoint's record.
        """
        if self._read_only:
            raise RuntimeError(f"{self!r} is a read-only view (DiskStore.open); cannot restore")
        where = f"checkpoint of the store in {self.path}"
        p = _parse_meta(meta, DISK_KIND, where)
        pending = _int(meta.get("pending", 0), "pending", 0)
        self._restore(p)
        if pending:
            want = {f"pending.{k}": [pending, *s, p["dtypes"][k]] for k, s in p["shapes"].items()}
            got = {k: [*tensors[k].shape, tensors[k].dtype] if k in tensors else None
                   for k in want}
            if got != want:
                raise CorruptFileError(f"{where}: unwritten draws {got} should be {want}")
            columns = [tensors[f"pending.{k}"].unbind() for k in self._shapes]
            self._pending = [dict(zip(self._shapes, (c[i].clone() for c in columns)))
                             for i in range(pending)]
            self.total_seen += pending
        save_json(self._folder() / MANIFEST, self._manifest())
        listed = self.files
        remove_stale_temps(self.path)
        for f in self.path.iterdir():
            if _SHARD_RE.fullmatch(f.name) and f.name not in listed:
                if f.name in keep:
                    self._garbage.append(f.name)
                else:
                    f.unlink(missing_ok=True)

    def collect_garbage(self, keep: set[str] = frozenset()) -> None:
        """Rewrite the manifest, then delete the shard files the cap has dropped, but those
        in ``keep`` (listed by a checkpoint still kept)."""
        if self._garbage:
            save_json(self._folder() / MANIFEST, self._manifest())
            for name in self._garbage:
                if name not in keep:
                    (self.path / name).unlink(missing_ok=True)
            self._garbage = [name for name in self._garbage if name in keep]

    def _append(self, draw: Flat) -> None:
        if self.shard_bytes is not None and self._next_index == 0 and not self._pending:
            # size shards by bytes once, from the first draw: a large network never holds
            # more than ~shard_bytes of unwritten draws in memory
            nbytes = sum(t.numel() * t.element_size() for t in draw.values())
            self.shard_size = max(1, min(self.shard_size, self.shard_bytes // max(1, nbytes)))
        self._pending.append(draw)
        excess = 0 if self.max_samples is None else len(self) - self.max_samples
        while excess > 0:  # drop the oldest draws: the front of the first shard, or pending
            if not self._shards:
                del self._pending[:excess]
                break
            first = self._shards[0]
            drop = min(excess, first["count"] - self._offset)
            self._offset, excess = self._offset + drop, excess - drop
            if self._offset == first["count"]:  # the whole shard is dropped
                self._garbage.append(self._shards.pop(0)["file"])
                self._offset = 0
        if len(self._pending) >= self.shard_size:
            self._write_shard()
            save_json(self._folder() / MANIFEST, self._manifest())

    def _write_shard(self) -> None:
        name = f"shard-{self._next_index:06d}.safetensors"
        digest = save_tensors(self._folder() / name, self._stack(self._pending))
        self._shards.append({"file": name, "count": len(self._pending), "sha256": digest})
        self._next_index += 1
        self._pending = []

    def _manifest(self) -> dict[str, Any]:
        return {
            **self._meta(DISK_KIND),
            "total_seen": self.total_seen - len(self._pending),  # as of the listed shards
            "shard_size": self.shard_size,
            "shards": [dict(s) for s in self._shards],
            "offset": self._offset,
            "next_index": self._next_index,
        }

    def _restore(self, p: dict[str, Any]) -> None:
        """Check every listed shard's header, then take the state ``p`` (from _parse_meta)."""
        for s in p["shards"]:
            self._read_shard(s, p["shapes"], None)
        self._restore_meta(p)
        self.shard_size, self._shards = p["shard_size"], p["shards"]
        self._offset, self._next_index = p["offset"], p["next_index"]
        self._pending, self._garbage = [], []

    def _read_shard(
        self, s: dict[str, Any], shapes: dict[str, tuple[int, ...]], dtypes: dict | None
    ) -> Flat:
        """Load a listed shard (with ``dtypes=None``: check only its header)."""
        file = self.path / s["file"]
        if not file.exists():
            raise CorruptFileError(f"{file} is listed in the manifest but missing; {_ADVICE}")
        want = {k: [s["count"], *shape] for k, shape in shapes.items()}
        tensors: Flat = {}
        expected = s.get("sha256")
        if dtypes is None:
            try:
                with safe_open(file, framework="pt") as f:
                    found = {k: f.get_slice(k).get_shape() for k in f.keys()}
                    recorded = (f.metadata() or {}).get(DIGEST_KEY)
            except (SafetensorError, OSError, ValueError) as err:
                raise CorruptFileError(
                    f"{file} is not a readable safetensors file ({err}); it may be truncated: "
                    f"{_ADVICE}"
                ) from err
            if expected is not None and recorded != expected:
                raise CorruptFileError(f"{file} is not the shard the manifest lists (its "
                                       f"checksum differs); {_ADVICE}")
        else:
            tensors = load_tensors(file, _ADVICE, expected)
            found = {k: [*v.shape, v.dtype] for k, v in tensors.items()}
            want = {k: [*w, dtypes[k]] for k, w in want.items()}
        if found != want:
            raise CorruptFileError(f"{file} holds {found}, but the manifest says {want}; {_ADVICE}")
        return tensors

    def _iter_flat(self) -> Iterator[Flat]:
        shards, offset, pending = list(self._shards), self._offset, list(self._pending)
        for i, s in enumerate(shards):
            tensors = self._read_shard(s, self._shapes, self._dtypes)
            yield {k: tensors[k][offset if i == 0 else 0 :] for k in self._shapes}
        if pending:
            yield self._stack(pending)
