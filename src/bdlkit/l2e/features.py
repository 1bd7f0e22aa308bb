"""L2E's per-coordinate inputs and the kinetic MLP over them, by chunks of the flat vector.

The features of :mod:`bdlkit.l2e.kinetic` (module docstring, items 1-3): rolling means of
the gradient, the nine features of every scalar parameter, each normalised over its own
parameter tensor, and the MLP 9 → 32 → 32 → 2 on every row. On one flat vector of d
coordinates made of parameter tensors of known sizes (:class:`FlatInputs`), the
normalisation is computed first over whole tensors (:func:`feature_scales`), and the MLP
then runs :data:`CHUNK` rows at a time (:func:`chunked_mlp`), each row scaled by its
tensor's scales: the transient memory is chunk × (9 + 2·32) floats, not d × 32
(:mod:`bdlkit.core.chunks`), and the result is the unchunked one to float rounding.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from bdlkit.core.chunks import chunk_size, spans

DECAYS: tuple[float, ...] = (0.1, 0.5, 0.9, 0.99, 0.999, 0.9999)
FEATURES: tuple[str, ...] = ("g", "theta", "r") + tuple(f"m_{b}" for b in DECAYS)
NUM_FEATURES = len(FEATURES)  # 9
HIDDEN = 32
#: coordinates per evaluation of the MLP (:func:`bdlkit.core.chunks.chunk_size`): 16 384
CHUNK = chunk_size(HIDDEN)
NORM_EPS = 1e-5

MetaParams = dict[str, Tensor]
Leaves = list[Tensor]


def mlp(meta: MetaParams, x: Tensor) -> Tensor:
    """``Linear(9→32) – ReLU – Linear(32→32) – ReLU – Linear(32→2)`` on rows of ``x`` (the
    meta-parameters follow x's dtype and device; a no-op when they match)."""
    w = {k: v.to(x) for k, v in meta.items()}
    h = torch.addmm(w["b0"], x, w["w0"]).relu_()  # fused bias, in place: half the time
    h = torch.addmm(w["b1"], h, w["w1"]).relu_()
    return torch.addmm(w["b2"], h, w["w2"])


# --------------------------------------------------------------------------- features
@functools.lru_cache(maxsize=16)
def _decays(dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.tensor(DECAYS, dtype=dtype, device=device)  # made once, not every step


def update_moments(moments: Leaves, grad: Leaves) -> Leaves:
    """``m_b ← b·m_b + (1−b)·g`` for every decay; each moment leaf is ``(6, *shape)`` (one
    flat ``(6, d)`` leaf on flat storage)."""
    out = []
    for m, g in zip(moments, grad):
        b = _decays(g.dtype, g.device).view(-1, *([1] * g.dim()))
        out.append(b * m + (1 - b) * g.unsqueeze(0))
    return out


class FlatInputs(NamedTuple):
    """The per-coordinate inputs of the kinetic MLP on one flat vector of d coordinates,
    the concatenation of parameter tensors of ``sizes`` (each normalised on its own)."""

    grad: Tensor  # g, (d,)
    params: Tensor  # θ, (d,)
    momentum: Tensor  # r, (d,)
    moments: Tensor  # the rolling means, (6, d)
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, grad: Leaves, params: Leaves, momentum: Leaves, moments: Leaves
           ) -> FlatInputs:
        """The leaves concatenated (a copy unless there is one leaf)."""
        return cls(concat_leaves(grad), concat_leaves(params), concat_leaves(momentum), concat_leaves(moments, lead=1),
                   tuple(p.numel() for p in params))

    def rows(self, start: int, stop: int) -> Tensor:
        """The (stop − start, 9) raw features of coordinates ``start:stop``."""
        return torch.stack([self.grad[start:stop], self.params[start:stop],
                            self.momentum[start:stop], *self.moments[:, start:stop].unbind(0)],
                           dim=1)


def concat_leaves(leaves: Leaves, lead: int = 0) -> Tensor:
    """The leaves' concatenation along their last axis after ``lead`` leading axes (the
    leaf itself, reshaped, when there is one)."""
    flat = [t.reshape(*t.shape[:lead], -1) for t in leaves]
    return flat[0] if len(flat) == 1 else torch.cat(flat, dim=-1)


def _sum_squares(x: Tensor) -> Tensor:
    """Σ x² over the last dimension without an x²-sized temporary (``dot`` for a vector:
    exact derivatives at 0, which ``jvp`` in r needs)."""
    return torch.dot(x, x) if x.dim() == 1 else torch.linalg.vector_norm(x, dim=-1).square()


def _inverse_rms(x: Tensor, sizes: tuple[int, ...]) -> Tensor:
    """``1/sqrt(mean(x²) + 1e-5)`` over each segment of ``sizes`` of x's last dimension:
    (..., L) for x (..., d)."""
    sums = torch.stack([_sum_squares(part) for part in x.split(sizes, dim=-1)], dim=-1)
    counts = torch.tensor(sizes, dtype=x.dtype, device=x.device)
    return torch.rsqrt(sums / counts + NORM_EPS)


def feature_scales(x: FlatInputs) -> Tensor:
    """(L, 9): the normalisation of each feature over each parameter tensor (module
    docstring, item 2), computed once per step and pass over whole tensors."""
    return torch.cat([torch.stack([_inverse_rms(v, x.sizes) for v in x[:3]]),
                      _inverse_rms(x.moments, x.sizes)]).T


def momentum_scales(x: FlatInputs, scales: Tensor) -> Tensor:
    """``scales`` with the r column recomputed for ``x.momentum`` (the second MLP pass of a
    step: g, θ and the means are unchanged)."""
    r = _inverse_rms(x.momentum, x.sizes).unsqueeze(1)
    return torch.cat([scales[:, :2], r, scales[:, 3:]], dim=1)


def chunked_mlp(meta: MetaParams, x: FlatInputs, scales: Tensor, chunk: int = CHUNK
                ) -> Tensor:
    """:func:`mlp` on the normalised features of every coordinate, ``chunk`` rows at a time
    (:data:`CHUNK` by default): (d, 2), the transient memory chunk × (9 + 2·hidden)
    floats. ``meta`` must be in the features' dtype and device."""
    out = []
    for start, stop, pieces in _chunk_pieces(x.sizes, chunk):
        rows = x.rows(start, stop)
        for leaf, a, b in pieces:  # each leaf's rows: its scales
            rows[a:b].mul_(scales[leaf])
        out.append(mlp(meta, rows))
    return out[0] if len(out) == 1 else torch.cat(out)


@functools.lru_cache(maxsize=16)
def _chunk_pieces(sizes: tuple[int, ...], chunk: int
                  ) -> tuple[tuple[int, int, tuple[tuple[int, int, int], ...]], ...]:
    """``(start, stop, ((leaf, a, b), ...))`` per chunk: rows ``a:b`` of the chunk
    ``start:stop`` belong to leaf ``leaf`` (one pass over the leaves and the chunks)."""
    ends = list(itertools.accumulate(sizes))
    out, leaf = [], 0
    for start, stop in spans(ends[-1] if ends else 0, chunk):
        pieces, at = [], start
        while at < stop:
            while ends[leaf] <= at:  # past the leaves that end here (and empty ones)
                leaf += 1
            end = min(ends[leaf], stop)
            pieces.append((leaf, at - start, end - start))
            at = end
        out.append((start, stop, tuple(pieces)))
    return tuple(out)


def features(grad: Leaves, params: Leaves, momentum: Leaves, moments: Leaves) -> Tensor:
    """All leaves' feature rows, concatenated: (d, 9), each leaf normalised on its own (the
    whole matrix at once, for inspection; the samplers evaluate the MLP by chunks)."""
    x = FlatInputs.of(grad, params, momentum, moments)
    scales = feature_scales(x)
    return x.rows(0, x.grad.shape[-1]) * scales.repeat_interleave(
        torch.tensor(x.sizes, device=scales.device), dim=0)


def leaf_features(g: Tensor, theta: Tensor, r: Tensor, m: Tensor) -> Tensor:
    """The (numel, 9) normalised feature matrix of one parameter tensor."""
    return features([g], [theta], [r], [m])


def split_like(flat: Tensor, like: Sequence[Tensor]) -> Leaves:
    """``flat`` (d,) cut into tensors shaped as ``like``'s (the inverse of
    :func:`concat_leaves`)."""
    return [c.reshape(t.shape) for c, t in zip(flat.split([t.numel() for t in like]), like)]


__all__ = ["CHUNK", "DECAYS", "FEATURES", "HIDDEN", "NORM_EPS", "NUM_FEATURES", "FlatInputs",
           "chunked_mlp", "concat_leaves", "feature_scales", "features", "leaf_features",
           "mlp", "momentum_scales", "split_like", "update_moments"]
