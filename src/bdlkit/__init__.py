"""bdlkit: Bayesian deep learning made practical.

Data flow: problem (:class:`Target` or :class:`BayesianModel`) → algorithm
(``bdlkit.algorithms``) → samples or approximation (:class:`Result`) → BMA
predictive → metrics.
"""

from . import algorithms, data, models, schedules
from .infer import NonFiniteError, infer
from .problems import BayesianModel, IsotropicGaussian, Reference, Target
from .result import Result, load

__version__ = "0.1.0"

__all__ = [
    "BayesianModel",
    "IsotropicGaussian",
    "NonFiniteError",
    "Reference",
    "Result",
    "Target",
    "algorithms",
    "data",
    "infer",
    "load",
    "models",
    "schedules",
]
