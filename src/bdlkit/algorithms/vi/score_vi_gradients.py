"""The gradient solver's λ-gradients of score_vi's per-anchor loss (``docs/score_vi.md``).

:class:`~bdlkit.algorithms.vi.score_vi.ScoreVI` with ``solver="gradient"`` takes
``inner_steps`` optimiser steps per anchor q_t on the Rao-Blackwellised loss
(:func:`rb_gradients`; at λ = λ_t with ``precondition="sigma2"`` these are ADVI's
gradients, :func:`anchored_rb_gradients`) or on the plain Monte Carlo loss
(:func:`mc_gradients`), optionally divided by the loss's own diagonal curvature
(:func:`natural_precondition`). Per coordinate, with a = 1/σ² and S draws θ_k ~ q_t with
minibatch scores ŝ_k; every function works on pytrees (a Target's tensor or a network's
dict of tensors).
"""

from __future__ import annotations

from torch import Tensor

from bdlkit.algorithms.vi import score_vi_closed_form as closed_form
from bdlkit.algorithms.vi.common import elbo_gradients
from bdlkit.core.tree import TensorTree, tree_map, unzip_pairs
from bdlkit.families.diag_gaussian import DiagGaussianParams


def cross_term(lam_mu: Tensor, mu_t: Tensor, theta: Tensor, s: Tensor, centred: bool,
               antithetic: bool = False) -> Tensor:
    """mean_k (θ_k − μ) ŝ_k; ``centred``: its anchor part as the unbiased
    :func:`~.score_vi_closed_form.anchor_covariance`, plus (μ_t − μ)·ŝ̄ (same expectation)."""
    if not centred:
        return ((theta - lam_mu) * s).mean(0)
    estimator = "pair" if antithetic else "centred"
    return closed_form.anchor_covariance(theta, mu_t, s, estimator) + (mu_t - lam_mu) * s.mean(0)


def rb_gradients(lam: DiagGaussianParams, anchor: DiagGaussianParams, thetas: TensorTree,
                 scores: TensorTree, alpha: float, centred: bool = False,
                 antithetic: bool = False) -> DiagGaussianParams:
    """∇_λ of the Rao-Blackwellised loss (docs/vi.md).

    Per coordinate, with a = 1/σ²::

        ∂μ = 2(1+α) a² (μ − μ_t) − 2a·mean_k ŝ_k
        ∂a = α[2a(μ − μ_t)² − 2(a_t − a)σ_t²] + 2a(σ_t² + (μ_t − μ)²) + 2·mean_k (θ_k − μ) ŝ_k
        ∂ρ = −2a · ∂a
    """
    def per_leaf(mu, rho, mu_t, rho_t, theta, s):
        a, a_t = (-2 * rho).exp(), (-2 * rho_t).exp()
        var_t, dm = 1.0 / a_t, mu - mu_t
        cross = cross_term(mu, mu_t, theta, s, centred, antithetic)
        g_mu = 2 * (1 + alpha) * a**2 * dm - 2 * a * s.mean(0)
        g_a = alpha * (2 * a * dm**2 - 2 * (a_t - a) * var_t) + 2 * a * (var_t + dm**2) \
            + 2 * cross
        return g_mu, -2 * a * g_a

    return _per_leaf(per_leaf, lam, anchor, thetas, scores)


def anchored_rb_gradients(noise: TensorTree, scores: TensorTree,
                          num_data: float) -> DiagGaussianParams:
    """σ²-preconditioned :func:`rb_gradients` at λ = λ_t (K = 1), over 2N (μ) and 4N (ρ):
    ``−mean_k ŝ_k / N`` and ``−(1 + mean_k (θ_k − μ) ŝ_k) / N``, ADVI's gradients (the same
    function, :func:`~.common.elbo_gradients`, from the offsets ``noise`` = θ_k − μ)."""
    return elbo_gradients(scores, noise, -1.0 / num_data)


def natural_precondition(grads: DiagGaussianParams, lam: DiagGaussianParams,
                         anchor: DiagGaussianParams, alpha: float) -> DiagGaussianParams:
    """Divide by the per-anchor loss's diagonal curvature: ∂²/∂μ² = 2(1+α)a² and, near the
    argmin, ∂²/∂ρ² ≈ 8(1+α)a²(σ_t² + (μ − μ_t)²)."""
    def per_leaf(g_mu, g_rho, mu, rho, mu_t, rho_t):
        a2 = (-4 * rho).exp()
        h_rho = 8 * (1 + alpha) * a2 * ((2 * rho_t).exp() + (mu - mu_t) ** 2)
        return g_mu / (2 * (1 + alpha) * a2), g_rho / h_rho

    pairs = tree_map(per_leaf, grads.mu, grads.rho, lam.mu, lam.rho, anchor.mu, anchor.rho)
    mu, rho = unzip_pairs(pairs)
    return DiagGaussianParams(mu=mu, rho=rho)


def mc_gradients(lam: DiagGaussianParams, anchor: DiagGaussianParams, thetas: TensorTree,
                 scores: TensorTree, alpha: float) -> DiagGaussianParams:
    """∇_λ of the plain Monte Carlo loss (docs/vi.md).

    With R_k = (1+α) g_λ(θ_k) − α g_t(θ_k) − ŝ_k::

        ∂μ = mean_k 2 R_k / σ²,   ∂ρ = mean_k 4 R_k (θ_k − μ) / σ²
    """
    def per_leaf(mu, rho, mu_t, rho_t, theta, s):
        a, a_t = (-2 * rho).exp(), (-2 * rho_t).exp()
        r = (1 + alpha) * (-(theta - mu) * a) + alpha * (theta - mu_t) * a_t - s
        return (2 * r * a).mean(0), (4 * r * (theta - mu) * a).mean(0)

    return _per_leaf(per_leaf, lam, anchor, thetas, scores)


def _per_leaf(fn, lam, anchor, thetas, scores) -> DiagGaussianParams:
    mu, rho = unzip_pairs(tree_map(fn, lam.mu, lam.rho, anchor.mu, anchor.rho, thetas,
                                          scores))
    return DiagGaussianParams(mu=mu, rho=rho)


__all__ = ["anchored_rb_gradients", "cross_term", "mc_gradients", "natural_precondition",
           "rb_gradients"]
