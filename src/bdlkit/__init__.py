"""bdlkit: Bayesian deep learning made practical.

Data flow: problem (:class:`Target` or :class:`BayesianModel`) → algorithm
(``bdlkit.algorithms``) → :class:`Runner` (progress, checkpoints, sample store) →
samples or approximation (:class:`Result`) → BMA predictive → ``bdlkit.metrics``.

``import bdlkit`` loads none of this: each public name below is imported the first
time it is used (PEP 562 ``__getattr__``), so that ``import bdlkit`` and ``bdlkit
--help`` do not pay for torch (about 2 s) before they need it. Only :func:`infer` is
bound at import: its module imports its own dependencies inside the call, and binding
it here keeps ``bdlkit.infer`` the function even after ``bdlkit.infer``'s module is
imported (a submodule import would otherwise rebind the package attribute).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from bdlkit.infer import infer

__version__ = "0.2.0"

#: public name -> the module that defines it (a name equal to its module is a submodule)
_LAZY = {
    "BayesianModel": "bdlkit.problems",
    "DefaultsWarning": "bdlkit.core.errors",
    "Evaluation": "bdlkit.evaluation",
    "Interrupted": "bdlkit.engine.runner",
    "IsotropicGaussian": "bdlkit.problems",
    "NonFiniteError": "bdlkit.engine.runner",
    "Reference": "bdlkit.problems",
    "Result": "bdlkit.engine.result",
    "RunConfig": "bdlkit.runs.config",
    "Runner": "bdlkit.engine.runner",
    "Target": "bdlkit.problems",
    "algorithms": "bdlkit.algorithms",
    "collect": "bdlkit.engine.collect",
    "data": "bdlkit.data",
    "evaluate": "bdlkit.evaluation",
    "load": "bdlkit.runs.loading",
    "metrics": "bdlkit.metrics",
    "models": "bdlkit.models",
    "schedules": "bdlkit.core.schedules",
}

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


def __getattr__(name: str) -> Any:
    """Import a public name or a subpackage (``bdlkit.problems``) on first use (module
    docstring) and keep it."""
    if name not in _LAZY:
        if name.startswith("_") or importlib.util.find_spec(f"bdlkit.{name}") is None:
            raise AttributeError(f"module 'bdlkit' has no attribute {name!r}")
        return importlib.import_module(f"bdlkit.{name}")  # binds itself on the package
    module = importlib.import_module(_LAZY[name])
    value = module if module.__name__.rsplit(".", 1)[-1] == name else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, imported eagerly
    from bdlkit import algorithms, data, metrics, models
    from bdlkit.core import schedules
    from bdlkit.core.errors import DefaultsWarning
    from bdlkit.engine import collect
    from bdlkit.engine.result import Result
    from bdlkit.engine.runner import Interrupted, NonFiniteError, Runner
    from bdlkit.evaluation import Evaluation, evaluate
    from bdlkit.problems import BayesianModel, IsotropicGaussian, Reference, Target
    from bdlkit.runs.config import RunConfig
    from bdlkit.runs.loading import load
