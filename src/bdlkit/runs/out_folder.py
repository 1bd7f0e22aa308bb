"""The folder a run (or a benchmark, or a reference) is written to: created and marked as
bdlkit's, and refused when it holds something bdlkit did not write, so that ``--overwrite``
can never remove a user's own files, when it lies inside a run folder or holds one
(:func:`bdlkit.core.lock.check_not_nested`), or when it is a file. ``--overwrite`` deletes
nothing another process is writing (:func:`bdlkit.core.lock.holding_locks_below`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bdlkit.core.lock import (
    CHAIN_PREFIX,
    LOCK_FILES,
    REFERENCE_MARKER,
    RUN_MARKER,
    check_not_nested,
    holding_locks_below,
    own_chain,
)
from bdlkit.core.serialization import atomic_write_bytes
from bdlkit.runs import report as run_report

RUN_ENTRIES = ("config.yaml", "log.jsonl", "metrics.json", "report.md", "checkpoints",
               "samples", *run_report.PLOTS)


def prepare_out(out: str | os.PathLike, overwrite: bool, *, marker: str = RUN_MARKER,
                entries: tuple[str, ...] = RUN_ENTRIES) -> Path:
    """Create the output folder ``out`` and mark it as written by bdlkit.

    An existing non-empty ``out`` is refused unless ``overwrite``; even then only a folder
    bdlkit made (it holds ``marker``) is replaced, and only the ``entries`` bdlkit writes
    are deleted (with the chains of a chain-groups run that ``out`` held), so
    ``--overwrite`` can never remove a user's own files, nor a run folder under ``out``
    that another process is writing (its lock is held meanwhile).
    """
    out = Path(out)
    check_out(out, overwrite, marker=marker)
    if occupied(out):
        here = out.resolve()
        chains = tuple(p.name for p in here.glob(f"{CHAIN_PREFIX}*") if own_chain(here, p))
        with holding_locks_below(out):
            for name in (*entries, *chains, marker):
                path = out / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / marker, b"written by bdlkit; --overwrite may replace this folder\n")
    return out


def check_out(out: str | os.PathLike, overwrite: bool, *, marker: str = RUN_MARKER) -> None:
    """Refuse ``out`` as :func:`prepare_out` would, without touching it (so the refusal
    comes before the folder is locked, which writes a lock file into it). A run's or a
    reference's folder (``marker``) may hold no run folder below it but its own chains; a
    benchmark's holds its runs."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file, not a folder: choose another --out "
                              "(a new folder)")
    check_not_nested(out, below=marker in (RUN_MARKER, REFERENCE_MARKER))
    if not occupied(out):
        return
    if not overwrite:
        raise FileExistsError(
            f"output folder {out} already exists; pass --resume {out} to continue that "
            "run, --overwrite to replace it, or choose another --out"
        )
    if out.is_symlink() or not (out / marker).is_file():
        raise FileExistsError(
            f"{out} exists and was not written by bdlkit (no {marker} file); refusing to "
            "replace it: choose another --out"
        )


def occupied(out: Path) -> bool:
    """Whether ``out`` exists and holds anything but its lock files."""
    return out.exists() and (not out.is_dir() or any(f.name not in LOCK_FILES for f in out.iterdir()))
