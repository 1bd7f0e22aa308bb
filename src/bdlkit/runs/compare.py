"""``bdlkit compare R1 R2 ...``: the metrics of several run folders side by side.

A run folder written by ``bdlkit fit`` holds ``config.yaml`` (what was run) and
``metrics.json`` (what the last ``fit`` or ``bdlkit evaluate`` computed). :func:`compare`
reads them into one row per run; nothing is recomputed. :func:`markdown` makes one table
with the column names of the ``bench`` tables (``accuracy``, ``NLL``, ``ECE``,
``OOD AUROC``, ``draws``: those of ``bdlkit.bench.l2e_report``), a dash where a run
lacks a metric (``bdlkit evaluate R --ood DATA`` adds the OOD ones), and notes where the
rows are not measured alike; :func:`figure` draws the metrics as bars, one panel each;
:func:`write` writes ``comparison.json``, ``comparison.md`` and ``comparison.png``.

The ``draws`` column is the number of draws each predictive averaged: a sampler's kept
draws, a VI run's ``--eval-samples``, an ensemble's members. They differ between methods
by default; ``bdlkit evaluate R --num-draws N`` evaluates each run over N. A run of several
chains (``--chain-groups``) gives one row per chain.

Example::

    from bdlkit.runs.compare import compare, markdown

    rows = compare(["runs/sghmc", "runs/advi", "runs/ensemble"])
    print(markdown(rows))
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from bdlkit.core.errors import CorruptFileError, InputError
from bdlkit.core.lock import CHAIN_PREFIX, chain_index
from bdlkit.core.plotting import new_figure, save_png
from bdlkit.core.serialization import atomic_write_bytes, load_json, save_json
from bdlkit.runs.yaml_files import load_yaml

DASH = "-"  #: the cell of a metric a run does not have
FILES = ("comparison.json", "comparison.md", "comparison.png")  #: what :func:`write` writes


class Column(NamedTuple):
    """A column of the table: the row's key, its header, the number format."""

    key: str
    header: str
    fmt: str | None = None


#: Every column, in the table's order. What each run was and how it was measured ...
IDENTITY = (Column("run", "run"), Column("method", "method"), Column("data", "data"),
            Column("model", "model"), Column("draws", "draws"),
            Column("test_rows", "test rows"))
#: ... its metrics (``metrics.json``'s keys; ``corr_accuracy``: the mean accuracy over the
#: corruptions and severities) ...
METRICS = (Column("accuracy", "accuracy", ".4f"), Column("rmse", "RMSE", ".4f"),
           Column("mse", "MSE", ".4f"), Column("mae", "MAE", ".4f"),
           Column("nll", "NLL", ".4f"), Column("ece", "ECE", ".4f"),
           Column("brier", "Brier", ".4f"), Column("crps", "CRPS", ".4f"),
           Column("coverage_90", "90 % coverage", ".3f"),
           Column("ood_auroc", "OOD AUROC", ".4f"), Column("ood_data", "OOD data"),
           Column("corr_accuracy", "corr. acc.", ".4f"),
           Column("agreement", "agreement", ".4f"), Column("total_variation", "TV", ".4f"))
#: ... and the run health (``ok``, or the checks that failed).
HEALTH = Column("health", "health")
#: Shown whenever a classification run is compared, as a dash where a run lacks them; the
#: other metric columns are shown when some run has them.
CLASSIFICATION = ("accuracy", "nll", "ece", "ood_auroc")
#: The metrics :func:`figure` draws (where some run has them).
FIGURE = ("accuracy", "rmse", "mse", "nll", "ece", "crps", "ood_auroc", "corr_accuracy",
          "agreement")


