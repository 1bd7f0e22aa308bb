"""A result's draws as an ``arviz.InferenceData`` (``Result.to_arviz``).

Every group holds arrays with dims ``(chain, draw, ...)``:

- ``posterior``: ``theta`` ``(chain, draw, d)`` for a :class:`~bdlkit.Target`, or one variable
  per named parameter tensor of a :class:`~bdlkit.BayesianModel`;
- ``sample_stats``: ``lp``, the Target's log density at every draw (``log_prob`` in the
  run's ``history`` is one number per step over all chains, often of a minibatch, so it is
  not used; a BayesianModel gets no ``sample_stats``);
- ``posterior_predictive`` (given inputs ``x``): the per-draw predictive at ``x``, ``probs``
  ``(chain, draw, n, K)`` or ``mean`` and ``std`` ``(chain, draw, n, ...)``. These are the
  predictive *parameters* of each draw, not sampled ``y``.

ArviZ is an optional dependency (``pip install 'bdlkit[diagnostics]'``), imported here only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from bdlkit.core.extras import require
from bdlkit.core.tree import TensorTree
from bdlkit.evaluation.draw_predictions import PredictiveSamples


def import_arviz() -> Any:
    return require("arviz", "diagnostics", "to_arviz")


def _numpy(t: Tensor) -> Any:
    return t.detach().cpu().double().numpy() if t.dtype.is_floating_point else t.cpu().numpy()


def chains_first(draws: TensorTree) -> dict[str, Tensor]:
    """``(chain, draw, ...)`` arrays: a Target's ``(draws, chains, d)`` or ``(draws, d)``
    stack, or a dict of ``(draws, ...)`` tensors (one chain)."""
    if isinstance(draws, Tensor):
        if draws.ndim == 2:
            draws = draws[:, None]
        return {"theta": draws.transpose(0, 1)}
    return {name: t[None] for name, t in draws.items()}


def inference_data(posterior: dict[str, Tensor], sample_stats: dict[str, Tensor] | None = None,
                   predictive: PredictiveSamples | None = None, attrs: dict | None = None) -> Any:
    """Build the ``InferenceData`` (``posterior`` values ``(chain, draw, ...)``;
    ``predictive`` one chain, ``(draw, ...)``)."""
    az = import_arviz()
    groups: dict[str, Any] = {
        "posterior": az.dict_to_dataset({k: _numpy(v) for k, v in posterior.items()},
                                        attrs=attrs, library=None)}
    if sample_stats:
        groups["sample_stats"] = az.dict_to_dataset(
            {k: _numpy(v) for k, v in sample_stats.items()}, attrs=attrs, library=None)
    if predictive is not None:
        values = {k: getattr(predictive, k) for k in ("probs", "mean", "std")
                  if getattr(predictive, k) is not None}
        groups["posterior_predictive"] = az.dict_to_dataset(
            {k: _numpy(v[None]) for k, v in values.items()}, attrs=attrs, library=None)
    return az.InferenceData(**groups)


@torch.no_grad()
def target_log_density(problem: Any, posterior: dict[str, Tensor]) -> dict[str, Tensor]:
    """``lp`` ``(chain, draw)``: the Target's log density at every draw, one draw index at
    a time (all chains batched)."""
    theta = posterior["theta"]
    return {"lp": torch.stack([problem.log_prob(theta[:, k]) for k in range(theta.shape[1])],
                              dim=1)}
