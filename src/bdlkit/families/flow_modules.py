"""The zuko modules behind :class:`bdlkit.families.flow.FlowFamily`, and what a step of
them costs in memory.

**One block** (up to ``block`` flowed values, every Target the benchmarks use): zuko's
neural spline flow, ``zuko.flows.MAF`` with rational-quadratic splines and ``passes=2``
coupling masks (Durkan et al. 2019), on all the flowed values.

**Several blocks** (a network's last layer, a Koopa operator): the flowed values are cut
into ``blocks`` consecutive blocks of ``size`` <= ``block`` values, and every block gets
the same ``transforms`` spline couplings (zuko's ``GeneralCouplingTransform``, a plain
MLP with two hidden layers of width ``hidden``), conditioned on the block's own learned
embedding of ``EMBEDDING`` values (zuko's ``context``). q is block-diagonal: the blocks
are independent, each its own flow. All blocks go through each coupling at once, as a
batch of ``(draws, blocks, size)``, so a step is a fixed number of tensor operations
whatever the number of blocks, and the parameters (one coupling network per transform,
plus ``EMBEDDING`` values per block), the activations and the time grow linearly with
the flowed values. zuko's single ``MAF`` on m values would not do: its masks are m × m
(and × 3K − 1), so its memory grows with m² (16 384 values did not fit in 24 GB) and its
parameters with m·hidden·(3K − 1). When the last block is short, it is padded with
values held at 0 whose splines are the identity (their parameters are multiplied by 0),
so they neither move nor condition anything and add nothing to log q.

**The splines.** One block keeps zuko's ``MonotonicRQSTransform`` as built by zuko, with
its inverse made safe in float32 (:func:`stable_spline`), so the flows of Targets compute
what they did bit for bit. The block flow's spline (:func:`table_spline`) has zuko's
parameterisation, soft clamp and formulas, and zuko's ``Transform`` interface (it plugs
into zuko's couplings), but its construction and evaluation are written here, because a
block flow's step is a fixed number of small tensor operations, so their number is its
cost, and zuko's spline cannot be made to take fewer from outside:

- the knots come from an exponential and a cumulative sum, not ``torch.softmax``:
  torch's CPU softmax over a last dimension of 8 costs about 40 ns per value (measured:
  4.5 ms for 80 000 values, where ``exp`` takes 0.05 ms). zuko's soft clamp keeps each
  parameter within half of −log slope, so the exponential needs no max-subtraction;
- the knots and slopes are one table, gathered once per evaluation (zuko: three gathers
  and a broadcast), and the shared subexpressions of the density and its derivative are
  computed once: building a spline takes 17 tensor operations (zuko: 31 with the
  softmax), a forward pass with its log-Jacobian 45 (zuko: 73);
- the inverse returns its log-Jacobian from the same root (zuko's inverse has none, so
  ``inv.call_and_ladj`` evaluates the spline again: 133 operations, here 54);
  this is what lets advi draw a block and its log q in one pass
  (:func:`coupling_inverse_and_ladj`).

The table spline agrees with zuko's to 1e-12 in float64
(``tests/families/test_flow_blocks.py``).
"""

from __future__ import annotations

import math
import os
from functools import cache, partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bdlkit.core.extras import require

BLOCK = 64  # flowed values per block (a flow on at most this many is one block)
EMBEDDING = 8  # values of each block's learned embedding (its couplings' context)
SLOPE = 1e-3  # the splines' least slope (zuko's soft clamp of the parameters)
#: Values a step keeps per flowed value, draw and coupling at K = 8 bins (autograd's saved
#: tensors): measured about 400 for score_vi (its second-order graph) and 135 for advi on
#: a 16 512-value block (docs/flows.md); with a margin.
SAVED_PER_VALUE = 500


def zuko_module() -> Any:
    """zuko, or an ImportError naming the extra that installs it."""
    return require("zuko", "flows", "the flow family")


