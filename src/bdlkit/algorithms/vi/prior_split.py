"""The prior's part of a minibatch score, for methods that apply a Gaussian prior exactly.

A BayesianModel's tempered score is ŝ(θ) = L̂(θ) + ∇log p(θ)/T, with L̂ the (discounted,
tempered) likelihood part. Its prior is an isotropic Gaussian N(m0, σ0² I), whose score is
affine: at a draw θ = m + σ ⊙ ε of a Gaussian q around the mean m,

    ∇log p(θ)/T = s_p − P·σε,      s_p = ∇log p(m)/T = −P (m − m0),      P = 1/(σ0² T)

so the likelihood part of every draw's score is L̂(θ) = ŝ(θ) − s_p + P·σε, from one
gradient of the prior at the mean. IVON (its weight decay δ = P·T/N_eff) and score_vi's
closed form use L̂ for their stochastic estimates (the gradient momentum, the curvature)
and s_p, P exactly: the prior adds no noise to either. A Target's density has no separate
prior: s_p = 0, P = 0, L̂ = ŝ.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bdlkit.core.flat import FlatProblem
from bdlkit.core.protocol import Problem
from bdlkit.core.tree import TensorTree, tree_leaves, tree_map, zeros_like
from bdlkit.problems import BayesianModel, Target
from bdlkit.problems.priors import IsotropicGaussian


@dataclass(frozen=True)
class PriorTerms:
    """The tempered prior at the mean: its score ``score`` = ∇log p(m)/T and its precision
    ``precision`` = P = 1/(σ0² T) (both zero for a Target)."""

    score: TensorTree
    precision: float


def prior_terms(problem: Problem, mean: TensorTree) -> PriorTerms:
    """The prior's score and precision at ``mean`` (module docstring): ``−P·m`` in one pass
    for BayesianModel's own zero-mean prior, else ``torch.func.grad`` of the log prior."""
    if isinstance(problem, Target):
        return PriorTerms(score=zeros_like(mean), precision=0.0)
    temp = float(problem.temperature)
    precision = 1.0 / (problem.prior.scale ** 2 * temp)
    if _zero_mean_gaussian(problem):
        return PriorTerms(score=tree_map(lambda m: torch.mul(m, -precision), mean),
                          precision=precision)
    score = torch.func.grad(problem.log_prior)(mean)
    return PriorTerms(score=tree_map(lambda g: g * (1.0 / temp), score), precision=precision)


def _zero_mean_gaussian(problem: Problem) -> bool:
    """Whether the log prior is :class:`~bdlkit.BayesianModel`'s own, an isotropic Gaussian
    of mean 0 (on the model or on its flat vector, :class:`~bdlkit.core.flat.FlatProblem`)."""
    model = problem.problem if isinstance(problem, FlatProblem) else problem
    return isinstance(model, BayesianModel) and type(model).log_prior is BayesianModel.log_prior \
        and type(model.prior) is IsotropicGaussian and not model.prior.means


def likelihood_scores(scores: TensorTree, noise: TensorTree, prior: PriorTerms) -> TensorTree:
    """L̂_k = ŝ_k − s_p + P·σε_k for stacked draws' scores and their offsets ``noise`` = σε_k
    from the mean (module docstring)."""
    if prior.precision == 0.0:
        return scores
    precision = unchecked(prior.precision, tree_leaves(scores)[0].device)
    return tree_map(lambda s, sp, e: torch.addcmul(s, e, precision).sub_(sp), scores,
                    prior.score, noise)


def unchecked(value: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """``value`` as a 0-dim float64 tensor on ``device`` (the operands' own: a three-input
    operation such as ``addcmul`` takes no CPU tensor beside CUDA ones): an operation takes it in its tensors' dtype
    without the range check of a scalar argument (``alpha=``, ``value=``), so a precision
    beyond float32's range, 1/(σ0²·T) at the ends of bdlkit's range, becomes inf in the
    arithmetic, as a product would, instead of raising."""
    return torch.tensor(value, dtype=torch.float64, device=device)


__all__ = ["PriorTerms", "likelihood_scores", "prior_terms", "unchecked"]
