"""Evaluate a :class:`~bdlkit.Result` on a data set: every metric that applies.

The flow: result → streaming BMA predictive (:mod:`bdlkit.evaluation.predictive`) on the test
split → metrics (:mod:`bdlkit.metrics`), and optionally

* OOD detection against another data set's inputs (entropy, max-probability and
  mutual-information AUROC/AUPR, ``docs/metrics.md``);
* agreement and total variation against reference (HMC) probabilities;
* covariate shift: six corruptions at five severities (:mod:`bdlkit.data.corruptions`),
  one corrupted copy of the test split in memory at a time;
* run health (:mod:`bdlkit.evaluation.health`): the failed checks, each with its fix;
* sampling diagnostics of a sampler run (:func:`sampler_diagnostics`): single-chain ESS
  (L2E's TFP formula) and per-chain split R̂ (Sommer et al.; ``docs/metrics.md``) on the weights
  layer by layer and on function-space quantities (predictive probabilities on a probe
  set).

Every value returned is a deterministic function of the draws and the data (no wall
times), so re-evaluating a resumed run reproduces the same numbers.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from torch import Tensor

from bdlkit import metrics
from bdlkit.core.draws import KeptDraws
from bdlkit.evaluation.forecast import forecast_mixture, forecast_values
from bdlkit.evaluation.health import run_health
from bdlkit.evaluation.predictive import ClassificationBMA, RegressionBMA
from bdlkit.metrics.forecasting import GaussianMixture

if TYPE_CHECKING:  # a result is read here, made by the engine above
    from bdlkit.engine.result import Result

SEVERITIES = (1, 2, 3, 4, 5)


@dataclasses.dataclass
class Evaluation:
    """Metrics plus what the plots need."""

    metrics: dict[str, Any]
    test: ClassificationBMA | RegressionBMA | GaussianMixture
    diagnostics: dict[str, Any] | None = None  # incl. tensors for plots (not JSON)
    ood: ClassificationBMA | None = None  # the BMA of the OOD inputs (for the OOD plots)


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
) -> Evaluation:
    """Metrics of ``result`` on ``ds``'s test split (see the module docstring).

    Args:
        ood: a data set whose test (or, if empty, train) inputs are OOD.
        reference: reference probabilities ``(n_test, K)`` aligned with the test split.
        corruptions: evaluate on corrupted copies of the test images.
        diagnostics: sampling diagnostics for sampler results (not for a deep ensemble:
            its members are independent runs, not a chain, so R̂/ESS do not apply).
    """
    y = ds.y_test
    values: dict[str, Any] = {}
    ood_bma: ClassificationBMA | None = None
    classes = getattr(getattr(result.problem, "likelihood", None), "task", "") == "classification"
    if not classes and (ood is not None or reference is not None or corruptions):
        raise ValueError("--ood, --reference and --corruptions need a classification run")
    if getattr(ds, "task", None) == "forecasting":
        if result.problem is None:
            raise ValueError("this result was loaded without its problem; pass problem= to load")
        if num_samples < 1 or len(ds.x_test) == 0:
            raise ValueError(f"a forecast needs num_samples >= 1 (got {num_samples}) and test "
                             f"windows (got {len(ds.x_test)})")
        test = forecast_mixture(result.problem, result.iter_draws(num_samples), ds.x_test)
        values.update(forecast_values(test, y, ds))
    else:
        test = result.predictive(ds.x_test, y, num_samples=num_samples)
    if isinstance(test, ClassificationBMA):
        values.update(classification_values(test, y))
        if ood is not None:
            ood_bma = _ood_bma(result, ds, ood, num_samples)
            values.update(metrics.ood_metrics(test, ood_bma), ood_data=ood.name)
        if reference is not None:
            values.update(_reference(test.probs, reference))
        if corruptions:
            values["corruptions"] = _corruptions(result, ds, num_samples)
    elif isinstance(test, RegressionBMA):
        values.update(metrics.regression_metrics(test.predictive, y, target_scale(ds),
                                                 test.log_density, test.cdf))
    values["num_test"] = len(y)
    values["num_draws"] = (test.num_components if isinstance(test, GaussianMixture)
                           else test.num_samples)
    diag = None
    if diagnostics and isinstance(result.draws, KeptDraws) and values["num_draws"] >= 4:
        from bdlkit.evaluation.sampling import sampler_diagnostics

        diag = sampler_diagnostics(result, ds.x_test[:probe_size])
        values["diagnostics"] = {k: v for k, v in diag.items() if not k.startswith("_")}
    values["health"] = run_health(values, result, test, ds)
    return Evaluation(values, test, diag, ood_bma)


def target_scale(ds: Any) -> float:
    """The std the regression targets were divided by (``meta["y_std"]``), else 1."""
    return float((getattr(ds, "meta", None) or {}).get("y_std", 1.0))


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


def _ood_bma(result: Result, ds: Any, ood: Any, num_samples: int) -> ClassificationBMA:
    x_ood = ood.x_test if len(ood.x_test) else ood.x_train
    if tuple(x_ood.shape[1:]) != tuple(ds.x_test.shape[1:]):
        raise ValueError(
            f"OOD data {ood.name!r} has inputs of shape {tuple(x_ood.shape[1:])}, the run's "
            f"data {tuple(ds.x_test.shape[1:])}; pick an OOD set of the same shape "
            "(mnist: notmnist)"
        )
    return result.predictive(x_ood.to(ds.x_test.device), num_samples=num_samples)


def _reference(probs: Tensor, reference: Tensor) -> dict[str, Any]:
    return {"agreement": metrics.agreement(probs, reference),
            "total_variation": metrics.total_variation(probs, reference),
            "reference_rows": len(reference)}


def _corruptions(result: Result, ds: Any, num_samples: int) -> dict[str, Any]:
    """Accuracy, NLL and ECE per corruption and severity (one corrupted copy at a time)."""
    from bdlkit.data.corruptions import CORRUPTIONS, corrupt_dataset

    out: dict[str, Any] = {}
    for name in CORRUPTIONS:
        for severity in SEVERITIES:
            shifted = corrupt_dataset(ds, name, severity, seed=severity)
            pred = result.predictive(shifted.x_test, num_samples=num_samples)
            values = metrics.classification_metrics(pred.probs, shifted.y_test, pred.log_probs)
            out.setdefault(name, {})[str(severity)] = {k: values[k] for k in ("accuracy",
                                                                              "nll", "ece")}
    cells = [cell for by_severity in out.values() for cell in by_severity.values()]
    out["mean"] = {k: sum(c[k] for c in cells) / len(cells) for k in ("accuracy", "nll", "ece")}
    return out
