"""bdlkit: Bayesian deep learning made practical.

Data flow: problem (:class:`Target` or :class:`BayesianModel`) → algorithm
(``bdlkit.algorithms``) → :class:`Runner` (progress, checkpoints, sample store) →
samples or approximation (:class:`Result`) → BMA predictive → ``bdlkit.metrics``.
"""

from bdlkit import algorithms, data, metrics, models
from bdlkit.core import schedules
from bdlkit.core.errors import DefaultsWarning
from bdlkit.engine import collect
from bdlkit.engine.result import Result
from bdlkit.engine.runner import Interrupted, NonFiniteError, Runner
from bdlkit.evaluation import Evaluation, evaluate
from bdlkit.infer import infer
from bdlkit.problems import BayesianModel, IsotropicGaussian, Reference, Target
from bdlkit.runs.config import RunConfig
from bdlkit.runs.loading import load

__version__ = "0.2.0"

__all__ = [
    "BayesianModel",
    "DefaultsWarning",
    "Evaluation",
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
    "evaluate",
    "infer",
    "load",
    "metrics",
    "models",
    "schedules",
]
