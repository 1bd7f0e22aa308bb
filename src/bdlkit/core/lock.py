"""One writer per run folder: an exclusive lock held while a process writes the folder.

``run_lock(folder)`` takes ``folder/.bdlkit-lock`` with :mod:`filelock` (an OS lock,
``flock`` on Unix, which the kernel releases when its holder exits, even by kill -9, so a
lock left by a dead process never blocks anyone: the next writer takes it over). The
holder's PID, host, command and start time go to ``.bdlkit-lock.holder`` once the lock
is held; a second writer is refused at once with an error that quotes them. (On a file
system without ``flock`` filelock falls back to a lock file that a killed process leaves
behind; the error then says to delete it once no bdlkit process runs.) ``bdlkit fit`` (new, ``--resume`` and
``--overwrite``), ``bdlkit evaluate`` and ``bdlkit reference`` take it, and so does
:meth:`bdlkit.Runner.fit` for any ``run_dir``. The lock is re-entrant within a process
and thread (the command locks the folder, then the runner inside it locks it again).

Run folders do not nest, and the lock covers the folder tree it guards. A *run folder* is
one a bdlkit writer owns: it holds a run's or a reference's marker (``.bdlkit-run``,
``.bdlkit-reference``), a bdlkit lock, or ``config.yaml`` with ``log.jsonl`` (a run of an
older bdlkit). :func:`check_not_nested` refuses a new writer's folder inside a run folder,
or holding one below it (an ``--overwrite`` of the outer folder would delete the inner
run under its writer), but for the chains a run is made to hold: ``OUT/chain-<g>`` of a
chain-groups run (its ``.bdlkit-run`` without ``config.yaml``) and ``DIR/chains/chain-<c>``
of a reference. A plain folder holding runs (``runs/``, what ``bdlkit compare runs/*``
reads) is not a run folder and may hold as many as it likes. :func:`run_lock` checks it
when it first takes a folder; :func:`holding_locks_below` holds the lock of every run
folder under one that is about to be deleted, refusing one another process is writing.

filelock does the locking (it is already a dependency of torch); this module only adds
the holder record, the folder tree and the messages.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from bdlkit.core.errors import InputError
from bdlkit.core.serialization import atomic_write_bytes

LOCK_NAME = ".bdlkit-lock"
HOLDER_NAME = ".bdlkit-lock.holder"
LOCK_FILES = (LOCK_NAME, HOLDER_NAME)  # what the lock puts in a folder
RUN_MARKER = ".bdlkit-run"  # a run folder (or a chain-groups run's OUT), bdlkit's to replace
REFERENCE_MARKER = ".bdlkit-reference"  # a `bdlkit reference` folder
CHAIN_PREFIX = "chain-"  # chain g's run folder inside the folder made to hold it: chain-<g>
_HELD: dict[tuple[str, int], list] = {}  # (resolved folder, thread) -> [FileLock, depth]


class FolderBusyError(InputError):
    """Another live process is writing the run folder."""


class NestedRunError(InputError):
    """A run folder inside another run folder, or holding one."""


@contextlib.contextmanager
def run_lock(folder: str | os.PathLike, purpose: str = "writing") -> Iterator[Path]:
    """Hold the exclusive lock of ``folder`` (created if missing) for the ``with`` block.

    Raises:
        FolderBusyError: another live process holds it; the message names it.
        NestedRunError: ``folder`` lies inside a run folder or holds one
            (:func:`check_not_nested`).
    """
    folder = Path(folder)
    key = (str(folder.resolve()), threading.get_ident())
    held = _HELD.get(key)
    if held is None:  # (re-entered, it was checked when first taken)
        if folder.exists() and not folder.is_dir():
            raise FileExistsError(f"{folder} is a file, not a folder: choose another folder "
                                  "for the run")
        check_not_nested(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if held is not None:  # re-entrant within this process
        held[1] += 1
        try:
            yield folder
        finally:
            held[1] -= 1
        return
    path = folder / LOCK_NAME
    lock = _take(folder, "wait for it to finish or stop it, then try again (the lock of a "
                 f"process that has exited is taken over automatically; if {path} stays "
                 "locked with no bdlkit process running, delete it)")
    _HELD[key] = [lock, 1]
    try:
        _record(folder / HOLDER_NAME, purpose)
        yield folder
    finally:
        del _HELD[key]
        (folder / HOLDER_NAME).unlink(missing_ok=True)
        lock.release()


def _record(path: Path, purpose: str) -> None:
    """Write who holds the lock (read by a refused writer)."""
    info = {"pid": os.getpid(), "host": socket.gethostname(), "purpose": purpose,
            "command": " ".join(sys.argv), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    atomic_write_bytes(path, json.dumps(info).encode())


def _holder(folder: Path) -> str:
    try:
        info = json.loads((folder / HOLDER_NAME).read_text())
        return (f"PID {info['pid']} on {info['host']}, {info['purpose']} since "
                f"{info['since']}: {info['command']}")
    except (OSError, ValueError, KeyError, TypeError):
        return "no holder recorded"


def run_sign(folder: Path) -> str | None:
    """What makes ``folder`` a run folder (a file it holds), or None for a plain folder."""
    for name in (RUN_MARKER, REFERENCE_MARKER, LOCK_NAME):
        if (folder / name).is_file():
            return name
    if (folder / "config.yaml").is_file() and (folder / "log.jsonl").is_file():
        return "config.yaml and log.jsonl"  # a run written before the marker existed
    return None


def chain_name(index: int) -> str:
    """The name of chain ``index``'s run folder (``chain-<index>``): ``OUT/chain-<g>`` of a
    chain-groups run (:func:`bdlkit.runs.ranks.chain_folder`), ``DIR/chains/chain-<c>`` of a
    reference. Stated once here, where :func:`own_chain` reads it back."""
    return f"{CHAIN_PREFIX}{index}"


def chain_index(name: str) -> int | None:
    """``g`` of a folder named :func:`chain_name` ``(g)``; None for any other name."""
    digits = name[len(CHAIN_PREFIX):] if name.startswith(CHAIN_PREFIX) else ""
    return int(digits) if digits.isascii() and digits.isdigit() else None


def own_chain(parent: Path, child: Path) -> bool:
    """Whether run folder ``child`` is one that ``parent`` is made to hold: ``chain-<g>``
    of a chain-groups run's ``OUT`` (``.bdlkit-run`` and no ``config.yaml``), or
    ``chains/chain-<c>`` of a reference."""
    parts = child.relative_to(parent).parts
    if not parts or chain_index(parts[-1]) is None:
        return False
    if (parent / REFERENCE_MARKER).is_file():
        return parts[:-1] == ("chains",)
    return (len(parts) == 1 and (parent / RUN_MARKER).is_file()
            and not (parent / "config.yaml").exists())


def check_not_nested(folder: str | os.PathLike, *, below: bool = True) -> None:
    """Refuse ``folder`` for a run (or a reference) when it lies inside a run folder or,
    with ``below``, holds one under it (see the module docstring: the chains a run is made
    to hold excepted). A plain parent folder of runs passes.

    Raises:
        NestedRunError: naming both folders and what to do.
    """
    folder = Path(folder)
    here = folder.resolve()
    for parent in here.parents:
        sign = run_sign(parent)
        if sign is not None and not own_chain(parent, here):
            raise NestedRunError(
                f"{folder} is inside the run folder {parent} (it holds {sign}): run folders "
                f"cannot nest (an --overwrite of {parent} would delete this one); choose a "
                f"folder outside {parent}")
    inner = next(runs_below(here), None) if below and here.is_dir() else None
    if inner is not None:
        fix = (f"give the run a new folder of its own (e.g. {folder}/<name>)"
               if run_sign(here) is None else
               f"move {inner} out of {folder} first (an --overwrite would delete it)")
        raise NestedRunError(f"{folder} holds the run folder {inner} (it holds "
                             f"{run_sign(inner)}): run folders cannot nest; {fix}")


def runs_below(folder: Path) -> Iterator[Path]:
    """The run folders under ``folder`` (not itself) that are not its own chains, outermost
    first (nothing below one is looked at)."""
    for path, subfolders, _ in os.walk(folder):
        subfolders.sort()
        for name in list(subfolders):
            sub = Path(path) / name
            if run_sign(sub) is not None:
                subfolders.remove(name)  # its inside is its own writer's
                if not own_chain(folder, sub):
                    yield sub


@contextlib.contextmanager
def holding_locks_below(folder: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of every run folder under ``folder`` (itself included, unless this
    process holds it) for the ``with`` block: what is deleted in it (``--overwrite``) is
    being written by no other process.

    Raises:
        FolderBusyError: another live process writes one of them; the message names it.
    """
    folder = Path(folder)
    held: list[FileLock] = []
    try:
        for path in sorted(folder.rglob(LOCK_NAME)):
            sub = path.parent
            if any(key[0] == str(sub.resolve()) for key in _HELD):
                continue  # this process's own
            held.append(_take(sub, f"an --overwrite of {folder} would delete it: wait for "
                                   "that process to finish or stop it, then try again"))
        yield
    finally:
        for lock in held:
            lock.release()


def _take(folder: Path, fix: str) -> FileLock:
    """The lock of ``folder``, taken now, or :class:`FolderBusyError` naming its holder and
    ``fix`` (what to do) when another live process holds it."""
    lock = FileLock(folder / LOCK_NAME, timeout=0, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise FolderBusyError(f"{folder} is being written by another process "
                              f"({_holder(folder)}); {fix}") from None
    return lock
