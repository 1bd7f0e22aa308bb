"""Runner callbacks: follow a run as it logs, e.g. in TensorBoard or another tracker.

``Runner(..., callbacks=[...])``, ``infer(..., callbacks=[...])`` and ``bdlkit fit
--tensorboard DIR`` take callbacks. A callback is either

- a plain callable ``cb(event)``, called with a :class:`LogEvent` for each logged entry;
- or an object with any of the hooks of :class:`Hooks` (each optional; derive from it or
  not): ``on_start(step, total)`` before the first step (``step`` > 0 on a resume),
  ``on_log(event)`` for each logged entry, ``on_end(result)`` with the run's
  :class:`~bdlkit.engine.result.Result`.

``event.entry`` is a copy (one per callback) of the dict that goes to ``log.jsonl`` and
``Result.history``, at the same steps (every ``log_every``, every ``eval_every`` and the
last step). An object that has a hook is not itself called.

Example: a callable of your own beside TensorBoard, and a tracker object::

    from bdlkit import infer
    from bdlkit.engine.callbacks import TensorBoardLogger

    losses = []
    result = infer(model, "sgld", data=(x, y), steps=500, log_every=10,
                   callbacks=[lambda event: losses.append(event.entry["log_prob"]),
                              TensorBoardLogger("tb/sgld")])

    class Tracker:                       # e.g. MLflow: only the hooks you need
        def on_log(self, event):
            mlflow.log_metrics(event.scalars(), step=event.step)

A callback that raises stops the run with a :class:`CallbackError` naming it, the step
and the original error (chained): in ``on_log`` the step's entry is already in
``log.jsonl``, the other callbacks still see it, and with a ``run_dir`` a checkpoint of
that step is written first, so ``fit(resume=True)`` (``bdlkit fit --resume``) continues
from there once the callback is fixed. In ``on_end`` the run has finished (with a
``run_dir`` its final checkpoint is on disk; a resume returns the Result without a step)
and the error holds the Result as ``err.result``. Only an ``Exception`` is caught: a
``KeyboardInterrupt`` or ``SystemExit`` raised in a callback goes through unchanged.

Callbacks are not part of the run's state: a checkpoint does not hold them and a resume
may pass others or none. A resume calls ``on_start`` with the checkpoint's step, then
``on_log`` with that step's entry again when it was logged (so a callback that failed on
it, or a tracker whose process died before writing it, has it; one that had it sees it
twice), then the entries after it. :class:`TensorBoardLogger` hides the events an
earlier writer logged from that step on, so its curves hold each step once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bdlkit.core.extras import require

HOOKS = ("on_start", "on_log", "on_end")


@dataclass(frozen=True)
class LogEvent:
    """One logged entry of a run, as a callback receives it.

    Args:
        step: the step just completed (1-based, as in ``log.jsonl``).
        total: the run's total number of steps.
        entry: a copy of the logged dict (``step``, the step's info such as
            ``log_prob``, ``eval/<name>`` on evaluation steps, ``time_s``).
        method: the algorithm's name (``"sgld"``, ...).
    """

    step: int
    total: int
    entry: dict[str, float]
    method: str

    def scalars(self) -> dict[str, float]:
        """The entry without its ``step``: ``{name: value}`` for a tracker."""
        return {k: float(v) for k, v in self.entry.items() if k != "step"}


class Hooks:
    """Optional base class of a callback object: every hook does nothing until overridden."""

    def on_start(self, step: int, total: int) -> None:
        """Before the first step; ``step`` is where the run starts (> 0 on a resume)."""

    def on_log(self, event: LogEvent) -> None:
        """For each logged entry (see :class:`LogEvent`)."""

    def on_end(self, result: Any) -> None:
        """After the last step, with the run's Result (only when the run finishes)."""


# what callbacks= takes: a callable of a LogEvent, or an object with any of the HOOKS
Callback = Callable[[LogEvent], Any] | Hooks


