"""Evaluate a :class:`~bdlkit.Result` on a data set: every metric that applies.

The flow: result → streaming BMA predictive (:mod:`bdlkit.evaluation.predictive`) on the test
split → metrics (:mod:`bdlkit.metrics`), and optionally

* OOD detection against another data set's inputs (entropy, max-probability and
  mutual-information AUROC/AUPR, ``docs/metrics.md``);
* agreement and total variation against reference (HMC) probabilities;
* covariate shift: six corruptions at five severities (:mod:`bdlkit.data.corruptions`),
  all cells predicted in one pass over the draws (:mod:`bdlkit.evaluation.shift`), applied
  in raw pixel space; ``corruption_frozen_pixels`` counts the input values per image that a
  per-pixel standardisation makes degenerate and that keep their clean value;
* run health (:mod:`bdlkit.evaluation.health`): the failed checks, each with its fix;
* sampling diagnostics of a sampler run
  (:func:`~bdlkit.evaluation.sampling.sampler_diagnostics`): single-chain ESS
  (L2E's TFP formula) and per-chain split R̂ (Sommer et al.; ``docs/metrics.md``) on the weights
  layer by layer and on function-space quantities (predictive probabilities on a probe
  set).

Every value returned is a deterministic function of the draws and the data (no wall
times), so re-evaluating a resumed run reproduces the same numbers. ``max_draws`` and
``max_test`` make a cheaper evaluation on fewer draws and test rows (recorded as
``num_draws``/``num_test``); ``progress`` follows the passes of
:mod:`bdlkit.evaluation.plan`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from torch import Tensor

from bdlkit import metrics
from bdlkit.evaluation.forecast import forecast_mixture, forecast_values
from bdlkit.evaluation.health import run_health, run_notes, target_scale
from bdlkit.evaluation.held_out import held_out
from bdlkit.evaluation.plan import (
    Progress,
    counted,
    first_test_rows,
    ood_inputs,
    plan_evaluation,
    start,
)
from bdlkit.evaluation.predictive import ClassificationBMA, RegressionBMA
from bdlkit.evaluation.shift import SEVERITIES as SEVERITIES  # re-exported (its old home)
from bdlkit.evaluation.shift import corruption_metrics
from bdlkit.metrics.forecasting import GaussianMixture

if TYPE_CHECKING:  # a result is read here, made by the engine above
    from bdlkit.engine.result import Result

@dataclasses.dataclass
class Evaluation:
    """Metrics plus what the plots need.

    ``health`` (a property) is the run health: ``{check: message with the likely fix}`` for
    each failed check of :mod:`bdlkit.evaluation.health` (empty when all passed), e.g.
    ``bdlkit.evaluate(result, ds).health``; the same dict is ``metrics["health"]``.
    ``health_notes`` holds what is information rather than a failure (``metrics["health_notes"]``,
    absent when there is none).
    """

    metrics: dict[str, Any]
    test: ClassificationBMA | RegressionBMA | GaussianMixture
    diagnostics: dict[str, Any] | None = None  # incl. tensors for plots (not JSON)
    ood: ClassificationBMA | None = None  # the BMA of the OOD inputs (for the OOD plots)

    @property
    def health(self) -> dict[str, str]:
        """The failed run-health checks, ``{check: message}`` (``{}``: all passed)."""
        return dict(self.metrics.get("health") or {})

    @property
    def health_notes(self) -> dict[str, str]:
        """Findings reported as information, not failures, as ``{check: message}`` — a
        single chain's R-hat and ESS (:func:`bdlkit.evaluation.health.run_notes`)."""
        return dict(self.metrics.get("health_notes") or {})


