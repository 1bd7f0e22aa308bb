"""Stop a run cleanly on Ctrl-C (SIGINT) or a scheduler's SIGTERM.

While a run is in progress the first signal only sets a flag; the runner checks it
after each completed step, writes a checkpoint and raises
:class:`Interrupted`. A second signal aborts at once (:class:`SignalStop`). Outside a
run's steps the command line makes SIGTERM raise :class:`SignalStop` as Ctrl-C raises
``KeyboardInterrupt`` (:func:`stops_raise`), so that a command a scheduler or launcher
stops says so and releases its lock instead of vanishing. Signals the parent process
set to be ignored stay ignored, and outside the main thread (where Python cannot
install handlers) nothing is changed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalStop(KeyboardInterrupt):
    """A stop signal that ends a command at once: SIGTERM outside a run's steps, or a
    second SIGINT/SIGTERM during them.

    Args:
        signum: the signal's number (the command line exits with 128 + signum).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def __reduce__(self) -> tuple:
        return (SignalStop, (self.signum,))


@contextmanager
def stops_raise() -> Iterator[Callable[[], None]]:
    """SIGTERM raises :class:`SignalStop` in the main thread while the block runs (as
    Ctrl-C raises ``KeyboardInterrupt``); the previous handler is restored after. Yields
    ``ending()``: from then on SIGINT and SIGTERM are ignored until the block ends, while
    the command reports why it stops (a launcher's SIGTERM, which follows the loss of
    another rank, must not cut that report short)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN):
        yield lambda: None
        return

    def handler(signum: int, frame: Any) -> None:
        raise SignalStop(signum)

    previous = {sig: old for sig in STOP_SIGNALS if (old := signal.getsignal(sig)) is not None}

    def ending() -> None:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield ending
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def deferred_stop() -> Iterator[Callable[[], int | None]]:
    """Yield ``received()``: the number of the first stop signal received, or None."""
    received: dict[str, int | None] = {"signum": None}
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def handler(signum: int, frame: Any) -> None:
        if received["signum"] is not None:
            raise SignalStop(signum)
        received["signum"] = signum

    previous = {}
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield lambda: received["signum"]
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by Ctrl-C (SIGINT) or SIGTERM after a checkpoint was written."""

    def __init__(self, step: int, checkpoint: Path | None, signum: int = signal.SIGINT) -> None:
        where = f"; checkpoint {checkpoint}" if checkpoint else " (no run_dir: nothing saved)"
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name} after step {step}{where}")
        self.step, self.checkpoint, self.signum = step, checkpoint, signum

    def __reduce__(self) -> tuple:  # picklable, e.g. from a worker process
        return (Interrupted, (self.step, self.checkpoint, self.signum))
