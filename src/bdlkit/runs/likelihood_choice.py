"""``--likelihood``: the observation model of a ``bdlkit fit`` run, chosen by name.

The names are those of ``BayesianModel(likelihood=...)`` with the same meaning
(:data:`bdlkit.problems.likelihoods.NAMES`, the table in ``docs/concepts.md``), plus
``auto`` (default): ``categorical`` for classes, ``gaussian`` (a learned σ) for regression
and for forecasts (there one learned σ per channel, starting at the channel's persistence
error). ``config.yaml`` records the resolved name, so a resume can compare it. A
``gaussian:<sigma>`` σ is in the units of the targets bdlkit trains on: the UCI data sets
are standardised, so there σ is in training-target standard deviations; a user's file is
used as given.

Student-t is not offered: the BMA predictive and its metrics
(:class:`~bdlkit.evaluation.predictive.RegressionBMA`) are built for Gaussian mixtures.
"""

from __future__ import annotations

from typing import Any

from bdlkit.problems import likelihoods
from bdlkit.problems.likelihoods import FIXED_PREFIX, NAMES, Likelihood, make_likelihood, name_of

AUTO = "auto"
#: the names each task accepts (``gaussian:<sigma>`` stands for any σ > 0)
BY_TASK: dict[str, tuple[str, ...]] = {
    "classification": ("categorical", "bernoulli"),
    "regression": ("gaussian", "gaussian:<sigma>", "heteroscedastic"),
    "forecasting": ("gaussian", "gaussian:<sigma>"),
}
DEFAULTS = {"classification": "categorical", "regression": "gaussian",
            "forecasting": "gaussian"}
#: The names ``--likelihood`` accepts.
CHOICES = (AUTO, *NAMES)
#: How a user's file is read as the other task (``bdlkit.data.files``), named when a
#: likelihood of that task is asked for.
_AS_TASK = {"classification": ("regression", "labels are numbers to predict"),
            "regression": ("classification", "targets are class labels")}


def _error(problem: str) -> Exception:
    from bdlkit.runs.config import ConfigValueError  # late: config imports this module

    return ConfigValueError("likelihood", problem)


def normalised(spec: Any) -> str:
    """``spec`` checked against :data:`CHOICES` and written the one way ``config.yaml``
    keeps it (``gaussian:0.5``); raises ``ConfigValueError`` (key ``likelihood``)."""
    if isinstance(spec, str) and spec.strip().lower() == AUTO:
        return AUTO
    try:
        return likelihoods.likelihood_name(spec)
    except ValueError as err:
        text = str(err).replace("must be a string, one of ", f"must be a string, one of {AUTO}, ")
        raise _error(text.replace("must be one of ", f"must be one of {AUTO}, ")) from None


def fixed_sigma(spec: str) -> float:
    """σ of ``gaussian:<sigma>``; raises ``ConfigValueError`` unless it is a number > 0."""
    try:
        return likelihoods.fixed_sigma(spec)
    except ValueError as err:
        raise _error(str(err)) from None


def resolved(spec: str, task: str) -> str:
    """The likelihood ``spec`` names for data of ``task``: ``auto`` becomes the task's
    default; a name the task cannot use raises ``ConfigValueError`` listing those it can
    (and, for a likelihood of the other task, how a user's file is read as that task)."""
    name = normalised(spec)
    if name == AUTO:
        return DEFAULTS[task]
    valid = BY_TASK[task]
    generic = "gaussian:<sigma>" if name.startswith(FIXED_PREFIX) else name
    if generic not in valid:
        hint = ""
        if task in _AS_TASK:
            other, what = _AS_TASK[task]
            hint = (f"; or, if the data is a .npz/.csv file whose {what}, load it as "
                    f"{other} data: --data-kwargs "
                    f"'{{\"task\": \"{other}\"}}' (Python: task=\"{other}\")")
        raise _error(f"{name!r} does not fit {task} data; use one of "
                     f"{', '.join((AUTO, *valid))}{hint}")
    return name


def output_count(spec: str, task: str, num_classes: int | None, targets: int) -> int:
    """How many outputs the network needs for likelihood ``spec`` (resolved) on ``task``:
    ``num_classes`` logits (one for ``bernoulli``, which needs two classes), or ``targets``
    values per example (twice that for ``heteroscedastic``)."""
    name = resolved(spec, task)
    if name == "bernoulli":
        if num_classes != 2:
            raise _error(f"'bernoulli' needs two classes (labels 0 and 1); this data set has "
                         f"{num_classes}: use categorical")
        return 1
    if name == "categorical":
        return int(num_classes)
    return 2 * targets if name == "heteroscedastic" else targets


def build(spec: str, task: str, forecast_noise: list[float] | None = None) -> Likelihood:
    """The likelihood named by ``spec`` for ``task``
    (:func:`~bdlkit.problems.likelihoods.make_likelihood`). ``forecast_noise``: the
    per-channel starting σ of a forecast's learned Gaussian (one σ per channel)."""
    name = resolved(spec, task)
    if task == "forecasting" and forecast_noise is not None:
        return make_likelihood(name, start_noise=forecast_noise)
    return make_likelihood(name)


__all__ = ["AUTO", "BY_TASK", "CHOICES", "DEFAULTS", "build", "fixed_sigma", "name_of",
           "normalised", "output_count", "resolved"]
