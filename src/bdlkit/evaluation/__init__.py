"""Layer 3, evaluation: the streaming BMA predictive (:mod:`.predictive`), every metric
that applies to a result (:mod:`.summary`, re-exported here: ``evaluate``,
``Evaluation``) and the sampling diagnostics of a sampler run (:mod:`.sampling`).

A result is only read here (its ``predictive`` and draws), never imported at run time,
so this layer sits below the engine that makes results."""

from bdlkit.evaluation.plan import first_test_rows
from bdlkit.evaluation.summary import (
    SEVERITIES,
    Evaluation,
    classification_values,
    evaluate,
    target_scale,
)

__all__ = ["SEVERITIES", "Evaluation", "classification_values", "evaluate", "first_test_rows",
           "target_scale"]
