"""Sampling diagnostics of one sampler run, as L2E reports them (``docs/metrics.md``).

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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from bdlkit.diagnostics import ess_tfp_single_chain, rhat_split_sommer, summarize
from bdlkit.problems.likelihoods import GaussianPredictive

if TYPE_CHECKING:  # a result is read here, made by the engine above
    from bdlkit.engine.result import Result

TRACE_POINTS = 4


@torch.no_grad()
def sampler_diagnostics(result: Result, x_probe: Tensor,
                        progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Weight-space and function-space diagnostics of a sampler ``result`` (one chain).

    Draws are read one parameter tensor at a time (a disk store streams its shards), so
    memory holds one layer's draws plus one R̂ and one ESS value per coordinate. The
    likelihood's own parameters (``likelihood.*``) are left out of the weights. Keys
    starting with ``_`` hold values for plots only.

    Args:
        x_probe: the inputs of the function-space probe; every kept draw predicts them.
        progress: called with ``len(x_probe)`` after each draw's probe predictions.
    """
    keys = [k for k in _parameter_names(result) if not k.startswith("likelihood.")]
    if not keys:
        raise ValueError("sampler diagnostics need a network result (named parameters)")
    layers: dict[str, dict[str, Any]] = {}
    rhats, esses = [], []
    count = 0
    for key in keys:
        w = _draws_of(result, key)  # (S, *shape)
        count = w.shape[0]
        flat = w.reshape(count, -1)
        ess = ess_tfp_single_chain(flat)
        rhat = rhat_split_sommer(flat[None])[0]
        layers[key] = {**summarize(rhat), "ess_mean": float(ess.nanmean())}
        rhats.append(rhat.cpu())
        esses.append(ess.cpu())
    ess_all, summary = torch.cat(esses), summarize(torch.cat(rhats))
    out: dict[str, Any] = {
        "chains": 1,
        "chain_draws": count,
        "weights_ess_sum": float(ess_all.nansum()),
        "weights_ess_mean": float(ess_all.nanmean()),
        "weights_rhat_split_mean": summary["mean"],
        "weights_rhat_frac_below_1.1": summary["frac_below_1.1"],
        "weights_rhat_frac_below_1.2": summary["frac_below_1.2"],
        "layers": layers,
    }
    probs = draw_predictions(result, x_probe, progress=progress)  # (S, n_probe, K) or (S, n_probe)
    flat = probs.reshape(count, -1)
    f_rhat = summarize(rhat_split_sommer(flat[None])[0])
    out.update({
        "function_probe_points": len(x_probe),
        "function_ess_mean": float(ess_tfp_single_chain(flat).nanmean()),
        "function_rhat_split_mean": f_rhat["mean"],
        "function_rhat_frac_below_1.1": f_rhat["frac_below_1.1"],
    })
    out["_layers"] = layers
    out["_layer_ess"] = {k: v["ess_mean"] for k, v in layers.items()}
    trace = probs[:, :TRACE_POINTS].reshape(count, min(TRACE_POINTS, probs.shape[1]), -1)
    out["_probe_trace"] = trace[..., 0] if trace.shape[-1] == 1 else trace.max(-1).values
    out["_probe_names"] = [f"probe {i}: max prob" if trace.shape[-1] > 1
                           else f"probe {i}: mean" for i in range(trace.shape[1])]
    return out


def _parameter_names(result: Result) -> list[str]:
    if result.store is not None:
        return list(result.store.shapes) if result.store.structure == "dict" else []
    return list(result.samples) if isinstance(result.samples, dict) else []


def _draws_of(result: Result, key: str) -> Tensor:
    """All kept draws of parameter ``key``, stacked, read shard by shard."""
    if result.store is not None:
        return torch.cat([chunk[key] for chunk in result.store.iter_chunks()])
    return result.samples[key]


def draw_predictions(result: Result, x: Tensor, chunk_size: int = 2048,
                     progress: Callable[[int], Any] | None = None) -> Tensor:
    """Each kept draw's prediction at ``x`` (class probabilities, or a Gaussian's mean),
    stacked in float64: ``(draws, n, K)`` or ``(draws, n)``; ``x`` in chunks of ``chunk_size``;
    ``progress`` (optional) is called with ``len(x)`` after each draw."""
    preds = []
    for theta in result.iter_draws():
        theta = {k: v.to(x.device) for k, v in theta.items()}
        parts = []
        for i in range(0, len(x), chunk_size):
            pred = result.problem.predictive(theta, x[i:i + chunk_size])
            parts.append(pred.mean if isinstance(pred, GaussianPredictive) else pred)
        preds.append(torch.cat(parts))
        if progress is not None:
            progress(len(x))
    return torch.stack(preds).double()
