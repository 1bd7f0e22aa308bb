"""One writer per run folder: an exclusive lock held while a process writes the folder.

``run_lock(folder)`` takes ``folder/.bdlkit-lock`` with :mod:`filelock` (an OS lock,
``flock`` on Unix, which the kernel releases when its holder exits, even by kill -9, so a
lock left by a dead process never blocks anyone: the next writer takes it over). The
file records the holder's PID, host, command and start time; a second writer is refused
at once with an error that quotes them. ``bdlkit fit`` (new, ``--resume`` and
``--overwrite``), ``bdlkit evaluate`` and ``bdlkit reference`` take it, and so does
:meth:`bdlkit.Runner.fit` for any ``run_dir``. The lock is re-entrant within a process
(the command locks the folder, then the runner inside it locks it again).

filelock does the locking (it is already a dependency of torch); this module only adds
the holder record and the message.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from bdlkit.core.errors import InputError

LOCK_NAME = ".bdlkit-lock"
_HELD: dict[str, list] = {}  # resolved folder -> [FileLock, depth]


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
    key = str(folder.resolve())
    held = _HELD.get(key)
    if held is not None:  # re-entrant within this process
        held[1] += 1
        try:
            yield folder
        finally:
            held[1] -= 1
        return
    path = folder / LOCK_NAME
    lock = FileLock(path, blocking=False, thread_local=False,
                    on_acquired=lambda fd: _record(fd, purpose))
    try:
        lock.acquire()
    except Timeout:
        raise FolderBusyError(
            f"{folder} is being written by another process ({_holder(path)}); wait for it to "
            "finish or stop it, then try again (a lock left by a process that has exited is "
            "taken over automatically)"
        ) from None
    _HELD[key] = [lock, 1]
    try:
        yield folder
    finally:
        del _HELD[key]
        lock.release()


def _record(fd: int, purpose: str) -> None:
    """Write who holds the lock into the lock file (read by a refused writer)."""
    info = {"pid": os.getpid(), "host": socket.gethostname(), "purpose": purpose,
            "command": " ".join(sys.argv), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text())
        return (f"PID {info['pid']} on {info['host']}, {info['purpose']} since "
                f"{info['since']}: {info['command']}")
    except (OSError, ValueError, KeyError, TypeError):
        return "its lock file names no holder"
