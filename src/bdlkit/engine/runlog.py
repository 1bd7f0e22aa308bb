"""``log.jsonl``: one JSON object per logged step, appended and flushed line by line.

A crash can cut the last line; readers skip it. On resume the file is rewritten
(atomically) with the entries up to the checkpoint's step, so the log of a resumed run
equals that of an uninterrupted one apart from the ``time_s`` field.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bdlkit.core.serialization import atomic_write_bytes


def read_log(path: str | os.PathLike, up_to: int | None = None) -> list[dict[str, Any]]:
    """Entries of a ``log.jsonl`` (up to step ``up_to``); a line cut by a crash is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if up_to is None or entry.get("step", 0) <= up_to:
            entries.append(entry)
    return entries


def truncate_log(path: str | os.PathLike, step: int) -> None:
    """Keep only the entries up to ``step`` (what the checkpoint being resumed has seen)."""
    kept = read_log(path, step) if step else []
    atomic_write_bytes(path, "".join(json.dumps(e) + "\n" for e in kept).encode())


def append_log(path: str | os.PathLike, entry: dict[str, Any]) -> None:
    with Path(path).open("a") as f:
        f.write(json.dumps(entry) + "\n")
