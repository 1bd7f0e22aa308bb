"""Where data files are looked for, and the error raised when they are not there.

Search order (first hit wins):

1. the ``root`` argument (``--data-root`` on the command line): when given, it is
   the only place searched;
2. the ``BDLKIT_DATA`` environment variable;
3. ``./data`` under the current directory.

A development checkout's ``make`` targets (and the test suite) set ``BDLKIT_DATA`` to the
folder of data files next to the checkout when it is not already set.

bdlkit never downloads data: a missing file is an error that lists every path tried.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "BDLKIT_DATA"


class DataNotFoundError(FileNotFoundError):
    """A data file was not found under any data root; the message lists the paths tried."""


def candidate_roots(root: str | os.PathLike | None = None) -> list[Path]:
    """The data roots searched, in order (see the module docstring)."""
    if root is not None:
        return [Path(root).expanduser()]
    roots: list[Path] = []
    env = os.environ.get(ENV_VAR)
    if env:
        roots.append(Path(env).expanduser())
    roots.append(Path.cwd() / "data")
    unique: list[Path] = []
    for r in roots:
        if r not in unique:
            unique.append(r)
    return unique


def find(relative: str | os.PathLike, root: str | os.PathLike | None = None, *, what: str) -> Path:
    """Return ``<data root>/<relative>`` for the first root where it exists.

    Args:
        relative: path of the file or folder below a data root.
        root: an explicit data root (then only it is searched).
        what: a human name for the data, used in the error message.

    Raises:
        DataNotFoundError: nothing found; the message lists every path tried and the fix.
    """
    tried = [r / relative for r in candidate_roots(root)]
    for path in tried:
        if path.exists():
            return path
    listing = "\n".join(f"  - {p}" for p in tried)
    raise DataNotFoundError(
        f"could not find {what} ({relative}). Paths tried:\n{listing}\n"
        f"Fix: pass root=... (CLI: --data-root DIR) or set {ENV_VAR}=DIR to a folder that "
        f"contains {relative}. bdlkit never downloads data."
    )
