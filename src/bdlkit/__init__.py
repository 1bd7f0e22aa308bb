"""bdlkit: Bayesian deep learning made practical.

Data flow: problem (:class:`Target` or :class:`BayesianModel`) → algorithm
(``bdlkit.algorithms``) → :class:`Runner` (progress, checkpoints, sample store) →
samples or approximation (:class:`Result`) → BMA predictive → ``bdlkit.metrics``.
"""

from . import algorithms, collect, data, metrics, models, schedules
from .config import RunConfig
from .infer import infer
from .loading import load
from .problems import BayesianModel, IsotropicGaussian, Reference, Target
from .result import Result
from .runner import Interrupted, NonFiniteError, Runner

__version__ = "0.1.0"

__all__ = [
    "BayesianModel",
    "Interrupted",
    "IsotropicGaussian",
    "NonFiniteError",
    "Reference",
    "Result",
    "RunConfig",
    "Runner",
    "Target",
    "algorithms",
    "collect",
    "data",
    "infer",
    "load",
    "metrics",
    "models",
    "schedules",
]
