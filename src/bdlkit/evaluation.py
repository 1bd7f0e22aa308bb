"""Evaluate a :class:`~bdlkit.Result` on a data set: every metric that applies.

The flow: result → streaming BMA predictive (:mod:`bdlkit.predictive`) on the test
split → metrics (:mod:`bdlkit.metrics`), and optionally

* OOD detection against another data set's inputs (entropy, max-probability and
  mutual-information AUROC/AUPR, ``algorithms.md`` C.5);
* agreement and total variation against reference (HMC) probabilities (C.4);
* covariate shift: six corruptions at five severities (:mod:`bdlkit.data.corruptions`),
  all evaluated in one pass over the draws;
* sampling diagnostics of a sampler run (:func:`sampler_diagnostics`): single-chain ESS
  (L2E's TFP formula, C.7) and per-chain split R̂ (Sommer et al., C.8) on the weights
  layer by layer and on function-space quantities (predictive probabilities on a probe
  set).

Every value returned is a deterministic function of the draws and the data (no wall
times), so re-evaluating a resumed run reproduces the same numbers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from . import metrics
from .predictive import ClassificationBMA, RegressionBMA
from .result import Result

SEVERITIES = (1, 2, 3, 4, 5)


@dataclasses.dataclass
class Evaluation:
    """Metrics plus what the plots need."""

    metrics: dict[str, Any]
    test: ClassificationBMA | RegressionBMA
    diagnostics: dict[str, Any] | None = None  # incl. tensors for plots (not JSON)


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
        diagnostics: sampling diagnostics for sampler results.
    """
    y = ds.y_test
    test = result.predictive(ds.x_test, y, num_samples=num_samples)
    values: dict[str, Any] = {}
    if isinstance(test, ClassificationBMA):
        values.update(classification_values(test, y))
        if ood is not None:
            values.update(_ood(result, ds, test, ood, num_samples))
        if reference is not None:
            values.update(_reference(test.probs, reference))
        if corruptions:
            values["corruptions"] = _corruptions(result, ds, num_samples)
    else:
        if ood is not None or reference is not None or corruptions:
            raise ValueError("--ood, --reference and --corruptions need a classification run")
        scale = float((getattr(ds, "meta", None) or {}).get("y_std", 1.0))
        values.update(metrics.regression_metrics(test.predictive, y, scale, test.log_density))
    values["num_test"] = len(y)
    values["num_draws"] = test.num_samples
    diag = None
    if diagnostics and result.kind == "sampler" and test.num_samples >= 4:
        from .diagnostics_report import sampler_diagnostics

        diag = sampler_diagnostics(result, ds.x_test[:probe_size])
        values["diagnostics"] = {k: v for k, v in diag.items() if not k.startswith("_")}
    return Evaluation(values, test, diag)


def classification_values(test: ClassificationBMA, y: Tensor) -> dict[str, float]:
    """Accuracy, NLL, both ECEs, Brier, mean entropies and the per-draw averages."""
    probs = test.probs
    out = dict(metrics.classification_metrics(probs, y))
    out["nll"] = float(-test.log_probs.gather(-1, y[:, None].to(probs.device)).mean())
    out["ece_all_class"], out["mce_all_class"] = metrics.ece_all_class(probs, y)
    out["entropy"] = float(test.entropy.mean())
    out["mutual_information"] = float(test.mutual_information.mean())
    if test.sample_accuracy:
        out["sample_accuracy"] = sum(test.sample_accuracy) / len(test.sample_accuracy)
        out["sample_nll"] = sum(test.sample_nll) / len(test.sample_nll)
    return out


def _ood(result: Result, ds: Any, test: ClassificationBMA, ood: Any,
         num_samples: int) -> dict[str, Any]:
    x_ood = ood.x_test if len(ood.x_test) else ood.x_train
    if tuple(x_ood.shape[1:]) != tuple(ds.x_test.shape[1:]):
        raise ValueError(
            f"OOD data {ood.name!r} has inputs of shape {tuple(x_ood.shape[1:])}, the run's "
            f"data {tuple(ds.x_test.shape[1:])}; pick an OOD set of the same shape "
            "(mnist: notmnist)"
        )
    out_bma = result.predictive(x_ood.to(ds.x_test.device), num_samples=num_samples)
    return {**metrics.ood_metrics(test, out_bma), "ood_data": ood.name}


def _reference(probs: Tensor, reference: Tensor) -> dict[str, float]:
    if reference.shape != probs.shape:
        raise ValueError(
            f"reference probabilities have shape {tuple(reference.shape)} but the test "
            f"predictive is {tuple(probs.shape)}; rows must be the test split in order"
        )
    return {"agreement": metrics.agreement(probs, reference),
            "total_variation": metrics.total_variation(probs, reference)}


def _corruptions(result: Result, ds: Any, num_samples: int) -> dict[str, Any]:
    """Accuracy, NLL and ECE per corruption and severity, in one pass over the draws."""
    from .data.corruptions import CORRUPTIONS, corrupt_dataset

    names = list(CORRUPTIONS)
    sets = [corrupt_dataset(ds, name, s, seed=s) for name in names for s in SEVERITIES]
    x = torch.cat([c.x_test for c in sets])
    y = torch.cat([c.y_test for c in sets])
    joint = result.predictive(x, num_samples=num_samples)
    n = len(ds.y_test)
    out: dict[str, Any] = {}
    for i, (name, severity) in enumerate((n_, s) for n_ in names for s in SEVERITIES):
        part = slice(i * n, (i + 1) * n)
        log_probs = joint.log_probs[part]
        values = metrics.classification_metrics(log_probs.exp(), y[part])
        values["nll"] = float(-log_probs.gather(-1, y[part, None]).mean())
        out.setdefault(name, {})[str(severity)] = {k: values[k] for k in ("accuracy", "nll",
                                                                          "ece")}
    out["mean"] = {k: sum(out[n_][str(s)][k] for n_ in names for s in SEVERITIES)
                   / (len(names) * len(SEVERITIES)) for k in ("accuracy", "nll", "ece")}
    return out
