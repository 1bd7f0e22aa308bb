"""The ``startup`` suite: how long a user waits before bdlkit answers.

Each command runs as a fresh process (its whole wall time, interpreter start included)
``repeats`` times; the table gives the minimum, median and maximum, the goal and whether
the median meets it. ``import torch`` is the floor every command that trains pays, and
is measured beside them so that a slow machine shows as a slow floor:

* ``import bdlkit``: names only, each imported on first use (:mod:`bdlkit`), goal 1 s;
* ``bdlkit --help``: answered by :mod:`bdlkit.cli_commands` without torch, goal 1.5 s;
* ``bdlkit fit --help``: the full parser (every method, model and data set), no goal;
* ``import bdlkit; bdlkit.Target``: the first use of a name imports torch.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bdlkit.bench.common import prepare_bench_out, write_results

DESCRIPTION = "start-up wall time of import bdlkit and bdlkit --help (fresh processes)"

#: (row name, the command's arguments after the interpreter, goal in seconds or None)
COMMANDS: tuple[tuple[str, tuple[str, ...], float | None], ...] = (
    ("import bdlkit", ("-c", "import bdlkit"), 1.0),
    ("bdlkit --help", ("-m", "bdlkit", "--help"), 1.5),
    ("bdlkit fit --help", ("-m", "bdlkit", "fit", "--help"), None),
    ("import torch (floor)", ("-c", "import torch"), None),
    ("bdlkit.Target (first use)", ("-c", "import bdlkit; bdlkit.Target"), None),
)


def wall_times(args: tuple[str, ...], repeats: int) -> list[float]:
    """Wall seconds of ``python args`` run ``repeats`` times as fresh processes; a command
    that fails raises with its stderr (a timing of an error would mean nothing)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              check=False)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(f"`python {' '.join(args)}` failed: {done.stderr[-500:]}")
    return times


def run(out: Path, *, quick: bool = False, seed: int = 0, command: str | None = None,
        echo: bool = True, repeats: int | None = None) -> list[dict[str, Any]]:
    """Time each of :data:`COMMANDS` (5 repeats; ``quick``: 2) and write the results."""
    prepare_bench_out(out)
    repeats = repeats or (2 if quick else 5)
    rows = []
    for name, args, goal in COMMANDS:
        times = wall_times(args, repeats)
        median = statistics.median(times)
        rows.append({"command": name, "min_s": min(times), "median_s": median,
                     "max_s": max(times), "goal_s": goal,
                     "meets_goal": None if goal is None else median <= goal})
    floor = next(r["median_s"] for r in rows if r["command"].startswith("import torch"))
    for r in rows:
        r["ratio_to_torch"] = r["median_s"] / floor
    write_results(out, "startup", quick, command, "start-up wall time",
                  f"{repeats} fresh processes per command, median reported, seed unused "
                  f"({seed})", rows, {"repeats": repeats}, floatfmt=".3f",
                  note="Run it on an idle machine: every other process on the cores "
                       "lengthens each figure.")
    return rows
