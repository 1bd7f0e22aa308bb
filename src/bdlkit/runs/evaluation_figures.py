"""The evaluation plots of a run: regression intervals, OOD entropy/ROC, corruption severity.

* ``intervals.png`` (regression): predicted against true test targets with the BMA
  mixture's central 50 % and 90 % intervals, and a coverage calibration curve (empirical
  coverage of the central intervals at levels 0.1..0.9 against nominal) from the mixture
  CDF at each target (:attr:`bdlkit.evaluation.predictive.RegressionBMA.cdf`), so the 90 %
  point is the report's ``coverage_90``.
* ``ood.png`` (classification with ``--ood``): histograms of the predictive entropy of the
  test and the OOD inputs, and the ROC curve of that score with AUROC, AUPR and the AUPR
  base rate, the same numbers as :func:`bdlkit.metrics.ood_metrics`.
* ``corruptions.png`` (``--corruptions``): accuracy and ECE against severity, 0 being the
  clean test split, a line per corruption and their mean in bold.

The numbers each plot shows come from small functions (:func:`coverage_curve`,
:func:`ood_roc`, :func:`severity_curves`) that tests check on their own. Drawn pyplot-free
like the other run figures (:mod:`bdlkit.runs.figures`); every plot function returns the
PNG's path, or ``None`` without matplotlib.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bdlkit.core.plotting import new_figure, save_png
from bdlkit.evaluation.draw_predictions import bma_with_samples
from bdlkit.metrics.forecasting import GaussianMixture
from bdlkit.metrics.ood import auroc_aupr
from bdlkit.metrics.regression import coverage_from_cdf, rmse

__all__ = [
    "corruption_plot",
    "coverage_curve",
    "evaluation_mixture",
    "intervals_plot",
    "ood_plot",
    "ood_roc",
    "plotted_points",
    "regression_intervals_figure",
    "severity_curves",
]

COVERAGE_LEVELS = tuple(round(0.1 * i, 1) for i in range(1, 10))
BANDS = ((0.9, 1.0), (0.5, 2.5))  # (level, line width) of the interval bars


def coverage_curve(cdf: Tensor, levels: tuple[float, ...] = COVERAGE_LEVELS) -> list[float]:
    """Empirical coverage of the central ``level`` intervals, one value per level.

    Args:
        cdf: the predictive CDF at each target element (any shape); a target lies in the
            central ``level`` interval iff its CDF value is in ``[(1−l)/2, (1+l)/2]``.
        levels: the nominal levels, each in (0, 1).
    """
    return [coverage_from_cdf(cdf, level) for level in levels]


def plotted_points(mean: Tensor, count: int = 300) -> Tensor:
    """Indices of at most ``count`` test points spread evenly over the sorted predictions.

    Args:
        mean: the predictive mean ``(n, ...)``; points are ordered by their first output.
        count: how many points to keep (all when ``n <= count``).
    """
    order = torch.argsort(mean.reshape(len(mean), -1)[:, 0], stable=True)
    if len(order) <= count:
        return order
    return order[torch.linspace(0, len(order) - 1, count).round().long()]


def _first_output(t: Tensor) -> Tensor:
    """The first output of each row of ``t`` ``(n, ...)``, as float64 on the CPU."""
    return t.reshape(len(t), -1)[:, 0].double().cpu()


def _label(ax: Any, xlabel: str, ylabel: str, title: str, legend: str | None = None) -> None:
    """Axis labels, a small panel title, a grid and (at ``legend``) the legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if legend is not None:
        ax.legend(fontsize=7, loc=legend)


def _finish(fig: Any, title: str, numbers: str, path: str | os.PathLike) -> Path:
    """The figure title ``"title: numbers"`` (N and the metric values), then the PNG."""
    fig.suptitle(f"{title}: {numbers}" if title else numbers, fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)


