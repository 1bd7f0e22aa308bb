"""The ESS and R̂ variants behind the numbers of L2E (Kim et al.), batched in torch.

Definitions: ``docs/metrics.md`` (ESS, R-hat). L2E's ``diagnostics.ipynb`` calls
TensorFlow Probability (``tfp.mcmc.effective_sample_size``, ``potential_scale_reduction``)
and a copy of Sommer et al. (2024)'s split R̂; the formulas below are those of
``tensorflow_probability/python/mcmc/diagnostic.py`` (TFP ≥ 0.12) and of the notebook, not of
Vehtari et al. (2021) (for those see :mod:`bdlkit.diagnostics.vehtari`). The thresholds live on
different scales (``rhat_tfp_bg98`` is a variance ratio, the others are square roots), so the
names must not be mixed up.

- ``ess_tfp_single_chain`` (one chain x_1 … x_N per coordinate)::

      ρ̂_k = [(N−k)⁻¹ Σ_{n=1}^{N−k} (x_{n+k} − x̄)(x_n − x̄)] / [N⁻¹ Σ_n (x_n − x̄)²]
      K   = (first k with ρ̂_k < 0) − 1, or N − 1
      ESS = N / (−1 + 2·Σ_{k=0}^{K} (1 − k/N)·ρ̂_k)

- ``rhat_tfp_bg98`` (m chains of n draws; Brooks & Gelman 1998, not square-rooted)::

      W = mean_j s²_j,  B/n = Var_j(x̄_j),  σ̂²₊ = ((n−1)/n)·W + B/n   (ddof = 1 throughout)
      R̂ = ((m+1)/m)·σ̂²₊/W − (n−1)/(m·n)

- ``rhat_split_sommer`` (per chain): rank-normalise the chain's n draws among themselves,
  ``z = Φ⁻¹((r − 3/8)/(n + 1/4))``, split z into 2 halves of n_h draws, and
  ``R̂ = sqrt((((n_h−1)/n_h)·W + B/n_h)/W)`` over the two halves.

Why hand-written: TFP is TensorFlow and Sommer's code is JAX; bdlkit evaluates these on
every parameter of a network (ResNet20-FRN: 271 098 coordinates per sample) in torch, on
the GPU, chunked over coordinates (``chunk_size``: coordinates per chunk; ``None`` keeps a
chunk near 2**20 draws). The autocovariances are FFTs and the kernels are shared with the
Vehtari diagnostics.

Edge cases (bdlkit's choices where TFP/Sommer are silent or return NaN):

- a NaN draw makes the coordinate NaN (for ``rhat_split_sommer`` only that chain's value);
- a constant coordinate gives ESS = N (TFP gives NaN, 0/0; N keeps L2E's sum over
  coordinates finite) and R̂ = NaN (0/0); chains constant at distinct values give R̂ = inf;
- ``rhat_split_sommer`` with an odd number of draws ranks all n draws and drops the middle
  one when splitting, like :func:`bdlkit.diagnostics.split_chains`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from bdlkit.diagnostics._core import (
    apply_chunked,
    as_float_tensor,
    autocov,
    check_samples,
    is_constant,
    moments,
    rank_normalize_rows,
    rhat_core,
    split_halves,
)

__all__ = [
    "ess_per_second",
    "ess_tfp_single_chain",
    "fraction_below",
    "layerwise_rhat",
    "rhat_split_sommer",
    "rhat_tfp_bg98",
]


# -------------------------------------------------------------------------- ESS


def _ess_tfp_kernel(block: Tensor) -> Tensor:
    n = block.shape[-1]
    acov = autocov(block)  # (1/N) Σ_{n≤N−k} …  =  (1 − k/N)·ρ̂_k · acov_0
    weighted = acov / acov[:, :1]
    keep = (acov >= 0).cumprod(1)  # ρ̂_k < 0 ⇔ acov_k < 0; drop it and every later lag
    ess = n / (-1.0 + 2.0 * (weighted * keep).sum(1))
    return torch.where(is_constant(block), float(n), ess)


def ess_tfp_single_chain(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Single-chain ESS of TFP's ``effective_sample_size(filter_beyond_positive_pairs=False)``
    (``filter_threshold = 0``): the autocorrelation sum truncated before its first negative
    lag; no rank normalisation, no splitting, no pooling, no Geyer pairing.

    ``x``: ``(draws, *coords)``, ONE chain, draws ≥ 2; returns float64 of shape ``coords``.
    L2E sums this over all coordinates of one seed. NaN draw -> NaN; constant coordinate ->
    ``draws`` (TFP returns NaN). Values above ``draws`` are possible (antithetic chains).
    """
    x = check_samples(x, "ess_tfp_single_chain", min_draws=2, leading=1)
    return apply_chunked(_ess_tfp_kernel, x, sample_dims=1, chunk_size=chunk_size)


def ess_per_second(ess: Tensor | float, seconds: float) -> Tensor | float:
    """``ess / seconds``; L2E reports ``Σ_coords ESS / t_epoch / 1e5`` (``docs/metrics.md``,
    ESS). ``seconds`` must be positive."""
    if not seconds > 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    return ess / seconds


