"""An elementwise flow for whole networks: a monotone spline per tensor on top of the
diagonal Gaussian, O(d) in cost and memory.

    θ_i = loc_i + exp(log_scale_i) · h_c(z_i),   z_i ~ N(0, 1) i.i.d.,  c = the tensor of i
    log q(θ) = Σ_i [ log N(u_i) − log h_c'(u_i) − log_scale_i ],
    u_i = h_c⁻¹((θ_i − loc_i) / exp(log_scale_i))

h_c is a monotone rational-quadratic spline on [−B, B], the identity outside
(``zuko.transforms.MonotonicRQSTransform``, Durkan et al. 2019), one per tensor of the
layout: its 3K − 1 parameters are shared by every value of the tensor, so λ has 2d +
(3K − 1)·(number of tensors) entries and a step costs O(d·K). q still factorises over
coordinates (it is mean-field), but each layer's marginals can be skewed, heavy- or
light-tailed, which a Gaussian cannot be. With zero spline parameters (uniform bins, unit
knot slopes) h is the identity, so q₀ is exactly the diagonal Gaussian N(loc, e^{2ℓ}).

λ is a flat ``dict[str, Tensor]``: ``"loc"`` and ``"log_scale"`` (d,) as in
:mod:`bdlkit.families.flow` (a Laplace start maps them the same way), and the stacked
per-tensor spline parameters ``"spline.widths"``, ``"spline.heights"`` (tensors, K) and
``"spline.derivatives"`` (tensors, K − 1). The splines are zuko's, evaluated at given
parameters; what is written here is the per-tensor bookkeeping around them, which zuko's
flows (built for one shared context) do not offer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from bdlkit.families.flow import MOMENT_DRAWS, FlowParams, score_of
from bdlkit.families.flow_modules import stable_spline

BOUND = 5.0  # the splines act on [−B, B] (in units of the Gaussian's scale)
PREFIX = "spline."


@dataclass(frozen=True)
class SplineFamily:
    """Per-tensor monotone splines behind a diagonal Gaussian (module docstring).

    Args:
        sizes: the number of values of each tensor, in vector order (a Target: ``(d,)``).
        bins: spline bins K (>= 2).
        dtype: the parameters' and draws' dtype.
        device: where the parameters and draws live.
    """

    sizes: tuple[int, ...]
    bins: int = 8
    dtype: torch.dtype = torch.float32
    device: str | torch.device = "cpu"

    def __post_init__(self) -> None:
        if isinstance(self.bins, bool) or int(self.bins) != self.bins or self.bins < 2:
            raise ValueError(f"spline bins must be an integer >= 2, got {self.bins!r}")
        if not self.sizes or any(int(s) < 1 for s in self.sizes):
            raise ValueError(f"a spline family needs tensors with values, got sizes "
                             f"{self.sizes}")
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))

    @property
    def features(self) -> int:
        return sum(self.sizes)

    # ------------------------------------------------------------------ λ
    def init(self, point: Tensor, init_std: float, generator: torch.Generator) -> FlowParams:
        """λ with every spline the identity: q₀ = N(point, init_std² I) (nothing is drawn)."""
        if not init_std > 0:
            raise ValueError(f"init_std must be > 0, got {init_std}")
        point = point.detach().to(dtype=self.dtype, device=self.device).reshape(-1)
        if point.numel() != self.features:
            raise ValueError(f"the spline family has {self.features} values but the point "
                             f"has {point.numel()}")
        tensors, k = len(self.sizes), int(self.bins)
        zeros = {"widths": k, "heights": k, "derivatives": k - 1}
        return {"loc": point.clone(), "log_scale": torch.full_like(point, math.log(init_std)),
                **{PREFIX + name: torch.zeros((tensors, n), dtype=self.dtype,
                                              device=self.device)
                   for name, n in zeros.items()}}

    def _splines(self, params: FlowParams) -> list:
        spline = stable_spline()
        w, h, d = (params[PREFIX + n] for n in ("widths", "heights", "derivatives"))
        return [spline(w[c], h[c], d[c], bound=BOUND) for c in range(len(self.sizes))]

    def _each(self, splines: list, x: Tensor,
              op: Callable[[object, Tensor], Tensor]) -> Tensor:
        parts = torch.split(x, list(self.sizes), dim=-1)
        return torch.cat([op(s, p) for s, p in zip(splines, parts, strict=True)], dim=-1)

    # ------------------------------------------------------------------ q
    def sample(self, params: FlowParams, n: int, generator: torch.Generator) -> Tensor:
        """``n`` draws ``(n, d)``; differentiable in λ (reparameterised) unless λ is not."""
        loc = params["loc"]
        z = torch.randn((n, self.features), generator=generator, dtype=loc.dtype,
                        device=loc.device)
        return loc + params["log_scale"].exp() * self._each(self._splines(params), z,
                                                         lambda s, p: s(p))

    def log_prob(self, params: FlowParams, theta: Tensor) -> Tensor:
        """log q_λ(θ) for θ of shape ``(..., d)``."""
        x = (theta - params["loc"]) / params["log_scale"].exp()
        splines = self._splines(params)  # built once for both passes
        u = self._each(splines, x, lambda s, p: s.inv(p))
        ladj = self._each(splines, u, lambda s, p: s.call_and_ladj(p)[1])
        normal = -0.5 * u**2 - 0.5 * math.log(2 * math.pi)
        return (normal - ladj).sum(-1) - params["log_scale"].sum()

    def score(self, params: FlowParams, theta: Tensor, create_graph: bool = False) -> Tensor:
        """∇_θ log q_λ(θ) by autograd through the splines only."""
        return score_of(self.log_prob, params, theta, create_graph)

    def moments(self, params: FlowParams) -> tuple[Tensor, Tensor]:
        """Mean and std of q: per tensor, E and sd of h_c(z) by Monte Carlo over 4096
        one-dimensional draws of a fixed seed, then loc + e^ℓ·E and e^ℓ·sd."""
        loc, scale = params["loc"], params["log_scale"].exp()
        gen = torch.Generator(device=loc.device).manual_seed(0)
        z = torch.randn(MOMENT_DRAWS, dtype=loc.dtype, device=loc.device, generator=gen)
        with torch.no_grad():
            hz = torch.stack([s(z) for s in self._splines(params)]).double()  # (tensors, n)
        sizes = torch.tensor(self.sizes, device=loc.device)
        mean = hz.mean(1).to(loc.dtype).repeat_interleave(sizes)
        std = hz.std(1).to(loc.dtype).repeat_interleave(sizes)
        return loc + scale * mean, scale * std


__all__ = ["BOUND", "SplineFamily"]
