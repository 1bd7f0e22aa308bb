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

filelock does the locking (it is already a dependency of torch); this module only adds
the holder record and the message.
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
_HELD: dict[tuple[str, int], list] = {}  # (resolved folder, thread) -> [FileLock, depth]


class FolderBusyError(InputError):
    """Another live process is writing the run folder."""


@contextlib.contextmanager
def run_lock(folder: str | os.PathLike, purpose: str = "writing") -> Iterator[Path]:
    """Hold the exclusive lock of ``folder`` (created if missing) for the ``with`` block.

    Raises:
        FolderBusyError: another live process holds it; the message names it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = (str(folder.resolve()), threading.get_ident())
    held = _HELD.get(key)
    if held is not None:  # re-entrant within this process
        held[1] += 1
        try:
            yield folder
        finally:
            held[1] -= 1
        return
    path = folder / LOCK_NAME
    lock = FileLock(path, timeout=0, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise FolderBusyError(
            f"{folder} is being written by another process ({_holder(folder)}); wait for it "
            "to finish or stop it, then try again (the lock of a process that has exited is "
            f"taken over automatically; if {path} stays locked with no bdlkit process running, "
            "delete it)"
        ) from None
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
