"""What the ``bdlkit`` command line prints and hooks around a run: for ``fit``, the progress
bar's redraw rate on a pipe (:func:`fit_progress`) and the ``--tensorboard`` logger
(:func:`fit_callbacks`); around an evaluation, the estimate of the work
before it starts and a progress bar over every prediction pass (both on stderr,
:class:`EvaluationBar`), then a compact summary of the metrics (:func:`summary_lines`, on
stdout).

The evaluation itself never prints (:mod:`bdlkit.evaluation.plan`); it tells an
``EvaluationBar`` its plan and the rows predicted after each draw. The summary shows what a
user reads first: the main test metrics with the numbers of test rows and draws, the OOD
AUROC and AUPR with the AUPR's base rate, agreement and total variation against a
reference, the corruption metrics per severity, and the run
health (each failed check with its fix, then what is information only); ``metrics.json``
and ``report.md`` hold the rest.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

from bdlkit.core.errors import InputError
from bdlkit.evaluation.plan import EvaluationPlan
from bdlkit.evaluation.shift import severity_means

#: Seconds between progress lines when stdout is not a terminal (tqdm's default redraw
#: interval, 0.1 s, makes one line per update in a log file).
NON_TTY_MININTERVAL = 30.0
MAIN_METRICS = ("accuracy", "rmse", "mse", "nll", "ece", "mae", "crps")


def bar_interval(stream: Any) -> dict[str, float]:
    """tqdm keyword arguments for a bar drawn on ``stream``: redraw at most every
    :data:`NON_TTY_MININTERVAL` seconds when it is not a terminal (a piped or redirected
    command), unless the user set ``TQDM_MININTERVAL``."""
    isatty = getattr(stream, "isatty", None)
    if (callable(isatty) and isatty()) or "TQDM_MININTERVAL" in os.environ:
        return {}
    return {"mininterval": NON_TTY_MININTERVAL}


@contextlib.contextmanager
def fit_progress(stream: Any) -> Iterator[None]:
    """Within the block, the run's tqdm bar follows :func:`bar_interval`: a piped or
    redirected ``fit`` logs its first and last state and a line per 30 s, not one line per
    step. (tqdm reads ``TQDM_MININTERVAL`` only when imported, so the runner's bar factory
    is wrapped for the block.)"""
    interval = bar_interval(stream)
    if not interval:
        yield
        return
    from bdlkit.engine import runner

    original = runner.tqdm
    runner.tqdm = functools.partial(original, **interval)
    try:
        yield
    finally:
        runner.tqdm = original


@contextlib.contextmanager
def fit_callbacks(tensorboard: str | None) -> Iterator[list[Any]]:
    """The run's callbacks: a TensorBoardLogger for ``--tensorboard DIR`` (closed, so its
    events are flushed, however the run ends). A failing callback is bad input here (an
    unwritable DIR): one line naming it, the step and how to resume."""
    from bdlkit.engine.callbacks import CallbackError, TensorBoardLogger

    if tensorboard is None:
        yield []
        return
    try:
        logger = TensorBoardLogger(tensorboard)
    except ImportError as err:
        raise InputError(str(err)) from None
    except ValueError as err:
        raise InputError(f"--tensorboard {tensorboard}: {err}") from None
    try:
        with logger:
            yield [logger]
    except CallbackError as err:
        raise InputError(f"--tensorboard {tensorboard}: {err}") from err


class EvaluationBar:
    """A :class:`~bdlkit.evaluation.plan.Progress` for the command line: on ``start``, one
    estimate line (``evaluate: 4 prediction passes: ...``) and a tqdm bar with ETA over the
    plan's row predictions, both on ``stream``.

    Args:
        stream: where to write (stderr).
        bar: draw the bar (``--no-progress`` keeps only the estimate line).
    """

    def __init__(self, stream: Any, bar: bool = True) -> None:
        self.stream = stream
        self.show_bar = bar
        self.bar: Any = None

    def start(self, plan: EvaluationPlan) -> None:
        print(f"evaluate: {plan.describe()}", file=self.stream, flush=True)
        if self.show_bar:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=plan.total, desc="evaluate", unit="row", unit_scale=True,
                            file=self.stream, **bar_interval(self.stream))

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _number(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def summary_lines(values: dict[str, Any]) -> list[str]:
    """The compact summary of ``metrics.json``'s ``values`` (see the module docstring), one
    string per line, indented by two spaces."""
    main = [f"{k} {_number(values[k])}" for k in MAIN_METRICS if k in values]
    sizes = ", ".join(f"{values[k]:,} {label}" for k, label in
                      (("num_test", "test rows"), ("num_draws", "draws")) if k in values)
    lines = [f"  test      {'  '.join(main)}" + (f"   ({sizes})" if sizes else "")]
    if "ood_auroc" in values:
        base = values.get("ood_aupr_base_rate")
        lines.append(f"  OOD       {values.get('ood_data', '')}: AUROC "
                     f"{_number(values['ood_auroc'])}  AUPR {_number(values.get('ood_aupr'))}"
                     + (f" (base rate {base:.4f})" if isinstance(base, float) else "")
                     + "  [entropy score]")
    if "agreement" in values:
        lines.append(f"  reference agreement {_number(values['agreement'])}  total_variation "
                     f"{_number(values.get('total_variation'))}   "
                     f"({values.get('reference_rows', '?'):,} rows)")
    if isinstance(values.get("corruptions"), dict):
        lines += _corruption_lines(values["corruptions"])
    from bdlkit.runs.kept_metrics import describe

    if kept := describe(values):
        lines.append(f"  note      {kept}")
    lines += health_lines(values.get("health")) + note_lines(values.get("health_notes"))
    return lines


def _corruption_lines(corruptions: dict[str, Any]) -> list[str]:
    by_severity = severity_means(corruptions)
    mean = corruptions.get("mean", {})
    head = "".join(f"{s:>8}" for s in by_severity) + f"{'mean':>8}"
    lines = [f"  shift     severity{head}   (mean over {len(corruptions) - 1} corruptions)"]
    for metric in ("accuracy", "ece"):
        cells = "".join(f"{v[metric]:>8.4f}" for v in by_severity.values())
        lines.append(f"            {metric:<8}{cells}{mean.get(metric, float('nan')):>8.4f}")
    return lines


def health_lines(health: Any) -> list[str]:
    """``run health: all checks passed``, or one ``  ! <check>: <message>`` per failed
    check (``None``: no health was computed, no lines)."""
    if health is None:
        return []
    if not health:
        return ["  run health: all checks passed"]
    return [f"  run health: {len(health)} check{'s' * (len(health) > 1)} failed"] + [
        f"  ! {check}: {message}" for check, message in health.items()]


def note_lines(notes: Any) -> list[str]:
    """One ``  i <check>: <message>`` per finding reported as information, not a failure
    (a single chain's R-hat and ESS, :func:`bdlkit.evaluation.health.run_notes`)."""
    return [f"  i {check}: {message}" for check, message in (notes or {}).items()]
