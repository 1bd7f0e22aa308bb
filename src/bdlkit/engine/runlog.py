"""``log.jsonl``: one JSON object per logged step, appended and flushed line by line.

Every line carries a ``digest``: the first 16 hex digits of SHA-256 over the previous
line's digest and this line's entry (all its fields but the digest, ``time_s`` included),
so a line edited, removed or moved after it was written no longer matches (a chain: a
changed line breaks its own digest, a removed one the next line's). Each checkpoint
records the digest of the last line written before it (``log_digest``), which ends the
chain at that checkpoint, so a log cut short is caught too. Readers check the chain and
raise :class:`CorruptFileError` naming the file, the line and the fix; a damaged log is
never silently shortened. Lines written by an older bdlkit have no digest and are read
unchecked (a resume rewrites them with digests).

A crash can cut the last line (no newline at its end): readers skip it. Lines after the
checkpoint's ``log_digest`` are not the checkpoint's: a resume replaces them. On resume
the file is rewritten (atomically) with the entries up to the checkpoint's step, so the
log of a resumed run equals that of an uninterrupted one apart from ``time_s`` (and the
digests, which cover it).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import Tensor

from bdlkit.core.errors import CorruptFileError
from bdlkit.core.serialization import atomic_write_bytes, fsync_file, naming_the_file

DIGEST = "digest"  #: the field of a log line holding its chained digest
LOG_DIGEST = "log_digest"  #: the checkpoint's record of the log's last digest
_START = ""  # the chain's value before the first line


def line_digest(previous: str, entry: dict[str, Any]) -> str:
    """The digest of a log line holding ``entry`` after a line whose digest is
    ``previous`` (``""`` for the first line): SHA-256 over both, 16 hex digits."""
    canonical = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{previous}\n{canonical}".encode()).hexdigest()[:16]


def read_log(path: str | os.PathLike, up_to: int | None = None,
             head: str | None = None) -> list[dict[str, Any]]:
    """The entries of a ``log.jsonl`` (up to step ``up_to``), their digests checked and
    left out.

    Args:
        path: the file; a missing file has no entries (unless ``head`` says otherwise).
        up_to: keep only the entries of steps up to this one.
        head: the ``log_digest`` a checkpoint recorded: reading stops at the line whose
            digest it is (the later lines are not the checkpoint's), and a log that never
            reaches it was cut or changed. None (a checkpoint of an older bdlkit, or no
            checkpoint): every line is read.

    Raises:
        CorruptFileError: the file is not UTF-8 text, a line that is not the cut last one
            is not a log entry (a JSON object with an integer step), a line does not match
            its digest, or the log does not reach ``head``; the message names the file,
            the line and the fix.
    """
    path = Path(path)
    if not path.exists():
        if head:
            raise _corrupt(path, f"is missing (the checkpoint records {DIGEST} {head} as "
                           "its last line)")
        return []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise _corrupt(path, f"is not UTF-8 text (byte {err.start})") from None
    lines = text.splitlines()
    entries, chain, chained = [], _START, False
    for number, line in enumerate(lines, 1):
        if head is not None and chain == head:
            break  # the rest came after the checkpoint
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) and not text.endswith("\n"):
                break  # cut by a crash while it was written
            raise _corrupt(path, f"line {number} is not valid JSON") from None
        step = entry.get("step", 0) if isinstance(entry, dict) else None
        if isinstance(step, bool) or not isinstance(step, int):
            raise _corrupt(path, f"line {number} is not a log entry (a JSON object with an "
                           "integer step)")
        written = entry.pop(DIGEST, None)
        if written is None and chained:
            raise _corrupt(path, f"line {number} has no {DIGEST} but the lines before it do")
        if written is not None:
            if written != line_digest(chain, entry):
                raise _corrupt(path, f"line {number} (step {step}) does not match its "
                               f"{DIGEST}: it was changed, or a line before it removed, "
                               "after it was written")
            chain, chained = written, True
        if up_to is None or step <= up_to:
            entries.append(entry)
    if head is not None and chain != head:
        raise _corrupt(path, f"ends before the line the checkpoint records as its last "
                       f"({DIGEST} {head}): lines were removed or changed")
    return entries


def _corrupt(path: Path, what: str) -> CorruptFileError:
    return CorruptFileError(
        f"{path} {what}: the run's log is damaged; restore it from a backup, or start the "
        f"run again with `bdlkit fit ... --out {path.parent} --overwrite`")


class LogWriter:
    """Writes ``log.jsonl``: each entry a line with its chained digest.

    Args:
        path: the file, rewritten (atomically) with ``entries``: the entries a resumed
            checkpoint has seen (from :func:`read_log`), none for a new run.
        entries: what the file holds to start with.
    """

    def __init__(self, path: str | os.PathLike, entries: list[dict[str, Any]]) -> None:
        self.path, self.head = Path(path), _START
        lines = []
        for entry in entries:
            line, self.head = self._line(entry)
            lines.append(line)
        atomic_write_bytes(self.path, "".join(lines).encode())

    def _line(self, entry: dict[str, Any]) -> tuple[str, str]:
        digest = line_digest(self.head, entry)
        return json.dumps({**entry, DIGEST: digest}) + "\n", digest

    def append(self, entry: dict[str, Any]) -> None:
        """Add ``entry`` as the next line (flushed; :meth:`sync` makes it durable)."""
        line, digest = self._line(entry)
        with naming_the_file(self.path), self.path.open("a") as f:
            f.write(line)
        self.head = digest

    def sync(self) -> None:
        """Make the lines written so far durable (before a checkpoint records the head)."""
        fsync_file(self.path)


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