def compare(paths: Sequence[str | os.PathLike]) -> list[dict[str, Any]]:
    """One row per run folder in ``paths`` (per chain of a ``--chain-groups`` run).

    Args:
        paths: folders written by ``bdlkit fit`` (finished, so they hold ``metrics.json``).

    Returns:
        Dicts with the keys of :data:`IDENTITY`, :data:`METRICS` and :data:`HEALTH`
        (``None`` where the run has no such value) and ``task``.

    Raises:
        InputError: a path that is not a finished run folder, naming what it is and what
            to pass instead.
    """
    if not paths:
        raise InputError("compare needs at least one run folder (written by `bdlkit fit`)")
    return [read_row(folder, label) for path in paths for folder, label in _runs_in(Path(path))]


def _runs_in(path: Path) -> list[tuple[Path, str]]:
    """The run folders ``path`` stands for, with their labels: itself, or its chains."""
    if not path.exists():
        raise InputError(f"{path}: no such folder; pass run folders written by `bdlkit fit`")
    if not path.is_dir():
        raise InputError(f"{path} is a file, not a run folder; pass the folder that "
                         "`bdlkit fit --out` wrote")
    if (path / "config.yaml").is_file():
        return [(path, str(path))]
    chains = sorted((p for p in path.glob(f"{CHAIN_PREFIX}*")
                     if chain_index(p.name) is not None and (p / "config.yaml").is_file()),
                    key=lambda p: chain_index(p.name))
    if chains:
        return [(p, str(p)) for p in chains]
    for parent in (path, path / "runs"):  # a folder of runs, or a bench suite's output
        if parent.is_dir() and any((c / "config.yaml").is_file() for c in parent.iterdir()):
            raise InputError(f"{path} is not a run but holds run folders: compare them, e.g. "
                             f"`bdlkit compare {parent}/*`")
    raise InputError(f"{path} is not a bdlkit run folder (no config.yaml): pass folders "
                     "written by `bdlkit fit --out`")


def read_row(run_dir: Path, label: str) -> dict[str, Any]:
    """The row of the run in ``run_dir`` (labelled ``label``): see :func:`compare`."""
    cfg = load_yaml(run_dir / "config.yaml")
    if not (run_dir / "metrics.json").is_file():
        raise InputError(f"{label} has no metrics.json: the run has not finished (`bdlkit "
                         f"fit --resume {label}`) or its evaluation was interrupted "
                         f"(`bdlkit evaluate {label}`)")
    values = load_json(run_dir / "metrics.json")
    if not isinstance(values, dict):
        raise CorruptFileError(f"{run_dir / 'metrics.json'} does not hold a mapping of metrics; "
                               f"`bdlkit evaluate {label}` writes it again")
    corruptions = values.get("corruptions")
    mean = corruptions.get("mean") if isinstance(corruptions, dict) else None
    health = values.get("health")
    return {"run": label, "method": cfg.get("method"), "data": cfg.get("data"),
            "model": cfg.get("model"), "task": _task(values),
            "draws": values.get("num_draws"), "test_rows": values.get("num_test"),
            **{c.key: values.get(c.key) for c in METRICS},
            "corr_accuracy": mean.get("accuracy") if isinstance(mean, dict) else None,
            "health": None if not isinstance(health, dict) else (
                "ok" if not health else "failed: " + ", ".join(sorted(health)))}


def _task(values: dict[str, Any]) -> str:
    if "accuracy" in values:
        return "classification"
    return "forecasting" if "crps" in values else "regression"


def columns(rows: Sequence[dict[str, Any]]) -> list[Column]:
    """The columns of the table of ``rows``: what each run was, the metrics some run has
    (and the classification headline metrics whenever a run is a classifier), health."""
    classifier = any(r.get("task") == "classification" for r in rows)
    shown = [c for c in METRICS if any(r.get(c.key) is not None for r in rows)
             or (classifier and c.key in CLASSIFICATION)]
    return [*IDENTITY, *shown, HEALTH]


