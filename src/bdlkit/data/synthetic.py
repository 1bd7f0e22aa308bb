"""Synthetic targets with exact moments and exact draws.

Every log density here is **normalised** (``integral exp(log_prob) = 1``), so KL
divergences and ELBO gaps can be computed exactly. Each factory returns a
:class:`SyntheticTarget` whose ``reference`` holds the exact mean and covariance and
``num_draws`` exact i.i.d. draws from a seeded generator (seed ``seed + 1``).

* :func:`gaussian`: ``N(m, Q diag(lambda) Q')``, ``lambda`` log-spaced in ``[1, kappa]``.
* :func:`gaussian_mixture`: ``sum_k w_k N(m_k, s_k^2 I)``.
* :func:`funnel`: Neal's funnel ``v ~ N(0, s^2)``, ``x_i | v ~ N(0, e^v)``.
* :func:`banana`: Haario's twisted Gaussian ``x_2 = y_2 + b (x_1^2 - s^2)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from bdlkit.problems.target import LogProb, Reference, Target

LOG_2PI = math.log(2 * math.pi)
F64 = torch.float64
Sampler = Callable[[int, torch.Generator], Tensor]


class SyntheticTarget(Target):
    """A normalised target with an exact sampler.

    Attributes:
        precision: the inverse covariance (Gaussian only), else ``None``.
        params: the defining parameters (float64 tensors / floats), for reports.
    """

    def __init__(
        self,
        log_prob: LogProb,
        dim: int,
        name: str,
        *,
        sampler: Sampler,
        mean: Tensor,
        cov: Tensor,
        seed: int,
        num_draws: int,
        dtype: torch.dtype,
        precision: Tensor | None = None,
        params: dict[str, object] | None = None,
    ) -> None:
        self._sampler = sampler
        draws = sampler(num_draws, torch.Generator().manual_seed(seed + 1)).to(dtype)
        ref = Reference(mean=mean.to(dtype), cov=cov.to(dtype), draws=draws)
        super().__init__(log_prob, dim, name, reference=ref, dtype=dtype)
        self.precision = None if precision is None else precision.to(dtype)
        self.params = params or {}

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` exact i.i.d. draws ``(n, d)`` in the target's dtype."""
        return self._sampler(n, generator or torch.Generator().manual_seed(0)).to(self.dtype)


def _normal_lpdf(x: Tensor, var: Tensor | float) -> Tensor:
    """Elementwise ``log N(x | 0, var) = -x^2/(2 var) - log(2 pi var)/2``."""
    log_var = torch.log(var) if isinstance(var, Tensor) else math.log(var)
    return -0.5 * x * x / var - 0.5 * (LOG_2PI + log_var)