# ------------------------------------------------------------------------ R-hat


def _rhat_bg98_kernel(block: Tensor) -> Tensor:
    _, m, n = block.shape
    chain_mean, chain_var = moments(block)
    within = chain_var.mean(-1)
    sigma2_plus = (n - 1) / n * within + moments(chain_mean)[1]
    return (m + 1) / m * sigma2_plus / within - (n - 1) / (m * n)


def rhat_tfp_bg98(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """TFP ≥ 0.12 ``potential_scale_reduction(independent_chain_ndims=1,
    split_chains=False)``: the Brooks–Gelman (1998) variance ratio, NOT square-rooted.

    ``x``: ``(chains, draws, *coords)``, chains ≥ 2, draws ≥ 2; returns float64 of shape
    ``coords``. L2E reports the fraction of coordinates below 1.2 on this scale. NaN draw ->
    NaN; constant coordinate -> NaN; chains constant at distinct values -> inf.
    """
    x = check_samples(x, "rhat_tfp_bg98", min_chains=2, min_draws=2)
    return apply_chunked(_rhat_bg98_kernel, x, sample_dims=2, chunk_size=chunk_size)


def _rhat_sommer_kernel(block: Tensor) -> Tensor:
    halves = split_halves(rank_normalize_rows(block)[:, None, :], 2)  # (K, 2, n_h)
    return rhat_core(halves)  # sqrt((B/W + n_h − 1)/n_h) = the formula above


def rhat_split_sommer(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Per-chain rank-normalised split R̂ with 2 splits (Sommer et al. 2024, L2E's "cR̂").

    ``x``: ``(chains, draws, *coords)``, draws ≥ 4; returns float64 of shape
    ``(chains, *coords)``: one R̂ per chain, ranks taken within that chain only. L2E reports
    the fraction below 1.1. A NaN draw makes that chain's value NaN; a constant chain gives
    NaN; halves constant at distinct values give inf. Odd draws: the middle z is dropped.
    """
    x = check_samples(x, "rhat_split_sommer", min_draws=4)
    return torch.stack(
        [
            apply_chunked(_rhat_sommer_kernel, chain, sample_dims=1, chunk_size=chunk_size)
            for chain in x
        ]
    )


# -------------------------------------------------------------------- summaries


def fraction_below(values: Tensor, threshold: float) -> float:
    """Fraction of the non-NaN entries of ``values`` strictly below ``threshold``.

    NaN entries (constant or NaN coordinates) are ignored: they count neither in the
    numerator nor in the denominator. Returns NaN when every entry is NaN or ``values`` is
    empty. ``inf`` counts as not below.
    """
    values = as_float_tensor(values, "values")
    valid = ~torch.isnan(values)
    num = int(valid.sum())
    if num == 0:
        return math.nan
    return int((values[valid] < threshold).sum()) / num


def summarize(
    values: Tensor, thresholds: Sequence[float] = (1.1, 1.2)
) -> dict[str, float | int]:
    """Mean, population std, ``frac_below_<t>`` and ``num`` of per-coordinate R̂ values
    (NaN left out of all but ``num``)."""
    valid = values[~torch.isnan(values)]
    out: dict[str, float | int] = {
        "mean": float(valid.mean()) if valid.numel() else math.nan,
        "std": float(valid.std(correction=0)) if valid.numel() else math.nan,
    }
    for t in thresholds:
        out[f"frac_below_{t}"] = fraction_below(values, t)
    out["num"] = values.numel()
    return out


def layerwise_rhat(
    samples: Mapping[str, Tensor],
    threshold: Sequence[float] = (1.1, 1.2),
    *,
    chunk_size: int | None = None,
) -> dict[str, dict[str, float | int]]:
    """L2E's layer-wise R̂ (``docs/metrics.md``, R-hat, item 3): per parameter tensor,
    ``avg_split_chain_rhat``, the mean over chains of :func:`rhat_split_sommer`, summarised
    over its coordinates.

    ``samples`` maps a parameter name (e.g. ``"conv1.weight"``, ``"conv1.bias"``: weights
    and biases are separate keys, one entry per key) to a tensor of shape
    ``(chains, draws, *param_shape)``. Returns, for every key and for ``"all"`` (every
    coordinate of every key), ``{"mean", "std", "frac_below_<t>" for t in threshold,
    "num"}``: mean and population std (ddof = 0) of the per-coordinate values, fractions
    from :func:`fraction_below`, and ``num`` the number of coordinates. Coordinates whose
    value is NaN (a constant chain, a NaN draw) are left out of mean, std and fractions but
    counted in ``num``.
    """
    if "all" in samples:
        raise ValueError('"all" is reserved for the summary over every coordinate')
    if not samples:
        raise ValueError("samples is empty")
    result: dict[str, dict[str, float | int]] = {}
    pooled = []
    for name, x in samples.items():
        per_coord = rhat_split_sommer(x, chunk_size=chunk_size).mean(0).reshape(-1)
        result[name] = summarize(per_coord, threshold)
        pooled.append(per_coord.cpu())
    result["all"] = summarize(torch.cat(pooled), threshold)
    return result
