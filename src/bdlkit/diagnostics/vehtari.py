"""Rank-normalised split R̂ and ESS of Vehtari et al. (2021), batched in torch.

Reference: A. Vehtari, A. Gelman, D. Simpson, B. Carpenter, P.-C. Bürkner (2021),
"Rank-normalization, folding, and localization: an improved R̂ for assessing convergence of
MCMC", Bayesian Analysis 16(2):667–718; ``docs/metrics.md`` (ESS, R-hat). The numbers are those
of ArviZ (``arviz.rhat(method="rank")``, ``arviz.ess(method="bulk" | "tail" | "mean")``, read
in ``arviz/stats/diagnostics.py``), to 1e-6 in ``tests/diagnostics``.

Input ``x`` has shape ``(chains, draws, *coords)``; every function reduces over chains and
draws and returns a float64 tensor of shape ``coords`` on ``x.device`` (a scalar tensor for
``(chains, draws)`` input). With M = 2·chains split chains of N = draws // 2 draws:

- split: each chain is cut into its first and last N draws; for odd ``draws`` the middle
  draw is dropped (ArviZ's ``_split_chains``).
- z-scale: ``z = Φ⁻¹((r − 3/8)/(S + 1/4))``, r the rank among all S pooled draws, ties
  sharing their average rank.
- R̂: ``sqrt(var⁺/W)``, ``W`` the mean unbiased within-chain variance,
  ``var⁺ = ((N−1)/N)·W + B/N``, ``B/N`` the unbiased variance of the chain means. Bulk: on
  the z-scaled split draws; tail: on the z-scaled folded split draws ``|θ − median θ|``;
  ``rhat_vehtari21 = max(bulk, tail)``.
- ESS: Geyer's initial monotone sequence estimator on multi-chain autocorrelations
  (``bdlkit.diagnostics._core.ess_core``). Bulk: on the z-scaled split draws; tail: the
  minimum over the 5 % and 95 % quantiles of the ESS of the indicator ``θ ≤ q̂``; mean: on
  the raw split draws.

Why hand-written: ArviZ is numpy and loops over coordinates in Python; bdlkit computes the
diagnostics of every network parameter (millions of coordinates) in torch, on the GPU,
chunked over coordinates (``chunk_size``: coordinates per chunk; ``None`` keeps a chunk near
2**20 draws). On CPU the sorts run through numpy's SIMD argsort (3x torch.sort).

Edge cases, identical to ArviZ unless stated:

- a coordinate with any NaN draw gives NaN;
- a constant coordinate gives NaN R̂ (0/0) and ESS = M·N, the number of split draws
  (ArviZ's ``max − min < 1e-15`` rule on the series whose ESS is taken);
- chains that are each constant at different values give R̂ = inf (bdlkit's variance of a
  constant chain is exactly 0; ArviZ's ``np.var`` can leave rounding noise and return a
  huge finite value instead);
- fewer than 4 draws, or fewer than 2 chains for R̂, raise ``ValueError`` (ArviZ logs a
  warning and returns NaN).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from bdlkit.diagnostics._core import (
    apply_chunked,
    check_samples,
    ess_core,
    median_sorted,
    rank_normalize_rows,
    rhat_core,
    sort_rows,
    sorted_values,
    split_halves,
    type7_quantile,
)

__all__ = [
    "RHAT_MAX",
    "ess_bulk_vehtari21",
    "ess_mean",
    "ess_tail_vehtari21",
    "rank_normalize",
    "rhat_bulk",
    "rhat_split",
    "rhat_tail",
    "rhat_vehtari21",
    "split_chains",
]

_MIN_DRAWS = 4
#: The R̂ below which Vehtari et al. (2021) use the draws, and bdlkit's one R̂ threshold —
#: the run-health check (bdlkit.evaluation.health) and the line of ``rhat_layers.png``.
RHAT_MAX = 1.01


# ------------------------------------------------------------------- transforms


def rank_normalize(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Rank-normal scores of ``x (chains, draws, *coords)``, pooled over chains and draws.

    ``z = Φ⁻¹((r − 3/8)/(S + 1/4))`` with S = chains·draws and r the rank of the draw among
    the S draws of its coordinate (average ranks for ties); ArviZ's ``_z_scale``. Returns a
    float64 tensor of the shape of ``x``; a coordinate with a NaN draw is NaN throughout
    (ArviZ ranks the other draws instead), a constant coordinate is 0 throughout.
    """
    x = check_samples(x, "rank_normalize")
    chains, draws = x.shape[:2]

    def kernel(block: Tensor) -> Tensor:
        return rank_normalize_rows(block.reshape(len(block), -1)).view(-1, chains, draws)

    return apply_chunked(kernel, x, sample_dims=2, chunk_size=chunk_size)


