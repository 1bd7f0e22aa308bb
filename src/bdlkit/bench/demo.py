"""``bdlkit demo``: the methods side by side on an MLP on scikit-learn digits, in one table.

The demo is the ``digits`` suite (:mod:`bdlkit.bench.digits`) on the methods that work on
a network. The methods known to be weak there are left out unless asked for
(``bdlkit demo --all``) and each is named with its reason under the table, so a first
screen never shows an NLL of 90 without saying why: fisher_vi, gsm and bam (the score-VI
paper reports that GSM and BaM fail on large networks; Fisher-divergence VI's minibatch
gradient is biased). The table is aligned for any method name.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bdlkit import algorithms
from bdlkit.bench import digits
from bdlkit.runs.compare import Column, aligned_table, cell

#: Methods known to be weak on networks, each with its one-line reason.
WEAK_ON_NETWORKS: dict[str, str] = {
    "fisher_vi": "Fisher-divergence VI: its minibatch gradients are biased, and on networks "
                 "it trails ADVI far in bdlkit's own runs (this demo: accuracy 0.22)",
    "gsm": "designed for exact scores: with minibatch scores its variances overshoot "
           "(score-VI paper: fails on large networks)",
    "bam": "designed for exact scores: a heuristic on minibatches (score-VI paper: fails "
           "on large networks)",
}
#: The demo's table (the columns of :mod:`bdlkit.runs.compare`'s tables).
COLUMNS = (Column("method", "method"), Column("kind", "kind"),
           Column("accuracy", "accuracy", ".4f"), Column("nll", "NLL", ".4f"),
           Column("ece", "ECE", ".4f"), Column("train_s", "train (s)", ".2f"),
           Column("eval_s", "eval (s)", ".2f"))


def methods(include_weak: bool = False) -> list[str]:
    """The registered methods the demo runs (in name order): those the digits suite runs,
    without :data:`WEAK_ON_NETWORKS` unless ``include_weak``."""
    return [m for m in digits.runnable() if include_weak or m not in WEAK_ON_NETWORKS]


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The demo's table of ``rows`` (:func:`bdlkit.bench.digits.run`'s), aligned."""
    body = [[cell(r[c.key], c.fmt) for c in COLUMNS] for r in rows]
    return aligned_table([c.header for c in COLUMNS], body, [c.fmt is not None for c in COLUMNS])


def notes(shown: Sequence[str], include_weak: bool) -> list[str]:
    """The lines under the table: each weak method's reason (why it is left out, or why
    its numbers are poor), and the methods the suite cannot run here."""
    weak = [m for m in WEAK_ON_NETWORKS if m in algorithms.METHODS]
    lines = []
    if weak and not include_weak:
        lines.append("left out, known to be weak on networks (`bdlkit demo --all` runs them):")
    lines += [f"  {m}: {WEAK_ON_NETWORKS[m]}" for m in weak if include_weak == (m in shown)]
    lines += [f"not run: {m}: {why}" for m, why in digits.SKIP.items()]
    return lines


def run(out: Path, *, steps: int, seed: int = 0, include_weak: bool = False) -> str:
    """Fit the demo's methods into ``out`` (the digits suite's folder) and return what
    ``bdlkit demo`` prints: the table, the notes and where the report is."""
    chosen = methods(include_weak)
    print(f"bdlkit demo: {len(chosen)} methods on an MLP on scikit-learn digits ({steps} "
          "steps each)", file=sys.stderr)
    flags = " --all" if include_weak else ""
    rows = digits.run(Path(out), seed=seed, steps=steps, methods=chosen,
                      command=f"bdlkit demo --steps {steps} --seed {seed}{flags}")
    return "\n".join([table(rows).rstrip("\n"), *notes(chosen, include_weak),
                      f"report: {Path(out) / 'report.md'}"])
