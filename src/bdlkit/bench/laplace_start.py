"""The benchmarks' common start for VI on a Target: the diagonal Laplace approximation.

Posteriordb posteriors have marginal scales from 1e-3 to 10 on the unconstrained space and
means tens of units from the origin. From q₀ = N(0, I), a first-order method with one
learning rate for every coordinate (Adam) cannot cover both (the suite's first quick run:
score_vi and advi reached 0.2 reference stds on 2 of 6 posteriors). Every method therefore
starts from the same q₀ = N(θ̂, diag(h)⁻¹): each runs from N(0, I) on the target
standardized by its diagonal Laplace approximation, θ = θ̂ + s ⊙ z. The mode search, the
scales and the change of variables are bdlkit's own (:mod:`bdlkit.algorithms.vi.laplace`, also the
default start of ``bdlkit.infer`` for VI on a Target); this module names them for the
benchmarks.
"""

from __future__ import annotations

from bdlkit.algorithms.vi.laplace import LaplaceStart, find_mode, laplace_start, standardized

__all__ = ["LaplaceStart", "find_mode", "laplace_start", "standardized"]