def split_chains(x: Tensor) -> Tensor:
    """Split each chain of ``x (chains, draws, *coords)`` into halves.

    Returns ``(2·chains, draws // 2, *coords)`` in ``x``'s dtype: the first halves of all
    chains, then the last halves. For odd ``draws`` the middle draw is dropped, as ArviZ's
    ``_split_chains`` does (``ary[:, :half]`` and ``ary[:, -half:]``).
    """
    x = check_samples(x, "split_chains", min_draws=2)
    return split_halves(x, 1)


# ---------------------------------------------------------------------- kernels


def _split_z(block: Tensor) -> tuple[Tensor, Tensor]:
    """``(K, chains, draws)`` -> (bulk z, folded z), both ``(K, M, N)`` split chains."""
    split = split_halves(block, 2)
    k, m, n = split.shape
    flat = split.reshape(k, m * n)
    order = sort_rows(flat)
    bulk = rank_normalize_rows(flat, order).view(k, m, n)
    folded = (flat - median_sorted(order[0])[:, None]).abs()
    return bulk, rank_normalize_rows(folded).view(k, m, n)


def _bulk_z(block: Tensor) -> Tensor:
    split = split_halves(block, 2)
    return rank_normalize_rows(split.reshape(len(split), -1)).view(split.shape)


def _rhat_rank_kernel(block: Tensor) -> Tensor:
    bulk, tail = (rhat_core(z) for z in _split_z(block))
    return torch.where(tail > bulk, tail, bulk)  # Python's max(bulk, tail), NaN included


def _tail_ess_kernel(probs: tuple[float, float]) -> Callable[[Tensor], Tensor]:
    def kernel(block: Tensor) -> Tensor:
        ordered = sorted_values(block.reshape(len(block), -1))
        ess = []
        for p in probs:
            q = type7_quantile(ordered, p)[:, None, None]
            ess.append(ess_core(split_halves((block <= q).to(block.dtype), 2)))
        return torch.where(ess[1] < ess[0], ess[1], ess[0])  # Python's min(low, high)

    return kernel


# ------------------------------------------------------------------------ R-hat


