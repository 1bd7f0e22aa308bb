"""Probabilistic forecast metrics of an equal-weight Gaussian mixture predictive.

A Bayesian forecaster's predictive at every element (window × step × channel) is the mixture
over S posterior draws, ``p(y) = (1/S) Σ_s N(y; loc_s, scale_s²)``. Hand-written because
torch has no Gaussian-mixture CRPS or quantile: ``torch.distributions.MixtureSameFamily``
gives ``log_prob`` and ``cdf`` but no ``icdf`` and no CRPS, and materialising its
``(*E, S)`` batch for the pairwise CRPS term would cost S² memory per element. Here every
method works in float64 on blocks of the flattened element dimension, so the temporaries
hold at most ``chunk`` (component × element) values whatever the size of the forecast.

``loc`` is ``(S, *E)``; ``scale`` is ``(S, *rest)`` with ``rest`` broadcasting against ``E``
from the right (``(S, 1, 1, C)`` or ``(S, C)`` for per-channel noise, ``(S,)`` for one noise
level per draw, ``(S, *E)`` in general). Methods return float64 tensors of shape ``E``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from bdlkit.metrics.regression import coverage_from_cdf, gaussian_nll, mae

__all__ = ["GaussianMixture", "forecast_metrics"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_INV_SQRT_PI = 1 / math.sqrt(math.pi)

Block = Callable[[Tensor, Tensor, slice], Tensor]


def _normal_pdf(z: Tensor) -> Tensor:
    """``φ(z) = exp(−z²/2) / √(2π)``."""
    return torch.exp(-0.5 * z * z - _LOG_SQRT_2PI)


def _abs_moment(mu: Tensor, var: Tensor) -> Tensor:
    """``E|Z|`` for ``Z ~ N(μ, σ²)``: ``A(μ, σ²) = μ(2Φ(μ/σ) − 1) + 2σ φ(μ/σ)``."""
    sd = var.sqrt()
    z = mu / sd
    return mu * (2 * torch.special.ndtr(z) - 1) + 2 * sd * _normal_pdf(z)


def _check_level(level: float, name: str = "level") -> None:
    if not 0 < level < 1:
        raise ValueError(f"{name} must be in (0, 1), got {level}")


@dataclass(frozen=True, eq=False)
class GaussianMixture:
    """The equal-weight mixture ``(1/S) Σ_s N(loc_s, scale_s²)`` at every element.

    Args:
        loc: component means ``(S, *E)``.
        scale: component standard deviations ``(S, *rest)``, ``rest`` broadcastable to
            ``E``; every value finite and > 0.
        chunk: the most (component × element) values a block of the computation holds;
            blocks cover ``max(1, chunk // S)`` elements. The default 2¹⁸ values (2 MiB per
            float64 temporary) stays in cache; larger blocks are slower on CPU, not faster.
    """

    loc: Tensor
    scale: Tensor
    chunk: int = 2**18

    def __post_init__(self) -> None:
        loc, scale = self.loc, self.scale
        if not isinstance(loc, Tensor) or not isinstance(scale, Tensor):
            raise ValueError("loc and scale must be torch tensors")
        if not loc.dtype.is_floating_point or not scale.dtype.is_floating_point:
            raise ValueError(f"loc and scale must be floating point, got {loc.dtype} and "
                             f"{scale.dtype}")
        if loc.ndim == 0 or loc.shape[0] == 0:
            raise ValueError(f"loc must be (S, *E) with S ≥ 1, got shape {tuple(loc.shape)}")
        if scale.ndim == 0 or scale.shape[0] != loc.shape[0]:
            raise ValueError(f"scale of shape {tuple(scale.shape)} must have the same leading "
                             f"number of components S = {loc.shape[0]} as loc")
        rest, elem = tuple(scale.shape[1:]), tuple(loc.shape[1:])
        ok = len(rest) <= len(elem) and all(
            r in (1, e) for r, e in zip(rest[::-1], elem[::-1]))
        if not ok:
            raise ValueError(f"scale of shape {tuple(scale.shape)} does not broadcast to loc "
                             f"{tuple(loc.shape)} (after the leading component dimension)")
        if scale.device != loc.device:
            raise ValueError(f"loc on {loc.device} but scale on {scale.device}")
        bad = ~(torch.isfinite(scale) & (scale > 0))
        if bad.any():
            raise ValueError(f"scale must be finite and > 0; found {int(bad.sum())} values "
                             "that are not")
        if not isinstance(self.chunk, int) or self.chunk < 1:
            raise ValueError(f"chunk must be a positive integer, got {self.chunk!r}")

    @property
    def num_components(self) -> int:
        """S, the number of mixture components."""
        return int(self.loc.shape[0])

    @property
    def element_shape(self) -> tuple[int, ...]:
        """``E``, the shape of one draw from the predictive (and of ``y``)."""
        return tuple(self.loc.shape[1:])

    # -- block machinery ---------------------------------------------------------------------

    def _scale_block(self, block: slice, numel: int) -> Tensor:
        """``scale`` broadcast to the flattened elements ``block``: ``(S, len(block))``."""
        S, elem = self.num_components, self.element_shape
        scale = self.scale.reshape((S,) + (1,) * (len(elem) + 1 - self.scale.ndim)
                                   + tuple(self.scale.shape[1:]))
        if tuple(scale.shape[1:]) == elem:
            return scale.reshape(S, numel)[:, block].double()
        width = block.stop - block.start
        if all(d == 1 for d in scale.shape[1:]):
            return scale.reshape(S, 1).double().expand(S, width)
        flat = torch.arange(block.start, block.stop, device=scale.device)
        index: list[Tensor] = []
        for size, full in zip(reversed(scale.shape[1:]), reversed(elem)):
            index.append(flat % full if size != 1 else torch.zeros_like(flat))
            flat = flat // full
        return scale[(slice(None), *reversed(index))].double()

    def _map(self, fn: Block, *others: Tensor) -> Tensor:
        """``fn(loc_block, scale_block, block)`` over blocks of the flattened elements,
        assembled into a float64 tensor of shape ``E``; ``others`` (shape ``E``) are
        flattened so that ``fn`` can slice them with ``block``."""
        S, numel = self.num_components, math.prod(self.element_shape)
        loc = self.loc.reshape(S, numel)
        step = max(1, self.chunk // S)
        out = torch.empty(numel, dtype=torch.float64, device=self.loc.device)
        for start in range(0, numel, step):
            block = slice(start, min(numel, start + step))
            out[block] = fn(loc[:, block].double(), self._scale_block(block, numel), block)
        return out.reshape(self.element_shape)

    def _flat(self, y: Tensor) -> Tensor:
        if tuple(y.shape) != self.element_shape:
            raise ValueError(f"y of shape {tuple(y.shape)} does not match the mixture's "
                             f"element shape {self.element_shape}")
        return y.reshape(-1).double()

    # -- moments and densities ---------------------------------------------------------------

    @property
    def mean(self) -> Tensor:
        """``(1/S) Σ_s loc_s``."""
        return self._map(lambda m, s, b: m.mean(0))

    @property
    def var(self) -> Tensor:
        """``(1/S) Σ_s scale_s² + (1/S) Σ_s (loc_s − mean)²`` (law of total variance)."""
        return self._map(lambda m, s, b: (s * s).mean(0) + m.var(0, correction=0))

    @property
    def std(self) -> Tensor:
        """The mixture's standard deviation, ``sqrt(var)``."""
        return self.var.sqrt()

    def log_prob(self, y: Tensor) -> Tensor:
        """``log p(y) = logsumexp_s log N(y; loc_s, scale_s²) − log S`` elementwise.

        Args:
            y: values of shape ``E``.
        """
        t = self._flat(y)

        def block(m: Tensor, s: Tensor, b: slice) -> Tensor:
            z = (t[b] - m) / s
            return torch.logsumexp(-0.5 * z * z - s.log(), 0) - _LOG_SQRT_2PI

        return self._map(block) - math.log(self.num_components)

    def cdf(self, y: Tensor) -> Tensor:
        """``F(y) = (1/S) Σ_s Φ((y − loc_s) / scale_s)`` elementwise.

        Args:
            y: values of shape ``E``.
        """
        t = self._flat(y)
        return self._map(lambda m, s, b: torch.special.ndtr((t[b] - m) / s).mean(0))

    # -- quantiles ---------------------------------------------------------------------------

    def quantile(self, tau: float, tol: float = 1e-6, max_iter: int = 60) -> Tensor:
        """The mixture quantile ``F⁻¹(τ)`` elementwise by safeguarded Newton.

        ``F(x) ≤ τ`` at ``lo = min_s(loc_s + z_τ scale_s)`` and ``F(x) ≥ τ`` at
        ``hi = max_s(loc_s + z_τ scale_s)`` (``z_τ = Φ⁻¹(τ)``: every component's CDF is ≤ τ
        resp. ≥ τ there), so ``[lo, hi]`` brackets the quantile. Newton
        ``x ← x − (F(x) − τ)/p(x)`` starts at the moment-matched Gaussian's quantile clamped
        into the bracket; the bracket shrinks to ``x`` from the side given by the sign of
        ``F(x) − τ``, and a step leaving it is replaced by bisection. An element stops when
        ``|F(x) − τ| < tol`` or the bracket is narrower than ``tol · (1 + |x|)``.

        Args:
            tau: probability level in (0, 1).
            tol: tolerance on ``|F(x) − τ|`` (and the relative bracket width).
            max_iter: most Newton/bisection steps.
        """
        _check_level(tau, "tau")
        z_tau = float(torch.special.ndtri(torch.tensor(tau, dtype=torch.float64)))

        def block(m: Tensor, s: Tensor, b: slice) -> Tensor:
            q = m + z_tau * s
            lo, hi = q.min(0).values, q.max(0).values
            sd = ((s * s).mean(0) + m.var(0, correction=0)).sqrt()
            x = torch.minimum(torch.maximum(m.mean(0) + z_tau * sd, lo), hi)
            out, idx = x.clone(), torch.arange(x.numel(), device=x.device)
            for _ in range(max_iter):  # on the unconverged elements only
                z = (x - m) / s
                g = torch.special.ndtr(z).mean(0) - tau
                done = (g.abs() < tol) | (hi - lo < tol * (1 + x.abs()))
                if bool(done.all()):
                    break
                lo = torch.where(g < 0, x, lo)
                hi = torch.where(g > 0, x, hi)
                step = x - g / (_normal_pdf(z) / s).mean(0)
                inside = (step > lo) & (step < hi)  # False for a NaN/inf step (p(x) = 0)
                x = torch.where(inside, step, 0.5 * (lo + hi))
                if bool(done.any()):
                    keep = ~done
                    idx, m, s, x, lo, hi = idx[keep], m[:, keep], s[:, keep], *(
                        v[keep] for v in (x, lo, hi))
                out[idx] = x
            return out

        return self._map(block)

    def interval(self, level: float) -> tuple[Tensor, Tensor]:
        """The central ``level`` interval ``(F⁻¹((1 − level)/2), F⁻¹((1 + level)/2))``.

        Args:
            level: probability mass inside, in (0, 1).
        """
        _check_level(level)
        return self.quantile((1 - level) / 2), self.quantile((1 + level) / 2)

    # -- scores ------------------------------------------------------------------------------

    def crps(self, y: Tensor) -> Tensor:
        """The exact CRPS ``E|X − y| − ½ E|X − X'|`` (X, X' iid from the mixture) elementwise.

        With ``A(μ, σ²) = E|N(μ, σ²)|`` (``_abs_moment``),
        ``E|X − y| = (1/S) Σ_s A(y − loc_s, scale_s²)`` and
        ``E|X − X'| = (1/S²) Σ_s Σ_t A(loc_s − loc_t, scale_s² + scale_t²)``, whose diagonal
        terms are ``2 scale_s / √π`` and whose off-diagonal terms come in equal pairs:
        a loop over ``s``, vectorised over ``t > s``: O(S²) per element.

        Args:
            y: values of shape ``E``.
        """
        t, S = self._flat(y), self.num_components

        def block(m: Tensor, s: Tensor, b: slice) -> Tensor:
            v = s * s
            e_xy = _abs_moment(t[b] - m, v).mean(0)
            e_xx = 2 * _INV_SQRT_PI * s.sum(0)
            for i in range(S - 1):
                e_xx = e_xx + 2 * _abs_moment(m[i] - m[i + 1 :], v[i] + v[i + 1 :]).sum(0)
            return e_xy - 0.5 * e_xx / S**2

        return self._map(block)


