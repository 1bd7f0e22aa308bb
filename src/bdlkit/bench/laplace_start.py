"""A common starting point for VI on a Target: the diagonal Laplace approximation.

Posteriordb posteriors have marginal scales from 1e-3 to 10 on the unconstrained space and
means tens of units from the origin. From q₀ = N(0, I), a first-order method with one
learning rate for every coordinate (Adam) cannot cover both (the suite's first quick run:
score_vi and advi reached 0.2 reference stds on 2 of 6 posteriors). Every method therefore
starts from the same q₀ = N(θ̂, diag(h)⁻¹), where

    θ̂ = argmax log π   (L-BFGS with a strong-Wolfe line search, from 0)
    h_i = −∂²log π/∂θ_i² at θ̂   (torch.func Hessian; h_i ≤ 0 or non-finite → scale 1)

implemented as a change of variables θ = θ̂ + s ⊙ z, s = h^{-1/2}, on which the methods
run from N(0, I)::

    log π_z(z) = log π(θ̂ + s ⊙ z) + Σ_i log s_i

The Jacobian term keeps π_z a density with the same normaliser, so the ELBO, mean errors
in reference stds and std ratios are identical in z and θ. Every Gaussian family used here
(diagonal and full) is closed under this map, so the best approximation is unchanged too;
only the starting point and the units of the learning rate differ. This is the role a
pretrained network plays for VI on a BNN (BayesDLL starts VI at the pretrained weights) and
what Pathfinder's L-BFGS start does for Stan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..problems import Reference, Target


@dataclass(frozen=True)
class LaplaceStart:
    """The mode ``shift`` (d,), the scales ``scale`` (d,) and how they were found."""

    shift: Tensor
    scale: Tensor
    message: str

    def to_z(self, theta: Tensor) -> Tensor:
        return (theta - self.shift) / self.scale


def find_mode(target: Target, max_iter: int = 500) -> Tensor:
    """``argmax log π`` by L-BFGS from the origin (float64); non-finite → the origin."""
    x = torch.zeros(target.dim, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([x], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-9, tolerance_change=1e-12)

    def closure() -> Tensor:
        opt.zero_grad()
        loss = -target.log_prob(x)
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    mode = x.detach()
    return mode if bool(torch.isfinite(mode).all()) else torch.zeros_like(mode)


def laplace_start(target: Target) -> LaplaceStart:
    """The diagonal Laplace start of ``target`` (module docstring). Never raises: if the
    mode search or the Hessian fails, or the "mode" is no better than the origin, the start
    falls back to N(0, I) (shift 0, scale 1) and ``message`` says why."""
    zeros = torch.zeros(target.dim, dtype=torch.float64)
    try:
        mode = find_mode(target)
        at_mode, at_zero = float(target.log_prob(mode)), float(target.log_prob(zeros))
        if not (math.isfinite(at_mode) and at_mode >= at_zero):
            raise ValueError(f"the mode search ended at log π = {at_mode:.4g}, not above "
                             f"log π(0) = {at_zero:.4g}")
        hess = torch.func.hessian(lambda x: -target.log_prob(x))(mode).diagonal()
    except Exception as exc:  # noqa: BLE001 -- a start must not stop a benchmark
        ones = torch.ones(target.dim, dtype=target.dtype)
        return LaplaceStart(shift=ones * 0, scale=ones,
                            message=f"fell back to N(0, I): {type(exc).__name__}: {exc}"[:300])
    scale = hess.clamp_min(1e-300).rsqrt()
    good = torch.isfinite(scale) & (scale > 0) & torch.isfinite(hess) & (hess > 0)
    scale = torch.where(good, scale, torch.ones_like(scale))
    bad = int((~good).sum())
    message = (f"mode log π = {at_mode:.4g}"
               + (f"; {bad} coordinates without positive curvature kept scale 1" if bad else ""))
    return LaplaceStart(shift=mode.to(target.dtype), scale=scale.to(target.dtype),
                        message=message)


def standardized(target: Target, start: LaplaceStart) -> Target:
    """``π_z(z) = π(θ̂ + s ⊙ z)·Π s_i`` as a Target, reference draws mapped to z."""
    shift, scale = start.shift, start.scale
    log_det = float(scale.log().sum())
    draws = target.reference.draws

    def log_prob(z: Tensor) -> Tensor:
        return target.log_prob(shift.to(z.dtype) + z * scale.to(z.dtype)) + log_det

    ref = Reference(draws=None if draws is None else start.to_z(draws.to(shift.dtype)))
    return Target(log_prob, target.dim, f"{target.name} (standardized)", reference=ref,
                  dtype=target.dtype)


__all__ = ["LaplaceStart", "find_mode", "laplace_start", "standardized"]
