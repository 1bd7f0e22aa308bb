"""Run health: the checks a user should see before trusting a run's metrics.

Each check compares a quantity of the evaluated run with a threshold and, when it fails,
says what it means and the likely fix:

* **majority**: a classifier no better than always predicting the most frequent test
  class (accuracy ≤ that class's frequency + 1 point), or a regressor no better than the
  training mean (RMSE ≥ the mean predictor's);
* **rhat**, **ess**: sampler diagnostics against Vehtari et al. (2021): split R̂ below
  1.01 and an effective sample size of at least 100 per chain (here the mean ESS over
  weights of the single chain, against min(100, draws / 2));
* **draws**: fewer than 10 kept draws to average;
* **sigma**: a diagonal-Gaussian VI run whose median σ is within a factor 1.5 of its
  ``init_std``: still close to a point estimate;
* **ood_aupr**: an OOD AUPR less than half of the way from its base rate (the OOD
  fraction, what an uninformative score gets) to 1: e.g. 0.94 against a base rate of
  0.91 is a third of the way, far weaker than it reads.

:func:`run_health` returns ``{check: message}`` for the failed checks only; every value is
a deterministic function of the metrics and the run, so it is part of ``metrics.json``
(``health``), printed by the command line and listed in ``report.md``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from bdlkit.evaluation.predictive import ClassificationBMA, RegressionBMA

if TYPE_CHECKING:  # a result is read here, made by the engine above
    from bdlkit.engine.result import Result

RHAT_MAX = 1.01  # Vehtari et al. (2021)
ESS_PER_CHAIN = 100  # Vehtari et al. (2021)
MIN_DRAWS = 10
SIGMA_FACTOR = 1.5  # as bdlkit.engine.vi_checks


def run_health(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    """The failed checks of the module docstring, ``{check: message with the fix}``."""
    found: dict[str, str] = {}
    for check in (_majority, _sampling, _draws, _sigma, _ood):
        found.update(check(values, result, test, ds))
    return found


def trivial_baseline(ds: Any) -> tuple[str, float] | None:
    """The trivial predictor's score on ``ds``'s test split, in the units ``metrics.json``
    reports: ``("accuracy", frequency of the most frequent test class)`` for classes,
    ``("rmse", RMSE of the training mean)`` for regression targets (times
    ``meta["y_std"]``, the targets' original units); None without test rows."""
    y = ds.y_test
    if not len(y):
        return None
    if not y.dtype.is_floating_point:
        return "accuracy", float(torch.bincount(y.cpu()).max()) / len(y)
    if not len(ds.y_train):
        return None
    return "rmse", target_scale(ds) * float(((ds.y_train.mean(0) - y) ** 2).mean().sqrt())


def target_scale(ds: Any) -> float:
    """The std the regression targets were divided by (``meta["y_std"]``), else 1."""
    return float((getattr(ds, "meta", None) or {}).get("y_std", 1.0))


def _majority(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    baseline = trivial_baseline(ds)
    if baseline is None or not isinstance(test, (ClassificationBMA, RegressionBMA)):
        return {}
    metric, trivial = baseline
    if isinstance(test, ClassificationBMA):
        accuracy = values.get("accuracy", 0.0)
        if accuracy <= trivial + 0.01:
            return {"majority": (
                f"accuracy {accuracy:.3f} is no better than always predicting the most "
                f"frequent class ({trivial:.3f}): the run learned nothing usable. Fix: a "
                "smaller or larger lr (see `bdlkit fit --method M --help`), more steps, or "
                "check the labels")}
    elif (model := target_scale(ds) * float(((test.mean - ds.y_test) ** 2).mean().sqrt())) >= trivial:
        return {"majority": (
            f"RMSE {model:.4g} is no better than predicting the "
            f"training mean ({trivial:.4g}). Fix: another lr, more steps, or check the inputs")}
    return {}


def _sampling(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    diag = values.get("diagnostics") or {}
    out = {}
    rhat = diag.get("weights_rhat_split_mean")
    if isinstance(rhat, float) and math.isfinite(rhat) and rhat > RHAT_MAX:
        out["rhat"] = (
            f"mean split R-hat of the weights is {rhat:.3f} (> {RHAT_MAX}, Vehtari et al. "
            "2021): the chain has not mixed, so its draws are not yet from one posterior "
            "region. Fix: more steps after burn-in, a longer burn-in, or a cyclical sampler")
    ess, draws = diag.get("weights_ess_mean"), diag.get("chain_draws")
    if isinstance(ess, float) and isinstance(draws, int) and draws:
        need = min(ESS_PER_CHAIN, draws / 2)
        if ess < need:
            out["ess"] = (
                f"mean ESS of the weights is {ess:.1f} of {draws} draws (< {need:g}): the "
                "draws are strongly autocorrelated, so the average is over few independent "
                "ones. Fix: thin more over a longer run (--thin), or a larger step size")
    return out


def _draws(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    # the run's kept draws, not those averaged (`evaluate --num-draws` may ask for fewer)
    kept = result.num_kept
    if result.kind == "sampler" and kept < MIN_DRAWS:
        return {"draws": (
            f"only {kept} draws were kept to average (< {MIN_DRAWS}). Fix: a shorter "
            "--burnin, a smaller --thin or more steps")}
    return {}


def _sigma(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    rows = result.sigma_summary() if result.algorithm is not None else None
    init = (result.algorithm.hyperparameters().get("init_std")
            if result.algorithm is not None else None)
    overall = next((r for r in rows or [] if r["tensor"] == "all"), None)
    if overall is None or not isinstance(init, (int, float)) or init <= 0:
        return {}
    ratio = overall["median"] / init
    if 1 / SIGMA_FACTOR < ratio < SIGMA_FACTOR:
        return {"sigma": (
            f"the median σ of q is {overall['median']:.3g}, within a factor {SIGMA_FACTOR} "
            f"of init_std={init:g}: q is still close to a point estimate (its predictions "
            "are nearly its mean's). Fix: more steps, or a larger lr or init_std")}
    return {}


def _ood(values: dict[str, Any], result: Result, test: Any, ds: Any) -> dict[str, str]:
    aupr, base = values.get("ood_aupr"), values.get("ood_aupr_base_rate")
    if isinstance(aupr, float) and isinstance(base, float) and base < 1:
        gain = (aupr - base) / (1 - base)
        if gain < 0.5:
            return {"ood_aupr": (
                f"OOD AUPR {aupr:.3f} is only {max(gain, 0):.0%} of the way from its base "
                f"rate {base:.3f} (the OOD fraction, what an uninformative score gets) to 1: "
                "the predictive tells OOD inputs apart less well than the number suggests. "
                "Read AUROC beside it")}
    return {}
