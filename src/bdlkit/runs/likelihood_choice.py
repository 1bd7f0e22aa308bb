"""``--likelihood``: the observation model of a ``bdlkit fit`` run, chosen by name.

A run's likelihood is a short string, so that ``config.yaml`` can record it and a resume
can compare it:

* ``auto`` (default): what the task has always used, ``categorical`` for classes,
  ``gaussian`` for regression and for forecasts (there: one learned σ per channel, starting
  at the channel's persistence error). ``config.yaml`` records the resolved name.
* ``categorical``: softmax over the data set's classes.
* ``bernoulli``: two classes (labels 0 and 1) through one logit; the network gets one output.
* ``gaussian``: N(f(x), σ²) with σ learned with the weights (``likelihood.log_noise``).
* ``gaussian:<sigma>``: the same with σ fixed to ``<sigma>``, in the units of the targets
  bdlkit trains on: the UCI data sets are standardised, so there σ is in training-target
  standard deviations (σ · y_std in the original units); a user's file is used as given.
* ``heteroscedastic``: the network outputs 2k values, a mean and a σ per target.

Student-t is not offered: the BMA predictive and its metrics
(:class:`~bdlkit.evaluation.predictive.RegressionBMA`) are built for Gaussian mixtures.
"""

from __future__ import annotations

import math
from typing import Any

from bdlkit.problems.likelihoods import Bernoulli, Categorical, Gaussian, Likelihood

AUTO = "auto"
FIXED_PREFIX = "gaussian:"
#: the names each task accepts (``gaussian:<sigma>`` stands for any σ > 0)
BY_TASK: dict[str, tuple[str, ...]] = {
    "classification": ("categorical", "bernoulli"),
    "regression": ("gaussian", "gaussian:<sigma>", "heteroscedastic"),
    "forecasting": ("gaussian", "gaussian:<sigma>"),
}
DEFAULTS = {"classification": "categorical", "regression": "gaussian",
            "forecasting": "gaussian"}
#: The names ``--likelihood`` accepts.
CHOICES = (AUTO, "categorical", "bernoulli", "gaussian", "gaussian:<sigma>", "heteroscedastic")


def _error(problem: str) -> Exception:
    from bdlkit.runs.config import ConfigValueError  # late: config imports this module

    return ConfigValueError("likelihood", problem)


def normalised(spec: Any) -> str:
    """``spec`` checked against :data:`CHOICES` and written the one way ``config.yaml``
    keeps it (``gaussian:0.5``); raises ``ConfigValueError`` (key ``likelihood``)."""
    if not isinstance(spec, str):
        raise _error(f"must be a string, one of {', '.join(CHOICES)}; got {spec!r}")
    name = spec.strip().lower()
    if name.startswith(FIXED_PREFIX):
        return FIXED_PREFIX + repr(fixed_sigma(name))
    if name not in CHOICES:
        raise _error(f"must be one of {', '.join(CHOICES)}, got {spec!r}")
    return name


def fixed_sigma(spec: str) -> float:
    """σ of ``gaussian:<sigma>``; raises ``ConfigValueError`` unless it is a number > 0."""
    text = spec[len(FIXED_PREFIX):]
    try:
        sigma = float(text)
    except ValueError:
        sigma = math.nan
    if not (math.isfinite(sigma) and sigma > 0):
        raise _error(f"gaussian:<sigma> needs a finite number > 0 after the colon (σ in "
                     f"standardised target units, e.g. gaussian:0.1), got {spec!r}")
    return sigma


def resolved(spec: str, task: str) -> str:
    """The likelihood ``spec`` names for data of ``task``: ``auto`` becomes the task's
    default; a name the task cannot use raises ``ConfigValueError`` listing those it can."""
    name = normalised(spec)
    if name == AUTO:
        return DEFAULTS[task]
    valid = BY_TASK[task]
    generic = "gaussian:<sigma>" if name.startswith(FIXED_PREFIX) else name
    if generic not in valid:
        raise _error(f"{name!r} does not fit {task} data; use one of "
                     f"{', '.join((AUTO, *valid))}")
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
    """The likelihood named by ``spec`` for ``task``. ``forecast_noise``: the per-channel
    starting σ of a forecast's learned Gaussian (one σ per channel)."""
    name = resolved(spec, task)
    if name == "categorical":
        return Categorical()
    if name == "bernoulli":
        return Bernoulli()
    if name == "heteroscedastic":
        return Gaussian(heteroscedastic=True)
    if name.startswith(FIXED_PREFIX):
        return Gaussian(fixed_sigma(name))
    if task == "forecasting" and forecast_noise is not None:
        return Gaussian(forecast_noise, learn_noise=True, channels=len(forecast_noise))
    return Gaussian(learn_noise=True)


def name_of(likelihood: Likelihood) -> str:
    """The name :func:`build` makes ``likelihood`` from (what ``config.yaml`` records)."""
    if isinstance(likelihood, Gaussian):
        if likelihood.heteroscedastic:
            return "heteroscedastic"
        if not likelihood.learn_noise:
            return FIXED_PREFIX + repr(float(likelihood.noise))
    return likelihood.name
