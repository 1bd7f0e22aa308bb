"""Shared batched kernels of the MCMC diagnostics: validation, chunking, moments, rank
normalisation, chain splitting, FFT autocovariance, the R̂ ratio and Geyer's ESS.

Every kernel works on a float64 block of shape ``(K, chains, draws)`` (K coordinates first,
so that sorts, FFTs and reductions run over contiguous trailing dimensions) and returns a
tensor of shape ``(K,)``. :func:`apply_chunked` turns the user-facing layout
``(chains, draws, *coords)`` into such blocks, one chunk of coordinates at a time, and puts
the results back into shape ``coords``.

Why hand-written: ArviZ and TFP implement these formulas in numpy / TensorFlow, ArviZ one
coordinate at a time in Python (``_ess`` is a scalar ``while`` loop). bdlkit needs them in
torch, on the GPU, for millions of network parameters at once, so everything here is
vectorised over coordinates; Geyer's initial positive / monotone sequence is written as a
masked cumulative minimum instead of a loop (see :func:`ess_core`).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from bdlkit.core.errors import caller_stacklevel

__all__ = [
    "DEFAULT_CHUNK_VALUES",
    "ChainDraws",
    "apply_chunked",
    "as_float_tensor",
    "autocov",
    "check_samples",
    "ess_core",
    "is_constant",
    "median_sorted",
    "moments",
    "rank_normalize_rows",
    "rhat_core",
    "sort_rows",
    "sorted_values",
    "split_halves",
    "type7_quantile",
]

#: Default chunk size: as many coordinates as fit ``2**20`` draws (8 MiB in float64) per
#: temporary; the kernels hold a handful of temporaries of that size at a time. Larger
#: chunks were slower on CPU (cache), and a GPU is already busy at this size.
DEFAULT_CHUNK_VALUES = 2**20

#: ArviZ's threshold on ``max − min`` below which a series counts as constant
#: (``np.finfo(float).resolution``).
_CONSTANT_RESOLUTION = float(np.finfo(np.float64).resolution)


def as_float_tensor(x: object, name: str = "x") -> Tensor:
    """``x`` as a real torch tensor (not copied when it already is one)."""
    t = x if isinstance(x, Tensor) else torch.as_tensor(np.asarray(x))
    if t.is_complex():
        raise ValueError(f"{name} must be real, got dtype {t.dtype}")
    return t


@runtime_checkable
class ChainDraws(Protocol):
    """What holds chains of draws and gives them in the diagnostics' layout, e.g. a
    :class:`bdlkit.Result` of a sampler (``Result.chains_first()``); every function here
    takes one in place of a tensor."""

    def chains_first(self) -> Tensor: ...


def check_samples(
    x: object, name: str, *, min_chains: int = 1, min_draws: int = 1, leading: int = 2
) -> Tensor:
    """Validate ``x`` of shape ``(chains, draws, *coords)`` (``leading = 2``) or
    ``(draws, *coords)`` (``leading = 1``) and return it as a real tensor. ``x`` may also be
    a :class:`ChainDraws` (a sampler's Result), which knows its layout. A tensor with more
    chains than draws per chain is valid (many short parallel chains) but may be
    ``(draws, chains, ...)``, the layout of ``Result.samples``: it is taken as given, with
    a ``UserWarning`` naming the fix (as ArviZ warns about the same shapes)."""
    layout = "(chains, draws, *coords)" if leading == 2 else "(draws, *coords)"
    if isinstance(x, ChainDraws):
        t = as_float_tensor(x.chains_first())
        if leading == 1:
            if t.shape[0] != 1:
                raise ValueError(f"{name} takes one chain, this result has {t.shape[0]}: "
                                 "pass result.chains_first()[c] for chain c")
            t = t[0]
    else:
        t = as_float_tensor(x)
        if leading == 2 and t.ndim >= 2 and t.shape[0] > t.shape[1]:
            warnings.warn(
                f"{name}: x of shape {tuple(t.shape)} is read as {t.shape[0]} chains of "
                f"{t.shape[1]} draws each (the layout here is {layout}). If it is (draws, "
                "chains, ...), as bdlkit.Result.samples is, pass the Result itself, "
                "result.chains_first() or x.transpose(0, 1)",
                UserWarning, stacklevel=caller_stacklevel())
    if t.ndim < leading:
        raise ValueError(f"{name}: x must have shape {layout}, got {tuple(t.shape)}")
    if leading == 2 and t.shape[0] < min_chains:
        raise ValueError(
            f"{name} needs at least {min_chains} chains, got {t.shape[0]} (shape {layout})"
        )
    draws = t.shape[leading - 1]
    if draws < min_draws:
        raise ValueError(f"{name} needs at least {min_draws} draws per chain, got {draws}")
    return t


def apply_chunked(
    fn: Callable[[Tensor], Tensor],
    x: Tensor,
    *,
    sample_dims: int,
    chunk_size: int | None,
) -> Tensor:
    """Apply the kernel ``fn`` to float64 blocks ``(K, *x.shape[:sample_dims])`` of ``x``.

    ``x`` has shape ``(*sample_shape, *coords)`` and ``fn`` maps ``(K, *sample_shape)`` to
    ``(K, *lead)`` (``lead`` is ``()`` for a reduction). The result has shape
    ``(*lead, *coords)``, dtype float64, on ``x.device``; it is NaN for every coordinate
    with a NaN draw, whatever ``fn`` returns there (``fn`` sees zeros instead of that
    coordinate's draws). ``chunk_size`` is the number of coordinates per block (``None``:
    as many as hold about ``2**20`` draws).
    """
    sample_shape = tuple(x.shape[:sample_dims])
    coords = tuple(x.shape[sample_dims:])
    if chunk_size is None:
        chunk_size = max(1, DEFAULT_CHUNK_VALUES // max(1, math.prod(sample_shape)))
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
    flat = x.reshape(*sample_shape, -1)
    num = flat.shape[-1]
    perm = (sample_dims, *range(sample_dims))
    f64 = {"dtype": torch.float64, "device": x.device}
    outs = []
    with torch.no_grad():
        for start in range(0, max(num, 1), chunk_size):
            part = flat[..., start : start + chunk_size].permute(perm)
            if num:
                block = torch.empty((part.shape[0], *sample_shape), **f64).copy_(part)
            else:  # run once on a dummy coordinate to learn the output shape
                block = torch.zeros((1, *sample_shape), **f64)
            has_nan = torch.isnan(block).reshape(block.shape[0], -1).any(1)
            if bool(has_nan.any()):
                block[has_nan] = 0.0
            res = fn(block)
            outs.append(torch.where(has_nan.view(-1, *[1] * (res.ndim - 1)), torch.nan, res))
    out = torch.cat(outs, 0)[:num]
    return out.permute(*range(1, out.ndim), 0).reshape((*out.shape[1:], *coords))


# --------------------------------------------------------------------------- moments


def moments(x: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and unbiased (ddof = 1) variance over the last dimension.

    Computed around the first entry, so a constant series has its value as mean and a
    variance of exactly 0 (and the shift helps cancellation).
    """
    ref = x[..., :1].contiguous()
    shifted = x - ref
    mean_shift = shifted.mean(-1, keepdim=True)
    centred = shifted - mean_shift
    var = torch.linalg.vecdot(centred, centred) / (x.shape[-1] - 1)
    return (ref + mean_shift).squeeze(-1), var


def is_constant(x: Tensor) -> Tensor:
    """``(K, ...) -> (K,)``: whether all entries of each row are equal."""
    flat = x.reshape(x.shape[0], -1)
    return flat.amax(1) == flat.amin(1)


# ------------------------------------------------------------- ranks and splitting


@functools.lru_cache(maxsize=4)
def _sort_pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(workers, thread_name_prefix="bdlkit-sort")


def _argsort_numpy(values: np.ndarray) -> np.ndarray:
    """Row-wise ``np.argsort``, split over ``torch.get_num_threads()`` threads (numpy
    releases the GIL while sorting)."""
    workers = min(torch.get_num_threads(), len(values) // 1024)
    if workers <= 1:
        return np.argsort(values, axis=-1)
    out = np.empty(values.shape, dtype=np.intp)
    bounds = np.linspace(0, len(values), workers + 1).astype(int)

    def work(i: int) -> None:
        out[bounds[i] : bounds[i + 1]] = np.argsort(values[bounds[i] : bounds[i + 1]], axis=-1)

    list(_sort_pool(workers).map(work, range(workers)))
    return out


#: Sort CPU tensors with numpy (see :func:`sort_rows`); False forces ``torch.sort``.
NUMPY_SORT_ON_CPU = True


def _numpy_sort(values: Tensor) -> bool:
    return NUMPY_SORT_ON_CPU and values.device.type == "cpu"


def sort_rows(values: Tensor) -> tuple[Tensor, Tensor]:
    """``(sorted values, argsort indices)`` of each row of ``values (K, S)``.

    On CPU this is numpy's SIMD ``argsort`` run on torch's number of threads (about 3x
    faster than ``torch.sort`` for rows of a few hundred draws on two cores, and the sort
    dominates the rank-based diagnostics); elsewhere ``torch.sort``. The order among ties
    is unspecified; nothing here depends on it.
    """
    if _numpy_sort(values):
        idx = torch.from_numpy(_argsort_numpy(values.detach().numpy()))
        return values.gather(-1, idx), idx
    return values.sort(dim=-1)


def sorted_values(values: Tensor) -> Tensor:
    """Each row of ``values (K, S)`` sorted (no indices; ``np.sort`` on CPU)."""
    if _numpy_sort(values):
        return torch.from_numpy(np.sort(values.detach().numpy(), axis=-1))
    return values.sort(dim=-1).values


def rank_normalize_rows(values: Tensor, order: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Blom-rank normal scores of each row of ``values (K, S)``.

    ``z = Φ⁻¹((r − 3/8)/(S + 1/4))`` with ``r`` the average rank (ties share the mean of
    their ranks, as ``scipy.stats.rankdata(method="average")``). A constant row maps to
    ``Φ⁻¹(1/2) = 0`` exactly. ``order`` may pass :func:`sort_rows` of ``values``.

    Average ranks are half-integers ``1 + j/2``, so Φ⁻¹ is tabulated once for the 2S − 1
    possible values and looked up; a tie group spanning sorted positions ``a … b``
    (0-based) has ``j = a + b``. (Cumulative sums, not ``cummax``, which is slow on CPU.)
    """
    size = values.shape[-1]
    ordered, idx = sort_rows(values) if order is None else order
    half_ranks = torch.arange(2 * size - 1, dtype=values.dtype, device=values.device) / 2 + 1
    table = torch.special.ndtri((half_ranks - 3 / 8) / (size + 1 / 4))
    pos = torch.arange(size, device=values.device)
    starts_group = ordered[:, 1:] != ordered[:, :-1]  # a new tie group starts at p + 1
    scores = table[2 * pos].expand_as(values)
    tied = ~starts_group.all(1)
    if bool(tied.any()):  # group g ends at e_g = Σ_{h≤g} count_h, so a + b = 2·e_g − count_g − 1
        starts_group = starts_group[tied]
        group = torch.cat([starts_group.new_zeros(len(starts_group), 1), starts_group], 1)
        group = group.long().cumsum(1)
        count = torch.zeros_like(group).scatter_add_(1, group, torch.ones_like(group))
        scores = scores.clone()
        scores[tied] = table[(2 * count.cumsum(1) - count - 1).gather(1, group)]
    return torch.empty_like(values).scatter_(1, idx, scores)


def type7_quantile(ordered: Tensor, prob: float) -> Tensor:
    """Quantile ``prob`` of each row of the row-sorted ``ordered (K, S)``, the linear
    (Hyndman–Fan type 7, R's default) rule, with the arithmetic of
    ``scipy.stats.mstats.mquantiles(alphap=1, betap=1)`` that ArviZ uses."""
    size = ordered.shape[-1]
    if size == 1:
        return ordered[:, 0]
    aleph = size * prob + (1.0 + prob * (1.0 - 1.0 - 1.0))
    k = math.floor(min(max(aleph, 1), size - 1))
    gamma = min(max(aleph - k, 0.0), 1.0)
    return (1.0 - gamma) * ordered[:, k - 1] + gamma * ordered[:, k]


def median_sorted(ordered: Tensor) -> Tensor:
    """Median of each row of the row-sorted ``ordered (K, S)`` (mean of the two middle
    values for even S, as ``numpy.median``)."""
    size = ordered.shape[-1]
    if size % 2:
        return ordered[:, size // 2]
    return (ordered[:, size // 2 - 1] + ordered[:, size // 2]) / 2


def split_halves(x: Tensor, dim: int) -> Tensor:
    """Split every chain along the draw dimension ``dim`` into its first and last
    ``draws // 2`` draws (the middle draw of an odd-length chain is dropped, as in ArviZ's
    ``_split_chains``) and stack the halves on the chain dimension ``dim − 1``: first the
    first halves of all chains, then the second halves."""
    half = x.shape[dim] // 2
    return torch.cat(
        [x.narrow(dim, 0, half), x.narrow(dim, x.shape[dim] - half, half)], dim=dim - 1
    )


# ------------------------------------------------------------------------ R-hat


def rhat_core(x: Tensor) -> Tensor:
    """Gelman–Rubin R̂ of ``x (K, chains, draws)`` as in ArviZ's ``_rhat``.

    ``B = n·Var_j(mean_j)``, ``W = mean_j s²_j`` (both ddof = 1),
    ``R̂ = sqrt((B/W + n − 1)/n) = sqrt(var⁺/W)`` with ``var⁺ = ((n−1)/n)·W + B/n``.
    ``W = B = 0`` gives NaN; ``W = 0 < B`` gives ``inf``.
    """
    n = x.shape[-1]
    chain_mean, chain_var = moments(x)
    between = n * moments(chain_mean)[1]
    within = chain_var.mean(-1)
    return torch.sqrt((between / within + n - 1) / n)


# -------------------------------------------------------------------------- ESS


def autocov(x: Tensor) -> Tensor:
    """Biased autocovariance ``(1/n) Σ_{t} (x_{t+k} − x̄)(x_t − x̄)`` for every lag ``k``
    along the last dimension, by zero-padded FFT (ArviZ's ``stats_utils.autocov``)."""
    n = x.shape[-1]
    centred = x - x.mean(-1, keepdim=True)
    spec = torch.fft.rfft(centred, n=2 * n, dim=-1)
    return torch.fft.irfft(spec.real**2 + spec.imag**2, n=2 * n, dim=-1)[..., :n] / n


def ess_core(x: Tensor) -> Tensor:
    """Multi-chain ESS of ``x (K, chains, draws)`` exactly as ArviZ's ``_ess``.

    With ``m`` chains of ``n`` draws, biased autocovariances ``c_{j,t}``,
    ``W = (n/(n−1))·mean_j c_{j,0}`` and ``var⁺ = ((n−1)/n)·W + Var_j(mean_j)`` (the last
    term only for m > 1)::

        ρ̂_0 = 1,   ρ̂_t = 1 − (W − mean_j c_{j,t}) / var⁺,   P̂_k = ρ̂_{2k} + ρ̂_{2k+1}

    ArviZ's Geyer loop, written without the loop: pair ``k ≥ 1`` is evaluated while
    ``2k − 1 < n − 3`` and all earlier pairs are > 0; ``k_last`` is the last evaluated pair
    (stopping at the first ``P̂_k ≤ 0``). The pairs ``0 … k_last − 1`` enter through their
    running minimum (the initial monotone sequence); ``ρ̂_{2·k_last}`` is added once when
    it is positive or its pair is ≥ 0 (ArviZ's "improve estimation" step). Then::

        τ̂ = max(−1 + 2·Σ_{k<k_last} min_{i≤k} P̂_i + ρ̂_{2·k_last},  1/log10(m·n))
        ESS = m·n / τ̂

    Constant rows (``max − min < 1e-15``, ArviZ's test) give ``m·n``; a NaN ``ρ̂_1`` gives
    NaN.
    """
    _, m, n = x.shape
    size = m * n
    acov = autocov(x).mean(1)  # (K, n): mean over chains of c_{j,t}
    mean_var = acov[:, 0] * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if m > 1:
        var_plus = var_plus + moments(x.mean(-1))[1]
    k_max = max(0, (n - 3) // 2)  # last pair index the loop may evaluate
    rho = 1.0 - (mean_var[:, None] - acov[:, : 2 * k_max + 2]) / var_plus[:, None]
    rho[:, 0] = 1.0
    pairs = rho[:, 0::2] + rho[:, 1::2]  # (K, k_max + 1)
    idx = torch.arange(k_max + 1, device=x.device)
    failed = ~(pairs > 0)
    first_fail = torch.where(failed, idx, k_max + 1).amin(1)
    k_last = first_fail.clamp(max=k_max)
    monotone = pairs.cummin(1).values
    head = torch.where(idx < k_last[:, None], monotone, 0.0).sum(1)
    rho_end = rho.gather(1, 2 * k_last[:, None]).squeeze(1)
    pair_end = pairs.gather(1, k_last[:, None]).squeeze(1)
    keep_end = (rho_end > 0) | ((k_last > 0) & (pair_end >= 0))
    tau = -1.0 + 2.0 * head + torch.where(keep_end, rho_end, 0.0)
    tau = tau.clamp(min=1.0 / math.log10(size))
    ess = size / tau
    ess = torch.where(torch.isnan(rho[:, 1]), torch.nan, ess)
    flat = x.reshape(x.shape[0], -1)
    constant = (flat.amax(1) - flat.amin(1)) < _CONSTANT_RESOLUTION
    return torch.where(constant, float(size), ess)