class CallbackError(RuntimeError):
    """A callback raised: the run stopped (module docstring). ``callback`` names it,
    ``step`` is the last completed step, ``checkpoint`` the one to resume from (None
    without a run_dir) and ``result`` the finished run's Result when ``on_end`` raised."""

    def __init__(self, message: str, callback: str, step: int,
                 checkpoint: Path | None = None, result: Any = None) -> None:
        super().__init__(message)
        self.callback, self.step, self.checkpoint, self.result = callback, step, checkpoint, result


@dataclass(frozen=True)
class Callbacks:
    """A run's callbacks, checked once, called by the runner (errors: module docstring).

    Args:
        items: callables and hook objects, in the order they are called.
    """

    items: tuple[Any, ...] = ()

    @classmethod
    def of(cls, callbacks: Iterable[Callback] | None) -> Callbacks:
        """``callbacks`` checked: each must be callable or have a hook (a TypeError names
        the one that is neither)."""
        if callbacks is None:
            return cls()
        if callable(callbacks) or isinstance(callbacks, Hooks):
            raise TypeError("callbacks= takes a list of callbacks: pass [callback]")
        items = tuple(callbacks)
        for cb in items:
            if not (callable(cb) or has_hooks(cb)):
                raise TypeError(f"callback {callback_name(cb)} is neither callable nor has "
                                f"any of {', '.join(HOOKS)}: see bdlkit.engine.callbacks")
        return cls(items)

    def start(self, step: int, total: int, history: Sequence[dict[str, Any]] = (),
              method: str = "") -> None:
        """``on_start(step, total)`` of each callback that has it, then, when the run
        resumes at a logged step, that entry (the last of ``history``) again (module
        docstring)."""
        where, failure = "on_start", self._call("on_start", step, total)
        if failure is None and history and history[-1]["step"] == step:
            where = f"on_log of step {step}'s entry, given again on resume"
            failure = self._call("on_log", LogEvent(step, total, dict(history[-1]), method))
        if failure is not None:
            cb, err = failure
            raise CallbackError(f"callback {cb} raised {_describe(err)} in {where}, before "
                                f"step {step + 1}: no step ran; fix the callback or drop it (a new "
                                f"`bdlkit fit` left only config.yaml in its --out: rerun it "
                                f"with --overwrite; a --resume can be rerun as it was)",
                                cb, step) from err

    def log(self, event: LogEvent) -> tuple[str, BaseException] | None:
        """Every callback's ``on_log(event)`` (or the callable itself); the first failure as
        (callback name, error), for the runner to raise with :meth:`log_error` once the
        step is checkpointed."""
        return self._call("on_log", event)

    def end(self, result: Any, step: int, checkpoint: Path | None) -> None:
        """``on_end(result)`` of each callback that has it."""
        failure = self._call("on_end", result)
        if failure is not None:
            cb, err = failure
            saved = (f"; its final checkpoint {checkpoint} is saved: fit(resume=True) with the "
                     "same run_dir returns its Result without running a step" if checkpoint
                     else "; its Result is err.result (no run_dir: nothing was saved)")
            raise CallbackError(f"callback {cb} raised {_describe(err)} in on_end: the run "
                                f"finished all {step} steps{saved}", cb, step, checkpoint,
                                result) from err

    @staticmethod
    def log_error(failure: tuple[str, BaseException], step: int, total: int,
                  checkpoint: Path | None, run_dir: Path | None) -> CallbackError:
        """The error the runner raises for ``failure`` (from :meth:`log`) at ``step``."""
        cb, err = failure
        saved = (f"; checkpoint {checkpoint} holds step {step}: fix the callback and resume "
                 f"(fit(resume=True), or `bdlkit fit --resume {run_dir}`)"
                 if checkpoint is not None else " (no run_dir: nothing was saved)")
        error = CallbackError(f"callback {cb} raised {_describe(err)} at step {step} of {total}: "
                              f"the run stopped there{saved}", cb, step, checkpoint)
        error.__cause__, error.__suppress_context__ = err, True
        return error

    def _call(self, hook: str, *args: Any) -> tuple[str, BaseException] | None:
        """``hook(*args)`` of each callback object that has it; a plain callable is called
        for ``on_log`` only. Every callback is called; the first failure is returned."""
        failure = None
        for cb in self.items:
            target = getattr(cb, hook, None) if has_hooks(cb) else cb if hook == "on_log" else None
            if target is None:
                continue
            try:
                target(*(_own_copy(a) for a in args))
            except Exception as err:  # noqa: BLE001 - reported as a CallbackError
                failure = failure or (callback_name(cb), err)
        return failure