def gaussian(
    dim: int,
    condition_number: float = 1.0,
    mean: Tensor | Sequence[float] | None = None,
    seed: int = 0,
    dtype: torch.dtype = F64,
    num_draws: int = 10_000,
    block_size: int | None = None,
) -> SyntheticTarget:
    """``N(m, Sigma)``, ``Sigma = Q diag(lambda) Q'``, ``lambda_i = kappa^{i/(d-1)}`` in ``[1, kappa]``.

    ``Q`` is a Haar rotation (QR of a seeded Gaussian matrix, signs fixed by diag R).
    ``log p(x) = -(x-m)' P (x-m)/2 - (d log 2 pi + sum log lambda)/2`` with
    ``P = Q diag(1/lambda) Q'`` (exposed as ``.precision``); score ``-P (x - m)``.

    ``block_size`` = b makes ``Q`` block-diagonal (independent Haar rotations of
    consecutive blocks of b coordinates, the eigenvalues dealt to the blocks in a seeded
    random order), so the score costs O(d b) instead of O(d^2) and the construction
    O(d b^2) instead of O(d^3): the high-dimensional targets of the VI benchmark.
    """
    if condition_number < 1:
        raise ValueError(f"condition_number must be >= 1, got {condition_number}")
    if block_size is not None and not (1 <= block_size and dim % block_size == 0):
        raise ValueError(f"block_size must divide dim={dim}, got {block_size}")
    g = torch.Generator().manual_seed(seed)
    eig = torch.logspace(0.0, math.log10(condition_number), dim, dtype=F64)
    m = torch.zeros(dim, dtype=F64) if mean is None else torch.as_tensor(mean, dtype=F64)
    if m.shape != (dim,):
        raise ValueError(f"mean must have shape ({dim},), got {tuple(m.shape)}")
    b = dim if block_size is None else block_size
    if b < dim:
        eig = eig[torch.randperm(dim, generator=g)]
    q = _haar(dim // b, b, g)  # (blocks, b, b)
    lam = eig.reshape(-1, b)
    cov = torch.block_diag(*[(qk * lk) @ qk.T for qk, lk in zip(q, lam, strict=True)])
    prec = torch.block_diag(*[(qk / lk) @ qk.T for qk, lk in zip(q, lam, strict=True)])
    log_norm = -0.5 * (dim * LOG_2PI + torch.log(eig).sum())

    def log_prob(x: Tensor) -> Tensor:
        diff = (x - m.to(x.dtype)).reshape(x.shape[0], -1, b)  # (n, blocks, b)
        z = torch.einsum("nkb,kbc->nkc", diff, q.to(x.dtype))  # eigenbasis coordinates
        return -0.5 * (z * z / lam.to(x.dtype)).sum((-2, -1)) + log_norm.to(x.dtype)

    def sampler(n: int, gen: torch.Generator) -> Tensor:
        z = torch.randn(n, dim // b, b, generator=gen, dtype=F64) * lam.sqrt()
        return m + torch.einsum("nkc,kbc->nkb", z, q).reshape(n, dim)

    blocks = "" if b == dim else f", blocks={b}"
    name = f"gaussian(d={dim}, cond={condition_number:g}{blocks})"
    return SyntheticTarget(
        log_prob,
        dim,
        name,
        sampler=sampler,
        mean=m,
        cov=cov,
        seed=seed,
        num_draws=num_draws,
        dtype=dtype,
        precision=prec,
        params={"rotation": q[0] if b == dim else q, "eigenvalues": eig},
    )


def _haar(blocks: int, b: int, g: torch.Generator) -> Tensor:
    """``blocks`` Haar rotations ``(blocks, b, b)`` (QR, signs fixed by diag R)."""
    q, r = torch.linalg.qr(torch.randn(blocks, b, b, generator=g, dtype=F64))
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]


def _default_means(components: int, dim: int, radius: float = 3.0) -> Tensor:
    if dim == 1:
        return torch.linspace(-radius, radius, components, dtype=F64)[:, None]
    angle = 2 * math.pi * torch.arange(components, dtype=F64) / components
    means = torch.zeros(components, dim, dtype=F64)
    means[:, 0], means[:, 1] = radius * torch.cos(angle), radius * torch.sin(angle)
    return means


def gaussian_mixture(
    dim: int = 2,
    components: int = 3,
    weights: Tensor | Sequence[float] | None = None,
    means: Tensor | Sequence[Sequence[float]] | None = None,
    scales: Tensor | Sequence[float] | float | None = None,
    seed: int = 0,
    dtype: torch.dtype = F64,
    num_draws: int = 10_000,
) -> SyntheticTarget:
    """``p(x) = sum_k w_k N(x | m_k, s_k^2 I)`` (isotropic components).

    Defaults: equal weights, unit scales, means on a circle of radius 3 in the first
    two coordinates. Exact moments: ``E x = sum_k w_k m_k`` and
    ``Cov x = sum_k w_k (s_k^2 I + m_k m_k') - E x E x'``.
    """
    mu = _default_means(components, dim) if means is None else torch.as_tensor(means, dtype=F64)
    if mu.ndim != 2 or mu.shape[1] != dim:
        raise ValueError(f"means must have shape (components, {dim}), got {tuple(mu.shape)}")
    k = mu.shape[0]
    w = (
        torch.full((k,), 1.0 / k, dtype=F64)
        if weights is None
        else torch.as_tensor(weights, dtype=F64)
    )
    s = torch.ones(k, dtype=F64) if scales is None else torch.as_tensor(scales, dtype=F64).expand(k)
    if w.shape != (k,) or (w < 0).any() or (s <= 0).any():
        raise ValueError("weights must be (components,) and >= 0; scales must be > 0")
    w = w / w.sum()
    mean = w @ mu
    cov = torch.eye(dim, dtype=F64) * (w * s**2).sum() + (mu.T * w) @ mu - torch.outer(mean, mean)
    log_w = torch.log(w)

    def log_prob(x: Tensor) -> Tensor:
        dt = x.dtype
        diff = x[:, None, :] - mu.to(dt)  # (n, K, d)
        var = (s**2).to(dt)
        comp = -0.5 * (diff * diff).sum(-1) / var - 0.5 * dim * (LOG_2PI + torch.log(var))
        return torch.logsumexp(comp + log_w.to(dt), dim=1)

    def sampler(n: int, gen: torch.Generator) -> Tensor:
        idx = torch.multinomial(w, n, replacement=True, generator=gen)
        return mu[idx] + s[idx, None] * torch.randn(n, dim, generator=gen, dtype=F64)

    name = f"gaussian_mixture(d={dim}, K={k})"
    return SyntheticTarget(
        log_prob,
        dim,
        name,
        sampler=sampler,
        mean=mean,
        cov=cov,
        seed=seed,
        num_draws=num_draws,
        dtype=dtype,
        params={"weights": w, "means": mu, "scales": s},
    )


def funnel(
    dim: int = 10,
    scale: float = 3.0,
    seed: int = 0,
    dtype: torch.dtype = F64,
    num_draws: int = 10_000,
) -> SyntheticTarget:
    """Neal's funnel on ``(v, x_1..x_{d-1})``: ``v ~ N(0, s^2)``, ``x_i | v ~ N(0, e^v)``.

    ``log p = log N(v | 0, s^2) + sum_i [-x_i^2 e^{-v}/2 - v/2 - log(2 pi)/2]``.
    Exact: mean 0, ``Var v = s^2``, ``Var x_i = E e^v = e^{s^2/2}``, all covariances 0.
    """
    if dim < 2:
        raise ValueError(f"funnel needs dim >= 2, got {dim}")
    var = torch.full((dim,), math.exp(scale**2 / 2), dtype=F64)
    var[0] = scale**2

    def log_prob(x: Tensor) -> Tensor:
        v, rest = x[:, 0], x[:, 1:]
        inner = -0.5 * (rest * rest).sum(-1) * torch.exp(-v) - 0.5 * (dim - 1) * (v + LOG_2PI)
        return _normal_lpdf(v, scale**2) + inner

    def sampler(n: int, gen: torch.Generator) -> Tensor:
        v = scale * torch.randn(n, 1, generator=gen, dtype=F64)
        return torch.cat(
            [v, torch.exp(v / 2) * torch.randn(n, dim - 1, generator=gen, dtype=F64)], 1
        )

    return SyntheticTarget(
        log_prob,
        dim,
        f"funnel(d={dim}, scale={scale:g})",
        sampler=sampler,
        mean=torch.zeros(dim, dtype=F64),
        cov=torch.diag(var),
        seed=seed,
        num_draws=num_draws,
        dtype=dtype,
        params={"scale": scale},
    )


def banana(
    dim: int = 2,
    b: float = 0.1,
    scale: float = 10.0,
    seed: int = 0,
    dtype: torch.dtype = F64,
    num_draws: int = 10_000,
) -> SyntheticTarget:
    """Haario's twisted Gaussian: ``x_1 ~ N(0, s^2)``, ``x_2 = y_2 + b (x_1^2 - s^2)``,
    ``y_2 ~ N(0, 1)``, ``x_i ~ N(0, 1)`` for ``i >= 3``.

    The shear has unit Jacobian, so
    ``log p = log N(x_1 | 0, s^2) + log N(x_2 - b(x_1^2 - s^2) | 0, 1) + sum_{i>=3} log N(x_i)``.
    Exact: mean 0 (``E x_1^2 = s^2``); ``Var x_2 = 1 + b^2 Var(x_1^2) = 1 + 2 b^2 s^4``;
    ``Cov(x_1, x_2) = b E[x_1^3] = 0``; other covariances 0.
    """
    if dim < 2:
        raise ValueError(f"banana needs dim >= 2, got {dim}")
    var = torch.ones(dim, dtype=F64)
    var[0], var[1] = scale**2, 1.0 + 2.0 * b**2 * scale**4

    def log_prob(x: Tensor) -> Tensor:
        x1, y2 = x[:, 0], x[:, 1] - b * (x[:, 0] ** 2 - scale**2)
        return (
            _normal_lpdf(x1, scale**2) + _normal_lpdf(y2, 1.0) + _normal_lpdf(x[:, 2:], 1.0).sum(-1)
        )

    def sampler(n: int, gen: torch.Generator) -> Tensor:
        z = torch.randn(n, dim, generator=gen, dtype=F64)
        x1 = scale * z[:, 0]
        x2 = z[:, 1] + b * (x1**2 - scale**2)
        return torch.cat([x1[:, None], x2[:, None], z[:, 2:]], dim=1)

    return SyntheticTarget(
        log_prob,
        dim,
        f"banana(d={dim}, b={b:g}, scale={scale:g})",
        sampler=sampler,
        mean=torch.zeros(dim, dtype=F64),
        cov=torch.diag(var),
        seed=seed,
        num_draws=num_draws,
        dtype=dtype,
        params={"b": b, "scale": scale},
    )


KINDS: dict[str, Callable[..., SyntheticTarget]] = {
    "gaussian": gaussian,
    "gaussian_mixture": gaussian_mixture,
    "mixture": gaussian_mixture,
    "funnel": funnel,
    "banana": banana,
}


def make_target(kind: str, **kwargs: object) -> SyntheticTarget:
    """Build a synthetic target by name: ``make_target("funnel", dim=5)``.

    Raises:
        ValueError: unknown ``kind``; the message lists the valid kinds.
    """
    try:
        factory = KINDS[kind]
    except KeyError:
        raise ValueError(
            f"unknown synthetic target {kind!r}; valid kinds: {', '.join(KINDS)}"
        ) from None
    return factory(**kwargs)
