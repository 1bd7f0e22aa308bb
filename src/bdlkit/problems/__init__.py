"""Inference problems: what is inferred (a log density or a network posterior)."""

from .bayesian_model import BayesianModel
from .likelihoods import Bernoulli, Categorical, Gaussian, GaussianPredictive, Likelihood
from .priors import IsotropicGaussian
from .target import Reference, Target

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
