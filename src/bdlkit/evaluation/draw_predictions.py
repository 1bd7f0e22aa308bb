"""Per-draw predictions kept next to the BMA: what ``Result.predict(return_samples=True)``,
``Result.intervals`` and ``Result.to_arviz`` need.

:func:`bma_with_samples` makes one pass over the draws, feeds each draw's predictive to the
same accumulators as :func:`bdlkit.evaluation.predictive.bma` (so the BMA is bit-identical to
``bma``'s) and also stacks the per-draw predictions on a leading draw axis. Unlike ``bma``
this holds S × n × K values (classification) or 2 × S × n × ... (regression): the caller
asked for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bdlkit.core.protocol import Problem
from bdlkit.core.tree import tree_map
from bdlkit.evaluation.predictive import (
    ClassificationBMA,
    RegressionBMA,
    _ClassAccumulator,
    _GaussianAccumulator,
)
from bdlkit.problems.likelihoods import cat_predictives


@dataclass(frozen=True)
class PredictiveSamples:
    """Per-draw predictions stacked on a leading draw axis ``S``.

    Classification: ``probs`` ``(S, n, K)`` (a Bernoulli likelihood: ``(S, n)``, p(y = 1)),
    ``mean``/``std`` ``None``. Regression: ``mean`` and ``std`` ``(S, n, ...)`` of the
    per-draw Gaussians N(μ_s, σ_s²), ``probs`` ``None``; ``var`` is ``std²``, so per-draw
    samples and the BMA (``mean``, ``var``, ``std``) share one vocabulary.
    """

    probs: Tensor | None = None
    mean: Tensor | None = None
    std: Tensor | None = None

    @property
    def var(self) -> Tensor | None:
        """Each draw's predictive variance σ_s² = ``std²`` (``None`` for classification)."""
        return None if self.std is None else self.std.square()

    @property
    def num_samples(self) -> int:
        return int((self.probs if self.probs is not None else self.mean).shape[0])

    def to(self, dtype: torch.dtype) -> PredictiveSamples:
        return PredictiveSamples(*(None if t is None else t.to(dtype)
                                   for t in (self.probs, self.mean, self.std)))


def is_classification(problem: Problem) -> bool:
    return getattr(getattr(problem, "likelihood", None), "task", "") == "classification"


@torch.no_grad()
def bma_with_samples(
    problem: Problem, draws: Iterable[Any], x: Tensor, chunk_size: int = 1024,
    dtype: torch.dtype = torch.float64,
) -> tuple[ClassificationBMA | RegressionBMA, PredictiveSamples]:
    """The BMA of ``problem`` over ``draws`` at ``x`` (as ``bma`` without targets) and the
    per-draw predictions in ``dtype``, in one pass over the draws."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    chunks = [slice(i, i + chunk_size) for i in range(0, len(x), chunk_size)]
    classification = is_classification(problem)
    bernoulli = getattr(getattr(problem, "likelihood", None), "name", "") == "bernoulli"
    acc = _ClassAccumulator(None) if classification else _GaussianAccumulator(None)
    first: list[Tensor] = []
    second: list[Tensor] = []
    for theta in draws:
        theta = tree_map(lambda t: t.to(x.device), theta)
        if classification:
            lp = torch.cat([problem.log_predictive(theta, x[c]) for c in chunks])
            acc.add([lp])
            probs = lp.double().exp()
            first.append((probs[:, 1] if bernoulli else probs).to(dtype))
        else:
            pred = cat_predictives([problem.predictive(theta, x[c]) for c in chunks])
            acc.add(pred)
            mean = pred.mean.double()
            first.append(mean.to(dtype))
            second.append(pred.var.double().sqrt().expand_as(mean).to(dtype))
    if acc.count == 0:
        raise ValueError("no draws to average over (no samples kept?)")
    if classification:
        return acc.result(), PredictiveSamples(probs=torch.stack(first))
    return acc.result(), PredictiveSamples(mean=torch.stack(first), std=torch.stack(second))