def intervals_plot(y: Tensor, mean: Tensor, cdf: Tensor, mixture: GaussianMixture,
                   points: Tensor, path: str | os.PathLike, *, shift: float = 0.0,
                   scale: float = 1.0, title: str = "") -> Path | None:
    """Write ``intervals.png``; ``None`` without matplotlib.

    Args:
        y: every test target ``(n, ...)`` in the units the model was trained on.
        mean: the BMA predictive mean at every test input, like ``y``.
        cdf: the mixture CDF at every test target, like ``y`` (coverage panel).
        mixture: the BMA mixture at the test inputs ``points`` only (left panel).
        points: indices into the test split of the points in ``mixture``.
        path: the PNG to write.
        shift: ``meta["y_mean"]`` of standardised targets (plotted ``shift + scale · y``).
        scale: ``meta["y_std"]`` of standardised targets.
        title: the first line of the figure's title.
    """
    fig = new_figure((10.0, 4.4))
    if fig is None:
        return None

    def to_units(t: Tensor) -> Tensor:  # affine and increasing: quantiles map to quantiles
        return shift + scale * t

    error = scale * rmse(mean, y)  # in target units, as metrics["rmse"]
    covered = coverage_curve(cdf)
    multi = mean[0].numel() > 1
    truth = to_units(_first_output(y)[points])
    predicted = to_units(_first_output(mean)[points])
    left, right = fig.subplots(1, 2)
    for level, width in BANDS:
        lo, hi = (_first_output(t) for t in mixture.interval(level))
        left.vlines(truth, to_units(lo), to_units(hi), lw=width, alpha=0.45,
                    color="tab:blue" if level < 0.6 else "tab:gray",
                    label=f"{round(100 * level)} % interval")
    left.plot(truth, predicted, ".", color="black", ms=3, label="predictive mean")
    span = [min(float(truth.min()), float(predicted.min())),
            max(float(truth.max()), float(predicted.max()))]
    left.plot(span, span, "k--", lw=1, label="perfect prediction")
    output = " (output 0)" if multi else ""
    _label(left, f"true target{output}", f"predicted target{output}",
           f"{len(points)} of {len(y)} test points", "upper left")
    right.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    right.plot(COVERAGE_LEVELS, covered, "o-", color="tab:blue", label="BMA mixture")
    right.set_xlim(0, 1)
    right.set_ylim(0, 1)
    _label(right, "nominal level of the central interval", "empirical coverage",
           "coverage calibration", "upper left")
    return _finish(fig, title, f"N test = {len(y)}, RMSE = {error:.4g}, 90 % coverage = "
                   f"{covered[COVERAGE_LEVELS.index(0.9)]:.3f}", path)


def evaluation_mixture(result: Any, x: Tensor, num_draws: int) -> GaussianMixture:
    """The BMA mixture at ``x`` over the draws an evaluation averaged ``num_draws`` of.

    ``iter_draws(num_draws, max_draws=num_draws)`` yields the evaluation's draws whether it
    used all of them or ``max_draws`` of them: a sampler's kept draws thinned the same way,
    an ensemble's first members, the same seeded VI draws.

    Args:
        result: the run's :class:`~bdlkit.Result` (a regression model).
        x: the inputs.
        num_draws: the evaluation's ``metrics["num_draws"]``.
    """
    draws = result.iter_draws(num_draws, max_draws=num_draws)
    _, samples = bma_with_samples(result.problem, draws, x, dtype=torch.float64)
    return GaussianMixture(samples.mean.cpu(), samples.std.cpu())


def regression_intervals_figure(result: Any, ev: Any, ds: Any, path: str | os.PathLike, *,
                                title: str = "", max_points: int = 300) -> Path | None:
    """``intervals.png`` of a regression evaluation: the mixture of the evaluation's draws
    (:func:`evaluation_mixture`) at up to ``max_points`` test inputs
    (:func:`plotted_points`); ``None`` without matplotlib or without the mixture CDF at the
    targets.

    Args:
        result: the run's :class:`~bdlkit.Result` (for the per-draw predictions).
        ev: its :class:`~bdlkit.evaluation.Evaluation` (``test`` a ``RegressionBMA``); when
            it covered the first ``max_test`` test rows only, so does the plot.
        ds: the data set (``x_test``, ``y_test``, ``meta["y_mean"/"y_std"]``).
        path: the PNG to write.
        title: the first line of the figure's title.
        max_points: the most test points drawn with their intervals.
    """
    test = ev.test
    if test.cdf is None or not _has_matplotlib():
        return None  # no per-draw prediction pass for a plot that cannot be drawn
    rows = len(test.mean)
    points = plotted_points(test.mean, max_points)
    x = ds.x_test[:rows][points.to(ds.x_test.device)]
    mixture = evaluation_mixture(result, x, int(ev.metrics["num_draws"]))
    meta = getattr(ds, "meta", None) or {}
    return intervals_plot(ds.y_test[:rows], test.mean, test.cdf, mixture, points.cpu(), path,
                          shift=float(meta.get("y_mean", 0.0)),
                          scale=float(meta.get("y_std", 1.0)), title=title)


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def ood_roc(score_in: Tensor, score_out: Tensor) -> dict[str, Any]:
    """The ROC curve of an OOD score (OOD inputs positive) and its summary numbers.

    Args:
        score_in: the score of each in-distribution test input ``(n_in,)``.
        score_out: the score of each OOD input ``(n_out,)``; higher means more OOD.

    Returns:
        ``fpr`` and ``tpr`` (numpy arrays, sklearn's ``roc_curve``), ``auroc``, ``aupr``
        (as :func:`bdlkit.metrics.ood.auroc_aupr`) and ``base_rate``, the AUPR of an
        uninformative score: the OOD fraction ``n_out / (n_in + n_out)``.
    """
    from sklearn.metrics import roc_curve

    auroc, aupr = auroc_aupr(score_in, score_out)
    scores = torch.cat([score_in.double(), score_out.double()]).cpu().numpy()
    target = np.r_[np.zeros(len(score_in)), np.ones(len(score_out))]
    fpr, tpr, _ = roc_curve(target, scores)
    return {"fpr": fpr, "tpr": tpr, "auroc": auroc, "aupr": aupr,
            "base_rate": len(score_out) / (len(score_in) + len(score_out))}