def rhat_bulk(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Bulk R̂: split R̂ of the pooled z-scaled split chains (ArviZ ``method="z_scale"``).

    ``x``: ``(chains, draws, *coords)``, chains ≥ 2, draws ≥ 4; returns shape ``coords``.
    NaN draw -> NaN; constant coordinate -> NaN; chains constant at distinct values -> inf.
    """
    x = check_samples(x, "rhat_bulk", min_chains=2, min_draws=_MIN_DRAWS)
    return apply_chunked(lambda b: rhat_core(_bulk_z(b)), x, sample_dims=2, chunk_size=chunk_size)


def rhat_split(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Split R̂ without rank normalisation (Gelman et al., BDA3 §11.4; ArviZ
    ``method="split"``): ``sqrt(var⁺/W)`` on the split chains of the raw draws.

    ``x``: ``(chains, draws, *coords)``, chains ≥ 2, draws ≥ 4; returns shape ``coords``.
    """
    x = check_samples(x, "rhat_split", min_chains=2, min_draws=_MIN_DRAWS)
    return apply_chunked(lambda b: rhat_core(split_halves(b, 2)), x, sample_dims=2,
                         chunk_size=chunk_size)


def rhat_tail(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Tail (folded) R̂: split R̂ of the z-scaled ``|θ − median θ|`` of the split chains, the
    median taken over all split draws (ArviZ's tail term of ``method="rank"``).

    ``x``: ``(chains, draws, *coords)``, chains ≥ 2, draws ≥ 4; returns shape ``coords``.
    NaN draw -> NaN; constant coordinate (or constant ``|θ − median|``) -> NaN.
    """
    x = check_samples(x, "rhat_tail", min_chains=2, min_draws=_MIN_DRAWS)
    return apply_chunked(
        lambda b: rhat_core(_split_z(b)[1]), x, sample_dims=2, chunk_size=chunk_size
    )


def rhat_vehtari21(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Rank-normalised split R̂ of Vehtari et al. (2021): ``max(rhat_bulk, rhat_tail)``;
    ``arviz.rhat(x, method="rank")`` per coordinate. Recommended threshold 1.01.

    ``x``: ``(chains, draws, *coords)``; returns float64 of shape ``coords``.

    - NaN draw -> NaN; constant coordinate -> NaN (0/0 in both terms).
    - The max is Python's ``max(bulk, tail)`` as in ArviZ: a NaN bulk term gives NaN, a NaN
      tail term alone (e.g. draws ±1 in equal numbers, so ``|θ − median|`` is constant)
      gives the bulk value.
    - Fewer than 2 chains or 4 draws: ``ValueError``. (Splitting would make one chain
      computable, but ArviZ returns NaN there; bdlkit refuses rather than silently differ.)
    """
    x = check_samples(x, "rhat_vehtari21", min_chains=2, min_draws=_MIN_DRAWS)
    return apply_chunked(_rhat_rank_kernel, x, sample_dims=2, chunk_size=chunk_size)


# -------------------------------------------------------------------------- ESS


def ess_bulk_vehtari21(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Bulk ESS: Geyer ESS of the pooled z-scaled split chains;
    ``arviz.ess(x, method="bulk")`` per coordinate.

    ``x``: ``(chains, draws, *coords)``, any number of chains, draws ≥ 4 (else
    ``ValueError``); returns float64 of shape ``coords``. NaN draw -> NaN; constant
    coordinate -> ``2·chains·(draws // 2)``, the number of split draws.
    """
    x = check_samples(x, "ess_bulk_vehtari21", min_draws=_MIN_DRAWS)
    return apply_chunked(lambda b: ess_core(_bulk_z(b)), x, sample_dims=2, chunk_size=chunk_size)


def ess_tail_vehtari21(
    x: Tensor,
    prob: float | Sequence[float] = 0.05,
    *,
    chunk_size: int | None = None,
) -> Tensor:
    """Tail ESS: ``min(ESS(θ ≤ q̂_p), ESS(θ ≤ q̂_{1−p}))``; ``arviz.ess(x, method="tail")``
    per coordinate (ArviZ's default ``prob=None`` is ``p = 0.05``).

    ``q̂`` is the type-7 quantile of all chains·draws draws (before splitting); the 0/1
    indicator series is then split and its Geyer ESS taken, without rank normalisation.
    ``prob`` is ``p`` or a pair ``(p_low, p_high)``. NaN draw -> NaN. Constant coordinate ->
    ``2·chains·(draws // 2)``; so is the term of a quantile whose indicator is constant on
    the split chains (heavy ties at an extreme).
    """
    x = check_samples(x, "ess_tail_vehtari21", min_draws=_MIN_DRAWS)
    if isinstance(prob, Sequence):
        if len(prob) != 2:
            raise ValueError(f"prob must be a float or a pair of floats, got {prob!r}")
        probs = (float(prob[0]), float(prob[1]))
    else:
        probs = (float(prob), 1.0 - float(prob))
    if not all(0.0 <= p <= 1.0 for p in probs):
        raise ValueError(f"tail probabilities must lie in [0, 1], got {probs}")
    return apply_chunked(_tail_ess_kernel(probs), x, sample_dims=2, chunk_size=chunk_size)


def ess_mean(x: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """ESS for the mean: Geyer ESS of the raw split chains (no rank normalisation);
    ``arviz.ess(x, method="mean")`` per coordinate.

    ``x``: ``(chains, draws, *coords)``, draws ≥ 4; returns float64 of shape ``coords``.
    NaN draw -> NaN; a coordinate whose split draws span less than 1e-15 (absolute, ArviZ's
    rule) -> ``2·chains·(draws // 2)``.
    """
    x = check_samples(x, "ess_mean", min_draws=_MIN_DRAWS)
    return apply_chunked(
        lambda b: ess_core(split_halves(b, 2)), x, sample_dims=2, chunk_size=chunk_size
    )
