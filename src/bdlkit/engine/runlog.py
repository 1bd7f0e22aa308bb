"""``log.jsonl``: one JSON object per logged step, appended and flushed line by line.

A crash can cut the last line; readers skip it. On resume the file is rewritten
(atomically) with the entries up to the checkpoint's step, so the log of a resumed run
equals that of an uninterrupted one apart from the ``time_s`` field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import Tensor

from bdlkit.core.errors import CorruptFileError
from bdlkit.core.serialization import atomic_write_bytes


def read_log(path: str | os.PathLike, up_to: int | None = None) -> list[dict[str, Any]]:
    """Entries of a ``log.jsonl`` (up to step ``up_to``); a line cut by a crash is skipped.
    A file that is not UTF-8 text, or a line that is JSON but not a log entry, raises
    :class:`CorruptFileError` naming the file and the fix."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise _corrupt(path, f"is not UTF-8 text (byte {err.start})") from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        step = entry.get("step", 0) if isinstance(entry, dict) else None
        if isinstance(step, bool) or not isinstance(step, int):
            raise _corrupt(path, f"line {number} is not a log entry (a JSON object with an "
                           "integer step)")
        if up_to is None or step <= up_to:
            entries.append(entry)
    return entries


def _corrupt(path: Path, what: str) -> CorruptFileError:
    return CorruptFileError(
        f"{path} {what}: the run's log is corrupt; restore it from a backup, or start the "
        f"run again with `bdlkit fit ... --out {path.parent} --overwrite`")


def truncate_log(path: str | os.PathLike, step: int) -> None:
    """Keep only the entries up to ``step`` (what the checkpoint being resumed has seen)."""
    kept = read_log(path, step) if step else []
    atomic_write_bytes(path, "".join(json.dumps(e) + "\n" for e in kept).encode())


def append_log(path: str | os.PathLike, entry: dict[str, Any]) -> None:
    with Path(path).open("a") as f:
        f.write(json.dumps(entry) + "\n")


def log_entry(info: dict[str, Any], t: int, total: int, elapsed: float, before: int,
              log_every: int, eval_every: int | None,
              evaluate: Callable[[], dict[str, float]]) -> dict[str, float] | None:
    """The log entry after step ``t`` when one of steps ``before + 1 .. t`` (a chunk) is
    due to be logged or evaluated (``evaluate()``: the held-out metrics), else None."""
    due_eval = due(eval_every, before, t) or (eval_every is not None and t == total)
    if not (due(log_every, before, t) or t == total or due_eval):
        return None
    entry: dict[str, float] = {"step": t, **{k: scalar(v) for k, v in info.items()
                                              if v is not None}}
    if due_eval:
        entry.update({f"eval/{k}": float(v) for k, v in evaluate().items()})
    entry["time_s"] = round(elapsed, 3)
    return entry


def due(every: int | None, before: int, t: int) -> bool:
    """Whether a multiple of ``every`` lies in steps ``before + 1 .. t`` (one step, or a
    compiled chunk: something due inside it is done at its end)."""
    return every is not None and t // every > before // every


def postfix(entry: dict[str, float]) -> dict[str, str]:
    """The progress bar's fields of a log entry: the log density and the evaluations."""
    keys = [k for k in entry if k == "log_prob" or k.startswith("eval/")]
    return {k.removeprefix("eval/"): f"{entry[k]:.4g}" for k in keys}


def scalar(v: Any) -> float:
    """A log entry's value: a float (a tensor is summed, e.g. over chains)."""
    if isinstance(v, Tensor):
        v = v.detach()
        return float(v.sum()) if v.numel() > 1 else float(v)
    return float(v)
