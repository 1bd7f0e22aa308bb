"""The diagonal Laplace approximation of a Target, and the change of variables it defines.

A posterior's coordinates can differ in scale by orders of magnitude and sit far from the
origin (a regression on an uncentred covariate: intercept sd 10, slope sd 1e-2). A
first-order method with one learning rate for every coordinate (Adam) cannot cover both
from q₀ = N(0, I). The diagonal Laplace approximation supplies the location and the
scales::

    θ̂   = argmax log π                        (L-BFGS with a strong-Wolfe line search, from 0)
    h_i = −∂²log π/∂θ_i² at θ̂                 (exact Hessian diagonal, d Hessian-vector products)
    s_i = h_i^{-1/2}                          (h_i ≤ 0 or non-finite → s_i = 1)

and the affine change of variables θ = θ̂ + s ⊙ z, on which a method runs from N(0, I)::

    log π_z(z) = log π(θ̂ + s ⊙ z) + Σ_i log s_i

The Jacobian term keeps π_z a density with the same normaliser, so the ELBO and every
error measured in posterior stds are the same in z and θ; the Gaussian families are closed
under the map, so the best approximation is unchanged too (a diagonal q_z maps to
μ = θ̂ + s ⊙ μ_z, σ = s ⊙ σ_z, a full one to L = diag(s) L_z). Only the starting point and
the units of the learning rate change: in z every coordinate has curvature 1 at the mode.

:func:`bdlkit.infer` starts VI on a Target here by default (``start=``); the posteriordb
benchmark starts every method here (``bdlkit.bench.laplace_start``). This is the role a
pretrained network plays for VI on a BNN, and what Pathfinder's L-BFGS start does for Stan.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bdlkit.families.diag_gaussian import DiagGaussianParams
from bdlkit.families.full_gaussian import FullGaussianParams
from bdlkit.problems import Reference, Target

HVP_CHUNK = 256  # basis vectors per vectorised Hessian-vector product (memory ~ chunk · d)


@dataclass(frozen=True)
class LaplaceStart:
    """The mode ``shift`` (d,), the scales ``scale`` (d,) and how they were found.

    ``fallback`` is True when no usable mode was found and the start is N(0, I) (shift 0,
    scale 1); ``message`` then says why."""

    shift: Tensor
    scale: Tensor
    message: str
    fallback: bool = False

    def to_z(self, theta: Tensor) -> Tensor:
        return (theta - self.shift) / self.scale

    def to_theta(self, z: Tensor) -> Tensor:
        return self.shift.to(z.dtype) + self.scale.to(z.dtype) * z


def find_mode(target: Target, max_iter: int = 500) -> Tensor:
    """``argmax log π`` by L-BFGS from the origin (float64); non-finite → the origin."""
    x = torch.zeros(target.dim, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([x], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-9, tolerance_change=1e-12)

    def closure() -> Tensor:
        opt.zero_grad()
        loss = -target.log_prob_for_autograd(x)  # a given score= is its gradient
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    mode = x.detach()
    return mode if bool(torch.isfinite(mode).all()) else torch.zeros_like(mode)


def hessian_diagonal(fn: Callable[[Tensor], Tensor], x: Tensor,
                     chunk: int = HVP_CHUNK) -> Tensor:
    """The exact diagonal of ∇²fn at ``x`` (d,): Hessian-vector products with the unit
    vectors, ``chunk`` at a time (never the d × d matrix)."""
    grad = torch.func.grad(fn)

    def hvp(v: Tensor) -> Tensor:
        return torch.func.jvp(grad, (x,), (v,))[1]

    d = x.shape[0]
    out = torch.empty_like(x)
    with torch.enable_grad():
        for start in range(0, d, chunk):
            rows = torch.arange(start, min(start + chunk, d), device=x.device)
            basis = torch.zeros(len(rows), d, dtype=x.dtype, device=x.device)
            basis[torch.arange(len(rows)), rows] = 1.0
            out[rows] = torch.func.vmap(hvp)(basis)[torch.arange(len(rows)), rows]
    return out.detach()


def laplace_start(target: Target) -> LaplaceStart:
    """The diagonal Laplace start of ``target`` (module docstring). Never raises: if the
    mode search or the Hessian fails, or the "mode" is no better than the origin, the start
    is N(0, I) (shift 0, scale 1, ``fallback=True``) and ``message`` says why."""
    zeros = torch.zeros(target.dim, dtype=torch.float64)
    try:
        mode = find_mode(target)
        at_mode, at_zero = float(target.log_prob(mode)), float(target.log_prob(zeros))
        if not math.isfinite(at_mode) or at_mode < at_zero:
            raise ValueError(f"the mode search ended at log π = {at_mode:.4g}, not above "
                             f"log π(0) = {at_zero:.4g}")
        hess = hessian_diagonal(lambda x: -target.log_prob(x), mode)
    except Exception as exc:  # noqa: BLE001 -- a start must never stop a run
        ones = torch.ones(target.dim, dtype=target.dtype)
        return LaplaceStart(shift=ones * 0, scale=ones, fallback=True,
                            message=f"fell back to N(0, I): {type(exc).__name__}: {exc}"[:300])
    scale = hess.clamp_min(1e-300).rsqrt()
    good = torch.isfinite(scale) & (scale > 0) & torch.isfinite(hess) & (hess > 0)
    scale = torch.where(good, scale, torch.ones_like(scale))
    bad = int((~good).sum())
    message = (f"mode log π = {at_mode:.4g}"
               + (f"; {bad} coordinates without positive curvature kept scale 1" if bad else ""))
    return LaplaceStart(shift=mode.to(target.dtype), scale=scale.to(target.dtype),
                        message=message)


def log_det(start: LaplaceStart) -> float:
    """``Σ_i log s_i``: log π_z(z) − log π(θ) at every matching pair of points."""
    return float(start.scale.double().log().sum())


def standardized(target: Target, start: LaplaceStart) -> Target:
    """``π_z(z) = π(θ̂ + s ⊙ z)·Π s_i`` as a Target, reference draws mapped to z; a
    ``score=`` of ``target`` becomes ``s ⊙ score(θ̂ + s ⊙ z)``, the score of π_z."""
    jacobian = log_det(start)
    draws = target.reference.draws
    given = target.score_fn

    def log_prob(z: Tensor) -> Tensor:
        return target.log_prob(start.to_theta(z)) + jacobian

    def score(z: Tensor) -> Tensor:
        return start.scale.to(z.dtype) * given(start.to_theta(z))  # type: ignore[misc]

    ref = Reference(draws=None if draws is None else start.to_z(draws.to(start.shift.dtype)))
    return Target(log_prob, target.dim, f"{target.name} (standardized)", reference=ref,
                  dtype=target.dtype, score=None if given is None else score)


def gaussian_to_theta(lam: Any, start: LaplaceStart) -> Any:
    """A Gaussian λ on z mapped to θ = θ̂ + s ⊙ z: (μ, ρ) → (θ̂ + s μ, ρ + log s) for the
    diagonal family, (μ, L) → (θ̂ + s μ, diag(s) L) for the full one; anything else is
    returned as it is."""
    scale = start.scale
    if isinstance(lam, DiagGaussianParams):
        return DiagGaussianParams(mu=start.to_theta(lam.mu),
                                  rho=lam.rho + scale.to(lam.rho.dtype).log())
    if isinstance(lam, FullGaussianParams):
        return FullGaussianParams(mean=start.to_theta(lam.mean),
                                  chol=scale.to(lam.chol.dtype)[:, None] * lam.chol)
    return lam


def flow_to_theta(lam: dict[str, Tensor], start: LaplaceStart) -> dict[str, Tensor]:
    """A flow λ on z as the same flow on θ = θ̂ + s ⊙ z: its output is loc + e^ℓ ⊙ f⁻¹(ε),
    so loc → θ̂ + s ⊙ loc and ℓ → ℓ + log s, exactly (:mod:`bdlkit.families.flow`)."""
    scale = start.scale.to(lam["loc"].dtype)
    return {**lam, "loc": start.to_theta(lam["loc"]), "log_scale": lam["log_scale"] + scale.log()}


def state_to_theta(state: Any, start: LaplaceStart) -> Any:
    """A VI state of a run on z with its Gaussian fields mapped to θ by
    :func:`gaussian_to_theta`: λ, score_vi's anchor, the means (``MEAN_FIELDS``) and
    precisions (``PRECISION_FIELDS``, divided by s²) a state declares (IVON's m and h),
    and in a nested solver state the fields it declares (``GAUSSIAN_FIELDS``, e.g. the closed form's saved iterates, and
    ``PRECISION_FIELDS``, divided by s²). The rest (optimiser moments, generator state,
    step, counters) is kept as it is: the moments stay in z units and describe the z run."""
    changes: dict[str, Any] = {}
    for name in getattr(state, "FLOW_FIELDS", ()):  # a flow's affine output absorbs the map
        changes[name] = flow_to_theta(getattr(state, name), start)
    for name in getattr(state, "MEAN_FIELDS", ()):  # a state keeping m and a precision itself
        changes[name] = start.to_theta(getattr(state, name))
    for name in getattr(state, "PRECISION_FIELDS", ()):
        value = getattr(state, name)
        changes[name] = value / start.scale.to(value.dtype) ** 2
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        if f.name in changes:
            continue
        if isinstance(value, (DiagGaussianParams, FullGaussianParams)):
            changes[f.name] = gaussian_to_theta(value, start)
        elif hasattr(value, "GAUSSIAN_FIELDS"):
            changes[f.name] = dataclasses.replace(value, **{
                **{k: gaussian_to_theta(getattr(value, k), start)
                   for k in value.GAUSSIAN_FIELDS},
                **{k: getattr(value, k) / start.scale.to(getattr(value, k).dtype) ** 2
                   for k in getattr(value, "PRECISION_FIELDS", ())}})
    return dataclasses.replace(state, **changes)


__all__ = ["LaplaceStart", "find_mode", "gaussian_to_theta", "hessian_diagonal",
           "laplace_start", "log_det", "standardized", "state_to_theta"]