def cell(value: Any, fmt: str | None) -> str:
    """``value`` as text: a dash when missing, a float in ``fmt``."""
    if value is None:
        return DASH
    if fmt is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, fmt) if math.isfinite(value) else str(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def aligned_table(header: Sequence[str], body: Sequence[Sequence[str]],
                  right: Sequence[bool]) -> str:
    """A Markdown table whose cells are padded to each column's widest one, so it reads
    as a table in a terminal too; ``right[j]`` right-aligns column ``j`` (``---:``)."""
    widths = [max(len(row[j]) for row in (header, *body)) for j in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(text.rjust(w) if r else text.ljust(w)
                                 for text, w, r in zip(row, widths, right)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if r else "-")
                          for w, r in zip(widths, right)) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in body)]) + "\n"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The Markdown table of ``rows`` (aligned; numbers right-aligned)."""
    shown = columns(rows)
    body = [[cell(r.get(c.key), c.fmt) for c in shown] for r in rows]
    right = [c.fmt is not None or c.key in ("draws", "test_rows") for c in shown]
    return aligned_table([c.header for c in shown], body, right)


def notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line for each way the rows are not measured alike (draws, test rows, data)."""
    out = []

    def differ(key: str) -> bool:
        return len({r.get(key) for r in rows if r.get(key) is not None}) > 1

    if differ("draws"):
        out.append("draws: the runs' predictives average different numbers of draws; `bdlkit "
                   "evaluate R --num-draws N` evaluates each over the same N")
    if differ("test_rows"):
        out.append("test rows: the runs were evaluated on different numbers of test rows "
                   "(--max-test); their metrics are not directly comparable")
    if differ("data"):
        out.append("data: the runs are on different data sets; their metrics are not "
                   "directly comparable")
    if differ("ood_data"):
        out.append("OOD data: the OOD AUROCs are against different data sets")
    return out


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The table of ``rows`` and its notes (what ``bdlkit compare`` prints)."""
    lines = notes(rows)
    return table(rows) + ("\n" + "\n".join(f"- {n}" for n in lines) + "\n" if lines else "")


def figure(rows: Sequence[dict[str, Any]], path: str | os.PathLike) -> Path | None:
    """Bars of each metric of :data:`FIGURE` some run has, one panel per metric and one bar
    per run (a dash where a run lacks it); ``None`` without matplotlib or metrics."""
    panels = [c for c in METRICS if c.key in FIGURE
              and any(isinstance(r.get(c.key), (int, float)) for r in rows)]
    if not panels:
        return None
    fig = new_figure((2.6 * len(panels) + 2.5, 0.4 * len(rows) + 1.5))
    if fig is None:
        return None
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, column in zip(axes, panels):
        shown = [(i, float(r[column.key])) for i, r in enumerate(rows)
                 if isinstance(r.get(column.key), (int, float))]
        bars = ax.barh([i for i, _ in shown], [v for _, v in shown], color="tab:blue",
                       edgecolor="black")
        ax.bar_label(bars, fmt="%.3g", padding=2, fontsize=7)
        for i in sorted(set(range(len(rows))) - {i for i, _ in shown}):
            ax.text(0, i, f" {DASH} (not evaluated)", va="center", fontsize=7)
        ax.margins(x=0.25)
        ax.set_title(column.header, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(rows)))
    axes[0].set_yticklabels([f"{r['run']} ({r['method']})" for r in rows], fontsize=8)
    axes[0].set_ylim(len(rows) - 0.5, -0.5)  # the first run on top
    fig.tight_layout()
    return save_png(fig, path)


def write(rows: Sequence[dict[str, Any]], out: str | os.PathLike) -> list[Path]:
    """Write :data:`FILES` into the folder ``out`` (created if needed): the rows as JSON,
    the table with its notes, the figure (without matplotlib, no figure). Returns the
    paths written."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file; give a folder for {', '.join(FILES)}")
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path, png_path = (out / name for name in FILES)
    save_json(json_path, {"runs": [r["run"] for r in rows],
                          "columns": {c.key: c.header for c in columns(rows)},
                          "notes": notes(rows), "rows": list(rows)})
    atomic_write_bytes(md_path, (f"# Comparison of {len(rows)} runs\n\n"
                                 + markdown(rows)).encode())
    return [json_path, md_path, *filter(None, [figure(rows, png_path)])]