def ood_plot(entropy_in: Tensor, entropy_out: Tensor, path: str | os.PathLike, *,
             ood_name: str = "OOD", bins: int = 30, title: str = "") -> Path | None:
    """Write ``ood.png``: entropy histograms (density, shared bins) and the ROC curve;
    ``None`` without matplotlib.

    Args:
        entropy_in: the predictive entropy of each test input.
        entropy_out: the predictive entropy of each OOD input.
        path: the PNG to write.
        ood_name: the OOD data set's name (legend).
        bins: the number of histogram bins.
        title: the first line of the figure's title.
    """
    roc = ood_roc(entropy_in, entropy_out)
    fig = new_figure((10.0, 4.2))
    if fig is None:
        return None
    h_in = entropy_in.double().cpu().numpy()
    h_out = entropy_out.double().cpu().numpy()
    edges = np.histogram_bin_edges(np.r_[h_in, h_out], bins=bins)
    left, right = fig.subplots(1, 2)
    left.hist(h_in, bins=edges, density=True, alpha=0.55, color="tab:blue",
              label=f"test (N = {len(h_in)})")
    left.hist(h_out, bins=edges, density=True, alpha=0.55, color="tab:orange",
              label=f"{ood_name} (N = {len(h_out)})")
    _label(left, "predictive entropy (nats)", "density", "predictive entropy", "best")
    right.plot(roc["fpr"], roc["tpr"], color="tab:orange",
               label=f"entropy: AUROC = {roc['auroc']:.3f}, AUPR = {roc['aupr']:.3f}")
    right.plot([0, 1], [0, 1], "k--", lw=1,
               label=f"chance (AUPR base rate = {roc['base_rate']:.3f})")
    right.set_xlim(0, 1)
    right.set_ylim(0, 1.01)
    _label(right, f"false positive rate (test inputs called {ood_name})",
           "true positive rate (OOD inputs detected)", "ROC of the entropy score (OOD positive)",
           "lower right")
    return _finish(fig, title, f"OOD {ood_name}, N test = {len(h_in)}, N OOD = {len(h_out)}, "
                   f"AUROC = {roc['auroc']:.3f}, AUPR = {roc['aupr']:.3f} "
                   f"(base rate {roc['base_rate']:.3f})", path)


def severity_curves(values: dict[str, Any], key: str) -> dict[str, list[float]]:
    """``key`` (``"accuracy"``, ``"nll"`` or ``"ece"``) at severities 0..5 per corruption
    and, under ``"mean"``, their mean at each severity; severity 0 is the clean test value.

    Args:
        values: an evaluation's metrics with ``corruptions`` and the clean ``key``.
        key: the metric to read.
    """
    clean = float(values[key])
    curves = {name: [clean] + [float(by_severity[s][key])
                               for s in sorted(by_severity, key=int)]
              for name, by_severity in values["corruptions"].items() if name != "mean"}
    if not curves:
        raise ValueError("metrics hold no corruption results (evaluate with --corruptions)")
    columns = list(zip(*curves.values(), strict=True))
    curves["mean"] = [sum(column) / len(column) for column in columns]
    return curves


def corruption_plot(values: dict[str, Any], path: str | os.PathLike, *,
                    title: str = "") -> Path | None:
    """Write ``corruptions.png``: accuracy and ECE against severity; ``None`` without
    matplotlib.

    Args:
        values: an evaluation's metrics (``corruptions``, ``accuracy``, ``ece``,
            ``num_test``).
        path: the PNG to write.
        title: the first line of the figure's title.
    """
    panels = {key: severity_curves(values, key) for key in ("accuracy", "ece")}
    fig = new_figure((10.0, 4.4))
    if fig is None:
        return None
    axes = fig.subplots(1, 2)
    for ax, (key, curves) in zip(axes, panels.items(), strict=True):
        severities = list(range(len(curves["mean"])))
        for name, ys in curves.items():
            bold = name == "mean"
            ax.plot(severities, ys, marker="o", ms=4 if bold else 3, lw=2.8 if bold else 1.0,
                    color="black" if bold else None, alpha=1.0 if bold else 0.75,
                    label="mean over corruptions" if bold else name, zorder=3 if bold else 2)
        name = "accuracy" if key == "accuracy" else "ECE (top label)"
        ax.set_xticks(severities)
        ax.set_ylim(0, 1.02 if key == "accuracy" else None)
        _label(ax, "severity (0 = clean test split)", name, f"{name} vs severity",
               "best" if key == "accuracy" else None)
    mean = values["corruptions"]["mean"]
    return _finish(fig, title, f"N test = {values.get('num_test', '?')}; mean over corruptions "
                   f"and severities 1-5: accuracy = {mean['accuracy']:.3f}, ECE = "
                   f"{mean['ece']:.3f} (clean {values['accuracy']:.3f}, {values['ece']:.3f})",
                   path)
