"""Inference problems: what is inferred (a log density or a network posterior)."""

from bdlkit.problems.bayesian_model import BayesianModel
from bdlkit.problems.likelihoods import (
    Bernoulli,
    Categorical,
    Gaussian,
    GaussianPredictive,
    Likelihood,
)
from bdlkit.problems.priors import IsotropicGaussian
from bdlkit.problems.target import Reference, Target

__all__ = [
    "BayesianModel",
    "Bernoulli",
    "Categorical",
    "Gaussian",
    "GaussianPredictive",
    "IsotropicGaussian",
    "Likelihood",
    "Reference",
    "Target",
]
