"""Sampling diagnostics of one sampler run, as L2E reports them (``algorithms.md`` C.7, C.8).

A network run is one chain of S kept draws. On the weights, per parameter tensor
(layer weights and biases separately) and over all coordinates:

* single-chain ESS with TFP's truncation rule (``ess_tfp_single_chain``), summed over
  coordinates (L2E divides this sum by the seconds per epoch: ESS per second, which
  ``report.md`` adds since it depends on wall time);
* the rank-normalised split R̂ of each chain (``rhat_split_sommer``): mean, std and the
  fractions of coordinates below 1.1 and 1.2, as in L2E's layer-wise plot.

In function space, the same two statistics on the predictive probabilities (class
probabilities, or the predictive mean for regression) of the draws at a probe set of
inputs. Several chains (several seeds) are compared with :mod:`bdlkit.diagnostics`
directly (``rhat_vehtari21``, ``rhat_tfp_bg98``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .diagnostics import ess_tfp_single_chain, layerwise_rhat, rhat_split_sommer
from .problems.likelihoods import GaussianPredictive
from .result import Result

TRACE_POINTS = 4


@torch.no_grad()
def sampler_diagnostics(result: Result, x_probe: Tensor) -> dict[str, Any]:
    """Weight-space and function-space diagnostics of a sampler ``result`` (one chain).

    Keys starting with ``_`` hold tensors for plots and are not JSON.
    """
    draws = result.samples  # (S, *shape) per parameter name
    if not isinstance(draws, dict):
        raise ValueError("sampler diagnostics need a network result (named parameters)")
    count = next(iter(draws.values())).shape[0]
    weights = {k: v.double() for k, v in draws.items()}
    ess = {k: ess_tfp_single_chain(v.reshape(count, -1)) for k, v in weights.items()}
    ess_all = torch.cat(list(ess.values()))
    layers = layerwise_rhat({k: v.reshape(1, count, -1) for k, v in weights.items()})
    summary = layers["all"]
    out: dict[str, Any] = {
        "chain_draws": count,
        "weights_ess_sum": float(ess_all.nansum()),
        "weights_ess_mean": float(ess_all.nanmean()),
        "weights_rhat_split_mean": summary["mean"],
        "weights_rhat_frac_below_1.1": summary["frac_below_1.1"],
        "weights_rhat_frac_below_1.2": summary["frac_below_1.2"],
        "layers": {k: {**v, "ess_mean": float(ess[k].nanmean())}
                   for k, v in layers.items() if k != "all"},
    }
    probs = _probe_predictions(result, x_probe)  # (S, n_probe, K) or (S, n_probe)
    flat = probs.reshape(count, -1)
    f_ess = ess_tfp_single_chain(flat)
    f_rhat = rhat_split_sommer(flat[None])[0]
    finite = f_rhat[~torch.isnan(f_rhat)]
    out.update({
        "function_probe_points": len(x_probe),
        "function_ess_mean": float(f_ess.nanmean()),
        "function_rhat_split_mean": float(finite.mean()) if len(finite) else float("nan"),
        "function_rhat_frac_below_1.1": float((finite < 1.1).double().mean())
        if len(finite) else float("nan"),
    })
    out["_layers"] = {k: v for k, v in layers.items() if k != "all"}
    out["_layer_ess"] = {k: float(v.nanmean()) for k, v in ess.items()}
    trace = probs[:, :TRACE_POINTS].reshape(count, min(TRACE_POINTS, probs.shape[1]), -1)
    out["_probe_trace"] = trace[..., 0] if trace.shape[-1] == 1 else trace.max(-1).values
    out["_probe_names"] = [f"probe {i}: max prob" if trace.shape[-1] > 1
                           else f"probe {i}: mean" for i in range(trace.shape[1])]
    return out


def _probe_predictions(result: Result, x: Tensor) -> Tensor:
    preds = []
    for theta in result.iter_draws():
        pred = result.problem.predictive(theta, x)
        preds.append(pred.mean if isinstance(pred, GaussianPredictive) else pred)
    return torch.stack(preds).double()