@cache
def stable_spline() -> type:
    """zuko's monotone rational-quadratic spline with its inverse made safe in float32
    (one-block flows and the spline family: zuko's own construction, bit for bit).

    The inverse solves a z² + b z + c = 0 for z = 2c / (−b − √(b² − 4ac)). The
    discriminant is ≥ 0 in exact arithmetic, but in float32 it comes out slightly
    negative for about 1 in 2 000 draws of a trained last-layer flow, giving NaN draws
    (which would stop a run). Clamping it at 0 is the exact root's value there."""
    base = zuko_module().transforms.MonotonicRQSTransform

    class StableRQSTransform(base):  # type: ignore[misc, valid-type]
        def _inverse(self, y: Tensor) -> Tensor:
            k = self.searchsorted(self.vertical, y) - 1
            mask, x0, x1, y0, y1, d0, d1, s = self.bin(k)
            y_ = mask * (y - y0)
            a = (y1 - y0) * (s - d0) + y_ * (d0 + d1 - 2 * s)
            b = (y1 - y0) * d0 - y_ * (d0 + d1 - 2 * s)
            c = -s * y_
            z = 2 * c / (-b - (b**2 - 4 * a * c).clamp_min(0).sqrt())
            return torch.where(mask, x0 + z * (x1 - x0), y)

    return StableRQSTransform


@cache
def table_spline() -> type:
    """The same spline (zuko's parameterisation, soft clamp and formulas; Durkan et al.
    2019, eqs. 4-6) built and evaluated in few tensor operations (module docstring):
    the knots and slopes are one table ``(..., 3, K + 1)``, gathered once per
    evaluation, and the inverse returns its log-Jacobian too."""
    base = zuko_module().transforms.MonotonicRQSTransform

    class TableRQSTransform(base):  # type: ignore[misc, valid-type]
        def __init__(self, phi: Tensor, bins: int, scale: Tensor, bound: float) -> None:
            torch.distributions.Transform.__init__(self)
            e = (phi / (1 + phi.abs() * scale)).exp()  # zuko's soft clamp, then exp
            cumulative = e[..., : 2 * bins].unflatten(-1, (2, bins)).cumsum(-1)
            knots = F.pad(cumulative / cumulative[..., -1:], (1, 0)) * (2 * bound) - bound
            slopes = F.pad(e[..., None, 2 * bins:], (1, 1), value=1.0)
            self.table = torch.cat([knots, slopes], -2)  # (..., 3, K + 1): x, y, d
            self.bound = bound

        @property
        def bins(self) -> int:
            return self.table.shape[-1] - 1

        def _bin(self, row: int, value: Tensor) -> tuple[Tensor, tuple[Tensor, ...]]:
            """``value`` clamped to [−B, B] and, for its bin among the knots ``table[row]``,
            (x₀, w, y₀, h, s, d₀, d₁, d₀ + d₁ − 2s)."""
            clamped = value.clamp(-self.bound, self.bound)
            k = (clamped[..., None] > self.table[..., row, 1:-1]).sum(-1, keepdim=True)
            pairs = torch.cat([k, k + 1], -1)[..., None, :].expand(*k.shape[:-1], 3, 2)
            ends = self.table.gather(-1, pairs)  # (..., 3, 2)
            starts, sizes = ends[..., 0], ends[..., 1] - ends[..., 0]
            x0, y0, d0 = starts.unbind(-1)
            w, h, dd = sizes.unbind(-1)
            s = h / w
            return clamped, (x0, w, y0, h, s, d0, d0 + dd, (2 * d0 + dd) - 2 * s)

        @staticmethod
        def _rational(xi: Tensor, s: Tensor, d0: Tensor, d1: Tensor, c: Tensor
                      ) -> tuple[Tensor, Tensor, Tensor]:
            """At ξ in a bin: ξ², the denominator s + c ξ(1 − ξ) and the derivative's
            numerator d₁ξ² + 2sξ(1 − ξ) + d₀(1 − ξ)² over s² (Durkan et al., eq. 5)."""
            square = xi * xi
            t = xi - square
            inner = torch.addcmul(d1 * square, s, t, value=2).addcmul_(d0, (1 - xi) - t)
            return square, torch.addcmul(s, c, t), inner

        def call_and_ladj(self, x: Tensor) -> tuple[Tensor, Tensor]:
            clamped, (x0, w, y0, h, s, d0, d1, c) = self._bin(0, x)
            xi = (clamped - x0) / w
            square, den, inner = self._rational(xi, s, d0, d1, c)
            y = torch.addcmul(y0, h, torch.addcmul(s * square, d0, xi - square) / den)
            ladj = torch.add(inner.log(), (s / den).log(), alpha=2)
            inside = clamped == x
            return torch.where(inside, y, x), torch.where(inside, ladj, 0.0)

        def _call(self, x: Tensor) -> Tensor:
            return self.call_and_ladj(x)[0]

        def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
            return self.call_and_ladj(x)[1]

        def inverse_and_ladj(self, y: Tensor) -> tuple[Tensor, Tensor]:
            """x = f⁻¹(y) and log dx/dy: zuko's root of a ξ² + b ξ + c = 0 written as
            2sη / (b + √(b² + 4asη)), the discriminant clamped as in :func:`stable_spline`."""
            clamped, (x0, w, y0, h, s, d0, d1, c) = self._bin(1, y)
            eta = clamped - y0
            ceta = eta * c
            a = torch.addcmul(ceta, h, s - d0)
            b = torch.addcmul(-ceta, h, d0)
            seta = s * eta
            root = torch.addcmul(b * b, a, seta, value=4).clamp_min(0).sqrt()
            xi = 2 * seta / (b + root)
            _, den, inner = self._rational(xi, s, d0, d1, c)
            ladj = torch.sub((den / s).log(), inner.log(), alpha=0.5).mul(2)
            inside = clamped == y
            return torch.where(inside, torch.addcmul(x0, xi, w), y), \
                torch.where(inside, ladj, 0.0)

        def _inverse(self, y: Tensor) -> Tensor:
            return self.inverse_and_ladj(y)[0]

    return TableRQSTransform