def evaluate(
    result: Result,
    ds: Any,
    *,
    num_samples: int = 32,
    ood: Any = None,
    reference: Tensor | None = None,
    corruptions: bool = False,
    diagnostics: bool = True,
    probe_size: int = 256,
    max_draws: int | None = None,
    max_test: int | None = None,
    progress: Progress | None = None,
) -> Evaluation:
    """Metrics of ``result`` on ``ds``'s test split (see the module docstring).

    Args:
        ds: what to score: a :class:`~bdlkit.data.Dataset` (its test split), an ``(x, y)``
            pair or a DataLoader of ``(x, y)`` batches (:mod:`bdlkit.evaluation.held_out`).
        num_samples: draws of a VI approximation to average over.
        ood: a data set whose test (or, if empty, train) inputs are OOD.
        reference: reference probabilities ``(n_test, K)`` aligned with the test split.
        corruptions: evaluate on corrupted copies of the test images.
        diagnostics: sampling diagnostics for sampler results (not for a deep ensemble:
            its members are independent runs, not a chain, so R̂/ESS do not apply); they
            use every kept draw, whatever ``max_draws``.
        probe_size: test inputs of the diagnostics' function-space probe.
        max_draws: average over at most this many draws: a sampler's kept draws thinned
            evenly, an ensemble's first members, at most this many VI draws
            (:meth:`bdlkit.Result.iter_draws`). ``metrics["num_draws"]`` records the count.
        max_test: evaluate on the first ``max_test`` test rows only (of ``ds``, of the OOD
            set and of ``reference``; not stratified). ``metrics["num_test"]`` records it.
        progress: told the :class:`~bdlkit.evaluation.plan.EvaluationPlan` before any work
            and updated with the rows predicted after each draw of every pass (a tqdm bar
            will do, :mod:`bdlkit.evaluation.plan`); nothing is printed here.

    Returns:
        an :class:`Evaluation`; its ``health`` lists the failed run-health checks.
    """
    task = getattr(getattr(result.problem, "likelihood", None), "task", None)
    ds = first_test_rows(held_out(ds, task), max_test)
    ood = None if ood is None else first_test_rows(ood, max_test)
    if reference is not None and max_test is not None:
        reference = reference[:max_test]
    y = ds.y_test
    values: dict[str, Any] = {}
    ood_bma: ClassificationBMA | None = None
    classes = task == "classification"
    if not classes and (ood is not None or reference is not None or corruptions):
        raise ValueError("--ood, --reference and --corruptions need a classification run")
    frozen = 0
    if corruptions:  # refuses data it would make degenerate before any work
        from bdlkit.data.corruptions import frozen_count

        frozen = frozen_count(ds)
    draws = {"num_samples": num_samples, "max_draws": max_draws}
    plan = plan_evaluation(result, ds, **draws, ood=ood, corruptions=corruptions,
                           diagnostics=diagnostics, probe_size=probe_size)
    update = start(progress, plan)
    if getattr(ds, "task", None) == "forecasting":
        if result.problem is None:
            raise ValueError("this result was loaded without its problem; pass problem= to load")
        if num_samples < 1 or len(ds.x_test) == 0:
            raise ValueError(f"a forecast needs num_samples >= 1 (got {num_samples}) and test "
                             f"windows (got {len(ds.x_test)})")
        test = forecast_mixture(result.problem, counted(result.iter_draws(**draws),
                                                        len(ds.x_test), update), ds.x_test)
        values.update(forecast_values(test, y, ds))
    else:
        test = result.predictive(ds.x_test, y, **draws, progress=update)
    if isinstance(test, ClassificationBMA):
        values.update(classification_values(test, y))
        if ood is not None:
            ood_bma = _ood_bma(result, ds, ood, draws, update)
            values.update(metrics.ood_metrics(test, ood_bma), ood_data=ood.name)
        if reference is not None:
            values.update(_reference(test.probs, reference))
        if corruptions:
            values["corruptions"] = corruption_metrics(result, ds, **draws, progress=update)
            if frozen:  # pixels the standardisation made degenerate keep their clean value
                values["corruption_frozen_pixels"] = frozen
    elif isinstance(test, RegressionBMA):
        values.update(metrics.regression_metrics(test.predictive, y, target_scale(ds),
                                                 test.log_density, test.cdf))
    values["num_test"] = len(y)
    values["num_draws"] = (test.num_components if isinstance(test, GaussianMixture)
                           else test.num_samples)
    diag = None
    if any(p.name == "probe" for p in plan.passes):
        from bdlkit.evaluation.sampling import sampler_diagnostics

        diag = sampler_diagnostics(result, ds.x_test[:probe_size], progress=update)
        values["diagnostics"] = {k: v for k, v in diag.items() if not k.startswith("_")}
    values["health"] = run_health(values, result, test, ds)
    if notes := run_notes(values):
        values["health_notes"] = notes
    return Evaluation(values, test, diag, ood_bma)


def classification_values(test: ClassificationBMA, y: Tensor) -> dict[str, float]:
    """Accuracy, NLL, both ECEs, Brier, mean entropies and the per-draw averages."""
    probs = test.probs
    out = dict(metrics.classification_metrics(probs, y, test.log_probs))
    out["ece_all_class"], out["mce_all_class"] = metrics.ece_all_class(probs, y)
    out["entropy"] = float(test.entropy.mean())
    if test.num_samples > 1:  # a single draw has no epistemic part
        out["mutual_information"] = float(test.mutual_information.mean())
    if test.sample_accuracy:
        out["sample_accuracy"] = sum(test.sample_accuracy) / len(test.sample_accuracy)
        out["sample_nll"] = sum(test.sample_nll) / len(test.sample_nll)
    return out


def _ood_bma(result: Result, ds: Any, ood: Any, draws: dict[str, Any],
             update: Any) -> ClassificationBMA:
    x_ood = ood_inputs(ood)
    if tuple(x_ood.shape[1:]) != tuple(ds.x_test.shape[1:]):
        raise ValueError(
            f"OOD data {ood.name!r} has inputs of shape {tuple(x_ood.shape[1:])}, the run's "
            f"data {tuple(ds.x_test.shape[1:])}; pick an OOD set of the same shape "
            "(mnist: notmnist)"
        )
    return result.predictive(x_ood.to(ds.x_test.device), **draws, progress=update)


def _reference(probs: Tensor, reference: Tensor) -> dict[str, Any]:
    return {"agreement": metrics.agreement(probs, reference),
            "total_variation": metrics.total_variation(probs, reference),
            "reference_rows": len(reference)}