def _own_copy(arg: Any) -> Any:
    """A LogEvent with its own entry dict, so one callback's edits reach no other."""
    return replace(arg, entry=dict(arg.entry)) if isinstance(arg, LogEvent) else arg


def has_hooks(cb: Any) -> bool:
    """Whether ``cb`` is a hook object (its hooks are called, not ``cb`` itself)."""
    return any(hasattr(cb, hook) for hook in HOOKS)


def callback_name(cb: Any) -> str:
    """How an error names ``cb``: ``module.function``, or its repr when its class defines
    one, else its class name."""
    qualname = getattr(cb, "__qualname__", None)
    if qualname is not None:
        return f"{getattr(cb, '__module__', None) or '?'}.{qualname}"
    if type(cb).__repr__ is not object.__repr__:
        return repr(cb)
    return type(cb).__qualname__


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


class TensorBoardLogger(Hooks):
    """Write every scalar of each logged entry to TensorBoard (``tensorboard --logdir``).

    Each key of the entry but ``step`` (``log_prob``, ``eval/accuracy``, ``time_s``, ...)
    becomes a scalar tag at the entry's step, through ``torch.utils.tensorboard``'s
    ``SummaryWriter``. Needs the ``tensorboard`` package (``pip install
    'bdlkit[tensorboard]'``), checked here so a missing one fails before the run.

    Give each run its own ``log_dir``, as TensorBoard expects: the writer starts with a
    purge at the step the run starts from, so events an earlier writer left in ``log_dir``
    from that step on (an interrupted run resumed from its checkpoint, a run replaced with
    ``--overwrite``) are hidden and the curves equal ``log.jsonl``.
    ``on_end`` closes the writer; use ``with TensorBoardLogger(...)`` (or :meth:`close`)
    to flush it when a run stops early.

    Args:
        log_dir: folder for the events files (created when the run starts); an existing
            file there is refused at once (ValueError).
        flush_secs: write buffered events to disk at least this often.
    """

    def __init__(self, log_dir: str | os.PathLike, *, flush_secs: float = 10.0) -> None:
        require("tensorboard", "tensorboard", "TensorBoardLogger (bdlkit fit --tensorboard)")
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        if self.log_dir.exists() and not self.log_dir.is_dir():
            raise ValueError(f"{self.log_dir} is a file, not a folder: give TensorBoard a "
                             "folder (one per run) for its events files")
        self.flush_secs = flush_secs
        self._writer_class = SummaryWriter
        self._writer: Any = None

    def __repr__(self) -> str:
        return f"TensorBoardLogger({str(self.log_dir)!r})"

    def on_start(self, step: int, total: int) -> None:
        self.close()
        self._writer = self._writer_class(str(self.log_dir), purge_step=step,
                                          flush_secs=self.flush_secs)

    def on_log(self, event: LogEvent) -> None:
        if self._writer is None:  # called outside a Runner
            self.on_start(event.step, event.total)
        for tag, value in event.scalars().items():
            self._writer.add_scalar(tag, value, event.step)

    def on_end(self, result: Any) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close the writer (a later run opens a new one)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> TensorBoardLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
