"""What an evaluation will do, known before it does any of it: its prediction passes.

:func:`bdlkit.evaluation.evaluate` predicts in passes over the draws: the test split, the
OOD inputs, the corrupted copies of the test split (all cells of a memory group in one
pass, :mod:`bdlkit.evaluation.shift`) and the diagnostics probe. Each pass costs about
``draws × rows`` forward rows, so an :class:`EvaluationPlan` (made by
:func:`plan_evaluation` from the draw counts of :meth:`bdlkit.Result.num_streamed`,
without reading a draw) is what a progress bar counts and what the command line prints
as its estimate before work starts.

Progress is reported, never printed, here: ``evaluate(progress=...)`` takes a
:class:`Progress` (a tqdm bar will do: its ``total`` is set to the plan's) and calls its
``update(rows)`` after each draw of every pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from torch import Tensor

from bdlkit.core.draws import KeptDraws
from bdlkit.evaluation.shift import cells

if TYPE_CHECKING:  # a result is read here, made by the engine above
    from bdlkit.engine.result import Result



class Progress(Protocol):
    """What :func:`~bdlkit.evaluation.evaluate` reports to: ``update(rows)`` after each draw
    of a pass; ``start(plan)``, if present, once before any work (else a ``total``
    attribute, as a tqdm bar's, is set to ``plan.total``)."""

    def update(self, n: int) -> Any: ...


@dataclasses.dataclass(frozen=True)
class Pass:
    """One pass over ``draws`` draws predicting ``rows`` input rows per draw."""

    name: str  # "test", "ood", "corruptions", "probe"
    draws: int
    rows: int

    @property
    def work(self) -> int:
        return self.draws * self.rows


@dataclasses.dataclass(frozen=True)
class EvaluationPlan:
    """The passes of one evaluation, in the order they run."""

    passes: tuple[Pass, ...]

    @property
    def total(self) -> int:
        """Row predictions over all passes (a progress bar's total)."""
        return sum(p.work for p in self.passes)

    def describe(self) -> str:
        """One line: each pass as ``name draws × rows`` and the total, e.g.
        ``test 100 draws × 9,000 rows + ood 100 draws × 18,724 rows + ... = 29.6M row
        predictions``."""
        parts = []
        for p in self.passes:
            rows = (f"{len(cells())} cells × {p.rows // len(cells()):,} rows"
                    if p.name == "corruptions" else f"{p.rows:,} rows")
            parts.append(f"{p.name} {p.draws} draws × {rows}")
        return (f"{len(self.passes)} prediction passes: " + " + ".join(parts)
                + f" = {_short(self.total)} row predictions")


def _short(n: int) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f}{suffix}"
    return str(n)


def ood_inputs(ood: Any) -> Tensor:
    """The OOD data set's test inputs, or its training inputs when it has no test split."""
    return ood.x_test if len(ood.x_test) else ood.x_train


def plan_evaluation(result: Result, ds: Any, *, num_samples: int = 32,
                    max_draws: int | None = None, ood: Any = None, corruptions: bool = False,
                    diagnostics: bool = True, probe_size: int = 256) -> EvaluationPlan:
    """The passes :func:`~bdlkit.evaluation.evaluate` makes with these arguments.

    Args:
        num_samples, max_draws: how many draws the BMA passes average over
            (:meth:`bdlkit.Result.iter_draws`).
        ood, corruptions, diagnostics, probe_size: as for ``evaluate``; the probe pass
            (sampler diagnostics) predicts with every kept draw, since it describes the chain.
    """
    draws = result.num_streamed(num_samples, max_draws)
    n_test = len(ds.x_test)
    passes = [Pass("test", draws, n_test)]
    if ood is not None:
        passes.append(Pass("ood", draws, len(ood_inputs(ood))))
    if corruptions:
        passes.append(Pass("corruptions", draws, len(cells()) * n_test))
    if diagnostics and isinstance(result.draws, KeptDraws) and result.draws.count >= 4:
        passes.append(Pass("probe", result.draws.count, min(probe_size, n_test)))
    return EvaluationPlan(tuple(passes))


def start(progress: Progress | None, plan: EvaluationPlan) -> Callable[[int], Any] | None:
    """Tell ``progress`` the plan (``start(plan)``, else ``total = plan.total``); returns its
    ``update`` (``None`` without progress)."""
    if progress is None:
        return None
    if callable(getattr(progress, "start", None)):
        progress.start(plan)
    elif hasattr(progress, "total"):
        progress.total = plan.total
        if callable(getattr(progress, "refresh", None)):
            progress.refresh()
    return progress.update


def counted(draws: Iterable[Any], rows: int,
            update: Callable[[int], Any] | None) -> Iterator[Any]:
    """``draws``, calling ``update(rows)`` as each one's predictions are done (when the
    consumer asks for the next draw, or the stream ends)."""
    for theta in draws:
        yield theta
        if update is not None:
            update(rows)


def first_test_rows(ds: Any, max_test: int | None) -> Any:
    """``ds`` with only its first ``max_test`` test rows (``None``: ``ds`` itself).

    Args:
        ds: a :class:`~bdlkit.data.Dataset` (any dataclass with ``x_test``/``y_test``).
        max_test: how many test rows to keep, >= 1 (no stratification: the first rows).
    """
    if max_test is not None and max_test < 1:
        raise ValueError(f"max_test must be >= 1, got {max_test}")
    if max_test is None or max_test >= len(ds.x_test):
        return ds
    return dataclasses.replace(ds, x_test=ds.x_test[:max_test], y_test=ds.y_test[:max_test])
