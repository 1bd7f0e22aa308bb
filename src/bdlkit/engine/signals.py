"""Stop a run cleanly on Ctrl-C (SIGINT) or a scheduler's SIGTERM.

While a run is in progress the first signal only sets a flag; the runner checks it
after each completed step, writes a checkpoint and raises
:class:`Interrupted`. A second signal aborts at once (the default
behaviour). Signals the parent process set to be ignored stay ignored, and outside
the main thread (where Python cannot install handlers) nothing is changed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def deferred_stop() -> Iterator[Callable[[], int | None]]:
    """Yield ``received()``: the number of the first stop signal received, or None."""
    received: dict[str, int | None] = {"signum": None}
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def handler(signum: int, frame: Any) -> None:
        if received["signum"] is not None:
            raise KeyboardInterrupt
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