class Spline(nn.Module):
    """A block flow's ``univariate``: the table spline of packed parameters ``phi``
    (widths, heights, derivatives: 3K − 1 values); ``keep`` (a buffer, so it follows the
    module's device) zeroes the padding's parameters, which makes them identities."""

    def __init__(self, bins: int, keep: Tensor | None = None, bound: float = 5.0) -> None:
        super().__init__()
        self.bins, self.bound = bins, bound
        limit = -math.log(SLOPE)  # zuko's soft clamp: w / (1 + |2w / log slope|), d: |d / ..|
        self.register_buffer("scale", torch.tensor(  # float64: exact for any dtype's .to
            [2 / limit] * (2 * bins) + [1 / limit] * (bins - 1), dtype=torch.float64))
        self.register_buffer("keep", keep)

    def forward(self, phi: Tensor) -> Any:
        phi = phi if self.keep is None else phi * self.keep
        return table_spline()(phi, self.bins, self.scale, self.bound)


def coupling_inverse_and_ladj(coupling: Any, y: Tensor) -> tuple[Tensor, Tensor]:
    """x = c⁻¹(y) for one of zuko's coupling transforms with a table spline, and log
    det ∂x/∂y, in one pass (zuko's inverse would evaluate the spline again for it)."""
    y_a, y_b = coupling.split(y)
    x_b, ladj = coupling.meta(y_a).base.inverse_and_ladj(y_b)
    return coupling.merge(y_a, x_b, y.shape), ladj.sum(-1)


def layout(flowed: int, block: int) -> tuple[int, int]:
    """``(blocks, size)``: ``flowed`` values in the fewest blocks of at most ``block``,
    all of one size (the last one padded)."""
    blocks = math.ceil(flowed / block)
    return blocks, math.ceil(flowed / blocks)


