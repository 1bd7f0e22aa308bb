"""Covariate shift: accuracy, NLL and ECE on corrupted copies of the test split, one pass
over the draws for all cells.

The cells are the six corruptions of :mod:`bdlkit.data.corruptions` at severities 1-5 (the
noise of severity ``s`` seeded with ``s``). Their corrupted test inputs are built once and
held together, as many cells as fit in ``memory_bytes`` (default 1 GiB: all 30 cells of
MNIST's 9 000 test images in float32; CIFAR-10's go in four groups), and each group is
predicted in one pass over the draws (:func:`bdlkit.evaluation.predictive.bma_over_inputs`):
a draw is read from its store and moved to the device once per group, not once per cell.
The numbers are those of one BMA per cell (same chunks, same accumulation order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bdlkit import metrics
from bdlkit.evaluation.predictive import bma_over_inputs

if TYPE_CHECKING:  # a result is read here, made by the engine above
    from bdlkit.engine.result import Result

#: The corruption severities evaluated, mildest first.
SEVERITIES = (1, 2, 3, 4, 5)
CELL_MEMORY_BYTES = 1 << 30
CELL_METRICS = ("accuracy", "nll", "ece")


def cells() -> list[tuple[str, int]]:
    """Every ``(corruption, severity)`` cell, corruption-major."""
    from bdlkit.data.corruptions import CORRUPTIONS

    return [(name, severity) for name in CORRUPTIONS for severity in SEVERITIES]


def corruption_metrics(result: Result, ds: Any, *, num_samples: int = 32,
                       max_draws: int | None = None,
                       progress: Callable[[int], Any] | None = None, chunk_size: int = 1024,
                       memory_bytes: int = CELL_MEMORY_BYTES) -> dict[str, Any]:
    """``{corruption: {severity: {accuracy, nll, ece}}, "mean": {...}}`` of ``result``'s BMA
    on corrupted copies of ``ds``'s test images.

    Args:
        num_samples, max_draws: the draws to average over (:meth:`bdlkit.Result.iter_draws`).
        progress: called after each draw with the rows it predicted.
        chunk_size: rows per forward pass.
        memory_bytes: how much the corrupted inputs held at once may take; at least one
            cell is always held.
    """
    from bdlkit.data.corruptions import corrupt_dataset

    todo = cells()
    cell_bytes = max(1, ds.x_test.element_size() * ds.x_test.numel())
    per_group = max(1, memory_bytes // cell_bytes)
    out: dict[str, Any] = {}
    for start in range(0, len(todo), per_group):
        group = todo[start:start + per_group]
        inputs = [corrupt_dataset(ds, name, severity, seed=severity).x_test
                  for name, severity in group]
        draws = result.iter_draws(num_samples, max_draws=max_draws)
        predictions = bma_over_inputs(result.problem, draws, inputs, chunk_size=chunk_size,
                                      progress=progress)
        for (name, severity), pred in zip(group, predictions, strict=True):
            values = metrics.classification_metrics(pred.probs, ds.y_test, pred.log_probs)
            out.setdefault(name, {})[str(severity)] = {k: values[k] for k in CELL_METRICS}
    every = [cell for by_severity in out.values() for cell in by_severity.values()]
    out["mean"] = {k: sum(c[k] for c in every) / len(every) for k in CELL_METRICS}
    return out


def severity_means(corruptions: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{severity: {metric: mean over corruptions}}`` of :func:`corruption_metrics`'s output
    (the accuracy-vs-severity view)."""
    by_severity: dict[str, list[dict[str, float]]] = {}
    for name, cells_of in corruptions.items():
        if name == "mean" or not isinstance(cells_of, dict):
            continue
        for severity, values in cells_of.items():
            by_severity.setdefault(severity, []).append(values)
    return {s: {k: sum(v[k] for v in rows) / len(rows) for k in rows[0]}
            for s, rows in sorted(by_severity.items(), key=lambda item: int(item[0]))}
