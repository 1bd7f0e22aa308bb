"""MCMC convergence diagnostics in torch, batched over millions of coordinates.

Inputs are ``(chains, draws, *coords)`` tensors (``ess_tfp_single_chain``: one chain,
``(draws, *coords)``); results have shape ``coords`` (``rhat_split_sommer``:
``(chains, *coords)``), float64, on the input's device.

- :mod:`~bdlkit.diagnostics.vehtari`: rank-normalised split R̂ and bulk / tail / mean ESS of
  Vehtari et al. (2021), equal to ArviZ's ``rhat(method="rank")`` and
  ``ess(method="bulk" | "tail" | "mean")``.
- :mod:`~bdlkit.diagnostics.variants`: the variants behind L2E's numbers (``docs/metrics.md``):
  TFP's single-chain ESS, TFP's Brooks–Gelman R̂ (a variance ratio), Sommer et al.'s
  per-chain split R̂ and the layer-wise summary.
"""

from __future__ import annotations

from bdlkit.diagnostics.variants import (
    ess_per_second,
    ess_tfp_single_chain,
    fraction_below,
    layerwise_rhat,
    rhat_split_sommer,
    rhat_tfp_bg98,
    summarize,
)
from bdlkit.diagnostics.vehtari import (
    RHAT_MAX,
    ess_bulk_vehtari21,
    ess_mean,
    ess_tail_vehtari21,
    rank_normalize,
    rhat_bulk,
    rhat_split,
    rhat_tail,
    rhat_vehtari21,
    split_chains,
)

__all__ = [
    "RHAT_MAX",
    "ess_bulk_vehtari21",
    "ess_mean",
    "ess_per_second",
    "ess_tail_vehtari21",
    "ess_tfp_single_chain",
    "fraction_below",
    "layerwise_rhat",
    "rank_normalize",
    "rhat_bulk",
    "rhat_split",
    "rhat_split_sommer",
    "rhat_tail",
    "rhat_tfp_bg98",
    "rhat_vehtari21",
    "split_chains",
    "summarize",
]