class BlockFlow(nn.Module):
    """The block-diagonal flow (module docstring): zuko's spline couplings, shared by the
    blocks and conditioned on each block's ``embedding``; ``forward()`` is the flow's
    distribution on ``(..., blocks, size)``."""

    def __init__(self, flowed: int, block: int, transforms: int, bins: int,
                 hidden: int) -> None:
        super().__init__()
        zuko = zuko_module()
        blocks, size = layout(flowed, block)
        real = (torch.arange(blocks * size) < flowed).reshape(blocks, size)
        couplings = []
        for t in range(transforms):
            constant = torch.arange(size) % 2 == t % 2  # zuko's checkered masks
            kept = None if bool(real.all()) else real[:, ~constant, None].float()
            couplings.append(zuko.flows.coupling.GeneralCouplingTransform(
                features=size, context=EMBEDDING, mask=constant,
                univariate=Spline(bins, kept), shapes=[(3 * bins - 1,)],
                hidden_features=(hidden, hidden)))
        base = zuko.lazy.UnconditionalDistribution(
            zuko.distributions.DiagNormal, torch.zeros(size), torch.ones(size), buffer=True)
        self.flow = zuko.lazy.Flow(couplings, base)
        self.embedding = nn.Parameter(torch.zeros(blocks, EMBEDDING))
        self.blocks, self.size, self.padding = blocks, size, blocks * size - flowed

    def forward(self) -> Any:
        return self.flow(self.embedding)


def build(flowed: int, block: int, transforms: int, bins: int, hidden: int) -> nn.Module:
    """The flow on ``flowed`` values: zuko's NSF for one block, else a :class:`BlockFlow`."""
    if flowed > block:
        return BlockFlow(flowed, block, transforms, bins, hidden)
    return zuko_module().flows.MAF(  # zuko's construction of the splines, as before blocks
        features=flowed, transforms=transforms, univariate=partial(stable_spline(), slope=SLOPE),
        shapes=[(bins,), (bins,), (bins - 1,)], hidden_features=(hidden,) * 2,
        passes=2 if flowed > 1 else None)  # one value: nothing to couple


# --------------------------------------------------------------------------- memory
def step_bytes(features: int, flowed: int, block: int, transforms: int, bins: int,
               hidden: int, draws: int, itemsize: int) -> int:
    """The memory a step of the flow family needs, estimated before anything is built:
    λ (2d + the flow's parameters) six times over (λ, the anchor, the gradients, the
    new λ and Adam's two moments), plus what autograd keeps per flowed value, draw and
    coupling (``SAVED_PER_VALUE``, scaled with the spline's 3K − 1 parameters)."""
    blocks, size = layout(flowed, block)
    total = 3 * bins - 1
    if blocks == 1:  # zuko's MaskedMLP: weights and masks of the same shapes
        per_transform = 2 * ((size + 1) * hidden + (hidden + 1) * hidden
                             + (hidden + 1) * size * total)
    else:  # one coupling network for all blocks
        per_transform = (size // 2 + EMBEDDING + 1) * hidden + (hidden + 1) * hidden \
            + (hidden + 1) * (size - size // 2) * total
    params = 2 * features + transforms * per_transform + blocks * EMBEDDING
    saved = draws * blocks * size * transforms * SAVED_PER_VALUE * total / 23
    return int(itemsize * (6 * params + saved))


def available_bytes(device: torch.device) -> int:
    """Free memory on ``device``: the GPU's free memory, or the host's MemAvailable."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_memory(features: int, flowed: int, block: int, transforms: int, bins: int,
                 hidden: int, draws: int, dtype: torch.dtype,
                 device: str | torch.device) -> None:
    """Refuse a flow whose step would not fit in the memory ``device`` has free now, before
    anything is allocated, naming the estimate, the memory and the fixes."""
    need = step_bytes(features, flowed, block, transforms, bins, hidden, draws,
                      torch.empty((), dtype=dtype).element_size())
    free = available_bytes(torch.device(device))
    if need > free:
        blocks, size = layout(flowed, block)
        raise ValueError(
            f"family='flow' on {flowed} values ({blocks} blocks of {size}, {transforms} "
            f"couplings, {draws} draws) needs about {need / 2**30:.2f} GiB per step, more "
            f"than the {free / 2**30:.2f} GiB free on {torch.device(device)}: flow fewer "
            "values (flow_on= a smaller selection), take fewer draws, or use "
            "family='spline' or family='diag'")


__all__ = ["BLOCK", "EMBEDDING", "BlockFlow", "build", "check_memory", "stable_spline",
           "step_bytes"]