def _units(scale_units: Tensor, elem: tuple[int, ...]) -> Tensor:
    """``scale_units`` as float64, checked to broadcast against the last element dim."""
    s = torch.as_tensor(scale_units, dtype=torch.float64).reshape(-1)
    channels = elem[-1] if elem else 1
    if s.numel() not in (1, channels):
        raise ValueError(f"scale_units has {s.numel()} values; need 1 or one per channel "
                         f"(the last dimension, {channels})")
    if not (torch.isfinite(s) & (s > 0)).all():
        raise ValueError("scale_units must be finite and > 0")
    return s if elem else s.reshape(())


def forecast_metrics(
    mixture: GaussianMixture,
    y: Tensor,
    levels: Sequence[float] = (0.5, 0.9),
    scale_units: Tensor | None = None,
) -> dict[str, float]:
    """Point, density, CRPS and interval metrics of a mixture forecast, averaged over every
    element (windows × steps × channels, as in the forecasting literature).

    * ``mse``, ``mae``: of the mixture mean, ``mean (ȳ − y)²`` and ``mean |ȳ − y|``;
    * ``nll``: ``−mean log p(y)`` of the mixture, per element;
    * ``nll_gaussian``: ``mean ½ log(2π v) + (y − ȳ)² / (2v)`` of the moment-matched
      ``N(ȳ, v)``;
    * ``crps``: mean exact CRPS (:meth:`GaussianMixture.crps`);
    * per level ``l = p/100``: ``coverage_p``, the fraction with
      ``(1 − l)/2 ≤ F(y) ≤ (1 + l)/2``, and ``width_p``, the mean ``upper − lower`` of the
      central interval;
    * with ``scale_units`` (data standardised per channel as ``(y − μ_c)/σ_c``):
      ``mse_original = mean (σ_c (ȳ − y))²``, ``mae_original = mean σ_c |ȳ − y|`` and
      ``crps_original = mean σ_c CRPS`` (CRPS is positively homogeneous), in original units.

    Args:
        mixture: the predictive, element shape ``E`` (e.g. ``(n, H, C)``).
        y: the targets, shape ``E``.
        levels: central-interval levels, each a whole percentage in (0, 1).
        scale_units: per-channel std σ_c of the original data, ``()`` or ``(C,)``,
            broadcast against the last dimension.
    """
    if not isinstance(y, Tensor):
        raise ValueError("y must be a torch tensor")
    if tuple(y.shape) != mixture.element_shape:
        raise ValueError(f"y of shape {tuple(y.shape)} does not match the mixture's element "
                         f"shape {mixture.element_shape}")
    for x, name in ((y, "y"), (mixture.loc, "mixture.loc")):
        if torch.isnan(x).any():
            raise ValueError(f"{name} contains {int(torch.isnan(x).sum())} NaN values")
    percents = [round(100 * level) for level in levels]
    for level, p in zip(levels, percents):
        _check_level(level)
        if abs(100 * level - p) > 1e-9:
            raise ValueError(f"levels must be whole percentages, got {level}")
    if len(set(percents)) != len(percents):
        raise ValueError(f"duplicate levels {tuple(levels)}")
    units = None if scale_units is None else _units(scale_units, mixture.element_shape)

    t = y.double().to(mixture.loc.device)
    mean, var = mixture.mean, mixture.var
    err, crps = mean - t, mixture.crps(t)
    out = {
        "mse": float((err * err).mean()),
        "mae": mae(mean, t),
        "nll": -float(mixture.log_prob(t).mean()),
        "nll_gaussian": gaussian_nll(mean, var, t),
        "crps": float(crps.mean()),
    }
    u = mixture.cdf(t)
    for level, p in zip(levels, percents):
        lower, upper = mixture.interval(level)
        out[f"coverage_{p}"] = coverage_from_cdf(u, level)
        out[f"width_{p}"] = float((upper - lower).mean())
    if units is not None:
        units = units.to(err.device)
        out["mse_original"] = float(((err * units) ** 2).mean())
        out["mae_original"] = float((err.abs() * units).mean())
        out["crps_original"] = float((crps * units).mean())
    return out
